"""replica-audit: does the replica really hold what its master holds?

Library API (the CLI and the Airflow provider use only these). The names load on first use (PEP 562), so
importing one module of the package (a snapshot process imports the Redis reader only) does not load
the pipeline and what it needs (pandas, pyarrow.dataset): about 0.3 s of CPU per process.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from audit.errors import AuditError, ConfigError, SourceError
    from audit.inventory import Inventory, Pair, load_inventory, parse_inventory
    from audit.pipeline import audit_pair, finish_run, run_stage, start_run

_HOME = {
    "AuditError": "audit.errors",
    "ConfigError": "audit.errors",
    "SourceError": "audit.errors",
    "Inventory": "audit.inventory",
    "Pair": "audit.inventory",
    "load_inventory": "audit.inventory",
    "parse_inventory": "audit.inventory",
    "audit_pair": "audit.pipeline",
    "finish_run": "audit.pipeline",
    "run_stage": "audit.pipeline",
    "start_run": "audit.pipeline",
}
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


def __getattr__(name: str) -> object:
    home = _HOME.get(name)
    if home is None:  # also how `from audit import defaults` finds that a submodule must be imported
        raise AttributeError(f"module 'audit' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
