"""The terminal summary (audit/cli/render.py): what each kind compared, in its own unit."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from rich.console import Console

from audit.cli.render import print_summary


def _pair(name: str, coverage: dict[str, Any]) -> dict[str, Any]:
    return {
        "pair": name,
        "status": "passed",
        "counts": {},
        "diagnoses": {},
        "coverage": coverage,
        "not_covered": [],
        "skipped_checks": {},
        "gate": None,
    }


def test_each_kind_says_what_it_compared() -> None:
    # a passing MySQL pair once read "0 keys compared": its coverage counts rows
    summary = {
        "run_id": "r",
        "verdict": "passed",
        "pairs": [
            _pair("shop-db", {"tables_compared": 2, "rows_compared": 6}),
            _pair("cache", {"keys_compared": 1200, "master_keys": 1200}),
            _pair("files", {}),
        ],
    }
    out = io.StringIO()
    print_summary(Console(file=out, width=200), summary, Path("/run"))
    text = out.getvalue()
    assert "2 tables compared" in text and "6 rows compared" in text and "1,200 keys compared" in text
    assert " 0 keys compared" not in text
