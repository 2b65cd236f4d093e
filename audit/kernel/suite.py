"""A kind's GX suite: where its file lives, and which thresholds it reads (no GX import: the inventory uses this).

A suite's thresholds are suite parameters, ``{"$PARAMETER": "max_missing_on_replica"}``. The inventory
reads them to refuse a `gate:` key the pair's kind never checks (a `max_lag_bytes` on a MySQL pair
would otherwise be accepted and do nothing), and to give each kind only its own keys from
`defaults.gate`.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

EXPECTATIONS_DIR = Path(__file__).resolve().parents[1] / "expectations"
"""The suites, shipped inside the package. REPLICA_AUDIT_EXPECTATIONS points at a directory of edited ones."""
PARAMETER = "$PARAMETER"


def expectations_dir() -> Path:
    return Path(os.environ.get("REPLICA_AUDIT_EXPECTATIONS", EXPECTATIONS_DIR))


def suite_file(suite: str) -> Path:
    """A kind's suite (its KindSpec.suite: a file name in the expectations directory, or a path)."""
    return expectations_dir() / suite


def parameter_name(value: Any) -> str | None:
    """The parameter name when `value` is `{"$PARAMETER": name}`, else None."""
    return str(value[PARAMETER]) if isinstance(value, dict) and PARAMETER in value else None


def suite_parameters(suite: str) -> frozenset[str] | None:
    """The parameters the kind's suite reads; None when the suite cannot be read or parsed here.

    None leaves the judgement to the gate, which reads the suite again and names what is wrong with
    it: a command that never gates (a snapshot) must not fail on a suite it does not use.
    """
    path = suite_file(suite)
    try:
        stat = path.stat()
    except OSError:
        return None
    return _parameters(str(path), stat.st_mtime_ns, stat.st_size)


@cache
def _parameters(path: str, _mtime_ns: int, _size: int) -> frozenset[str] | None:
    try:
        spec = json.loads(Path(path).read_text(encoding="utf-8"))
        expectations = spec["expectations"]
        found = {
            name
            for exp in expectations
            for value in (exp.get("kwargs") or {}).values()
            if (name := parameter_name(value)) is not None
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return frozenset(found)
