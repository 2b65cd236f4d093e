"""Findings staged by checks at any stage, consolidated into the pair's findings file at the end.

A check stages findings as it finds them: a Python list (written as one small Parquet file) or a Spark
DataFrame in the findings schema (written by Spark as a directory). Each file is named after the stage,
the check's place in the kind and the check, so a stage that runs again (an Airflow retry, a resumed
run) first clears only its own files, and consolidation reads them in a stable order.

Consolidation streams every staged file, batch by batch, through the signature catalog into
``findings.parquet/<pair>.parquet`` and counts each category: memory stays bounded however many
findings a Spark job produced.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from audit.diagnose import diagnose
from audit.findings import FINDINGS_SCHEMA, Finding, findings_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

STAGE_ORDER = ("snapshot", "diff", "recheck")
_BATCH_ROWS = 10_000


def finding_from_row(row: dict[str, Any]) -> Finding:
    """A findings-schema row (its `detail` JSON) back into a Finding, so the catalog can read its evidence."""
    keep = {k: v for k, v in row.items() if k not in ("run_id", "pair", "kind", "detail")}
    return Finding(**keep, evidence=json.loads(row.get("detail") or "{}"))


class FindingsStaging:
    """The staged findings of one pair: `work/<pair>/findings/`."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _prefix(self, stage: str) -> str:
        return f"{STAGE_ORDER.index(stage)}-{stage}"

    def clear(self, stage: str) -> None:
        """Forget what an earlier attempt of `stage` staged."""
        if not self.root.is_dir():
            return
        for p in self.root.glob(f"{self._prefix(stage)}.*"):
            shutil.rmtree(p) if p.is_dir() else p.unlink()

    def _next_path(self, stage: str, position: int, check: str, suffix: str) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        stem = f"{self._prefix(stage)}.{position:02d}-{check}"
        n = sum(1 for _ in self.root.glob(f"{stem}.*"))
        return self.root / f"{stem}.{n:04d}.{suffix}"

    def add(self, stage: str, position: int, check: str, findings: Iterable[Finding]) -> None:
        rows = [f.to_row(None, None, None) for f in findings]
        if rows:
            pq.write_table(findings_table(rows), self._next_path(stage, position, check, "parquet"))

    def add_table(self, stage: str, position: int, check: str, table: pa.Table) -> None:
        """An Arrow table in the findings schema, as a Spark frame's `toArrow()` gives it."""
        if table.num_rows:
            pq.write_table(table, self._next_path(stage, position, check, "parquet"))

    def add_frame(self, stage: str, position: int, check: str, frame: DataFrame) -> None:
        """A Spark DataFrame in the findings schema (see audit.diff.findings.to_findings)."""
        frame.write.mode("overwrite").parquet(str(self._next_path(stage, position, check, "spark")))

    def staged(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.iterdir() if p.suffix in (".parquet", ".spark"))

    def consolidate(self, out: Path, run_id: str, pair: str, kind: str) -> dict[str, int]:
        """Diagnose every staged finding, write them to `out`, and return the count per category."""
        counts: dict[str, int] = {}
        out.parent.mkdir(parents=True, exist_ok=True)
        with pq.ParquetWriter(out, FINDINGS_SCHEMA, compression="zstd") as writer:
            for path in self.staged():
                for batch in _batches(path):
                    found = diagnose(kind, [finding_from_row(r) for r in batch.to_pylist()])
                    rows = [f.to_row(run_id, pair, kind) for f in found]
                    for row in rows:
                        counts[row["category"]] = counts.get(row["category"], 0) + 1
                    if rows:
                        writer.write_table(findings_table(rows))
        return counts


def _batches(path: Path) -> Iterator[pa.RecordBatch]:
    yield from ds.dataset(path, format="parquet").to_batches(batch_size=_BATCH_ROWS)
