"""Apache Airflow provider for replica-audit: connection types, hooks, operators, assets and DAGs.

Installed with pip into an Airflow 3.3 environment, Airflow finds it through the
`apache_airflow_provider` entry point (:func:`replica_audit_provider.get_provider_info.get_provider_info`);
nothing goes in the plugins folder or on PYTHONPATH. See docs/airflow-provider.md.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("airflow-provider-replica-audit")
except PackageNotFoundError:  # imported from a source tree that was not installed
    __version__ = "0.0.0"
