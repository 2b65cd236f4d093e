"""replica-audit: does the replica really hold what its master holds?

Library API (the CLI and the Airflow plugins use only these):
"""

from __future__ import annotations

from audit.errors import AuditError, ConfigError, SourceError
from audit.inventory import Inventory, Pair, load_inventory, parse_inventory
from audit.pipeline import audit_pair, finish_run, run_stage, start_run

__all__ = [
    "AuditError",
    "ConfigError",
    "Inventory",
    "Pair",
    "SourceError",
    "audit_pair",
    "finish_run",
    "load_inventory",
    "parse_inventory",
    "run_stage",
    "start_run",
]
