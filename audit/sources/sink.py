"""The pair's findings file, as every source's recheck stage writes it: each row through the signature
catalog, each category counted. Spark's findings are streamed in batches, so memory stays bounded."""

from __future__ import annotations

import json
from pathlib import Path
from types import TracebackType
from typing import Any

import pyarrow.dataset as ds
import pyarrow.parquet as pq

from audit.diagnose import diagnose
from audit.findings import FINDINGS_SCHEMA, Finding, findings_table
from audit.layout import RunDir


def finding_from_row(row: dict[str, Any]) -> Finding:
    """A findings-schema row (its `detail` JSON) back into a Finding, so the catalog can read its evidence."""
    keep = {k: v for k, v in row.items() if k not in ("run_id", "pair", "kind", "detail")}
    return Finding(**keep, evidence=json.loads(row.get("detail") or "{}"))


class FindingsSink:
    """`with FindingsSink(run, pair, kind) as sink: sink.copy(spark_dir); sink.add(findings)`."""

    def __init__(self, run: RunDir, pair: str, kind: str) -> None:
        self.run, self.pair, self.kind = run, pair, kind
        self.counts: dict[str, int] = {}
        self.path = run.findings_file(pair)
        self._out: pq.ParquetWriter | None = None

    def __enter__(self) -> FindingsSink:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._out = pq.ParquetWriter(self.path, FINDINGS_SCHEMA, compression="zstd")
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None

    def add(self, findings: list[Finding]) -> None:
        rows = [f.to_row(self.run.run_id, self.pair, self.kind) for f in diagnose(self.kind, findings)]
        for row in rows:
            self.counts[row["category"]] = self.counts.get(row["category"], 0) + 1
        if rows:
            assert self._out is not None, "use FindingsSink as a context manager"
            self._out.write_table(findings_table(rows))

    def copy(self, spark_dir: Path) -> None:
        """Stream a Spark job's findings (findings-schema Parquet) into the file, batch by batch."""
        for batch in ds.dataset(spark_dir, format="parquet").to_batches(batch_size=10_000):
            self.add([finding_from_row(r) for r in batch.to_pylist()])
