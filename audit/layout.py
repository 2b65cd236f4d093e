"""Where one run's files live (DESIGN.md "Output of one run"), and the per-pair state between stages.

`findings.parquet` and `metrics.parquet` are Parquet datasets (directories): each pair's stage writes
its own file inside, so mapped Airflow tasks never write the same file.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from audit.errors import StageInputError


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(2)


@dataclass(frozen=True)
class RunDir:
    out: Path
    run_id: str

    @property
    def root(self) -> Path:
        return self.out / self.run_id

    def snapshot(self, pair: str, side: str) -> Path:
        return self.root / "snapshots" / pair / side

    def work(self, pair: str) -> Path:
        return self.root / "work" / pair

    def findings_file(self, pair: str) -> Path:
        return self.root / "findings.parquet" / f"{pair}.parquet"

    def metrics_file(self, pair: str) -> Path:
        return self.root / "metrics.parquet" / f"{pair}.parquet"

    def gate_dir(self) -> Path:
        return self.root / "gate"

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def report(self) -> Path:
        return self.root / "report.html"

    # --- per-pair state shared by the stages -------------------------------------------------------
    def state_file(self, pair: str) -> Path:
        return self.work(pair) / "state.json"

    def load_state(self, pair: str) -> dict[str, Any]:
        path = self.state_file(pair)
        if not path.exists():
            return {"pair": pair, "checks": {}, "metrics": {}, "stages": {}}
        loaded: dict[str, Any] = json.loads(path.read_text())
        return loaded

    def save_state(self, pair: str, state: dict[str, Any]) -> None:
        write_json(self.state_file(pair), state)

    def require_stage(self, pair: str, stage: str) -> dict[str, Any]:
        state = self.load_state(pair)
        if stage not in state["stages"]:
            raise StageInputError(f"pair {pair}: no `{stage}` results in {self.root}; run that stage first")
        return state


def write_json(path: Path, data: Any) -> None:
    """Write atomically: a reader never sees half a file, even if the writer is killed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=str))
    tmp.replace(path)
