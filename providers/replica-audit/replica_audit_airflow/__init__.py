"""The name the Airflow plugin had before it became the provider `replica_audit_provider`; kept for existing DAGs.

`from replica_audit_airflow.assets import pair_asset` (and `.hooks`, `.operators`) still work; new
code imports from `replica_audit_provider`.
"""

from __future__ import annotations

import warnings

warnings.warn(
    "replica_audit_airflow is now replica_audit_provider (the airflow-provider-replica-audit distribution)",
    DeprecationWarning,
    stacklevel=2,
)
