"""Run the real CLI in-process (shares the test session's Spark), and read a run's outputs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest


def run_cli(args: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    from audit.cli.main import main

    monkeypatch.setattr(sys, "argv", ["replica-audit", *args])
    with pytest.raises(SystemExit) as exit_info:
        main()
    return int(exit_info.value.code or 0)


def write_inventory(path: Path, pairs: list[dict[str, Any]], **defaults: Any) -> Path:
    settings = {"recheck_interval_s": 0.3, "recheck_rounds": 3, **defaults}
    path.write_text(json.dumps({"defaults": settings, "pairs": pairs}))  # JSON is YAML
    return path


def latest_run(out: Path) -> Path:
    return max((p.parent for p in out.glob("*/manifest.json")), key=lambda p: p.stat().st_mtime)


def findings(run_root: Path) -> list[dict[str, Any]]:
    path = run_root / "findings.parquet"
    if not path.exists():
        return []
    rows: list[dict[str, Any]] = ds.dataset(path, format="parquet").to_table().to_pylist()
    return rows


def summary(run_root: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((run_root / "summary.json").read_text())
    return loaded
