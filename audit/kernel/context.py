"""What a check's stage is given: the pair, the run, the pair's state, connections and progress.

One :class:`StageContext` per (stage, check). Everything a check writes goes through it: metrics, its
own data slot, findings (staged, see audit.kernel.staging), its status (done or skipped, and why).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from audit.kernel.state import CheckState, MetricValue, PairState

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from audit.findings import Finding
    from audit.kernel.pair import PairBase
    from audit.kernel.staging import FindingsStaging
    from audit.layout import RunDir
    from audit.urls import ConnResolver

Progress = Callable[[str, int, int | None], None]
"""progress(task_label, advance, total) for the CLI's progress bars; the library never prints."""


@dataclass
class StageContext:
    stage: str
    check: str
    position: int
    """The check's place in its kind's list: orders staged findings."""
    pair: PairBase
    run: RunDir
    state: PairState
    staging: FindingsStaging
    resolver: ConnResolver | None = None
    progress: Progress | None = None
    deferred: list[Exception] = field(default_factory=list)
    """Errors raised by the pipeline once the stage's other work is done (see :meth:`fail_after`)."""

    # --- where things go ---------------------------------------------------------------------------
    @property
    def metrics(self) -> dict[str, MetricValue]:
        return self.state.metrics

    @property
    def data(self) -> dict[str, Any]:
        """This check's own JSON slot in the pair's state, for what it reads back in a later stage."""
        return self.state.check_data.setdefault(self.check, {})

    def work_dir(self) -> Path:
        """This check's scratch directory for the pair (Spark intermediates, candidates)."""
        return self.run.work(self.pair.name) / self.check

    def snapshot_dir(self, side: str) -> Path:
        return self.run.snapshot(self.pair.name, side)

    # --- status --------------------------------------------------------------------------------------
    def done(self, reason: str = "") -> None:
        self.state.checks[self.check] = CheckState(status="done", reason=reason)

    def skip(self, reason: str) -> None:
        """This check stops here for this pair: later stages do not call it; the summary says why."""
        self.skip_check(self.check, reason)

    def skip_check(self, name: str, reason: str) -> None:
        """Another check of the same kind cannot run (e.g. no keyspace diff against the wrong master)."""
        self.state.checks[name] = CheckState(status="skipped", reason=reason)

    def fail_after(self, error: Exception) -> None:
        """Part of the pair could not be audited (e.g. one shard of a cluster): the stage goes on with
        the rest, its findings are consolidated, and then the pipeline raises `error` for the pair
        (exit 3 for a source error, naming what was not audited)."""
        self.deferred.append(error)

    # --- findings --------------------------------------------------------------------------------------
    def add_findings(self, findings: Iterable[Finding]) -> None:
        self.staging.add(self.stage, self.position, self.check, findings)

    def add_findings_frame(self, frame: DataFrame) -> None:
        """A Spark DataFrame already in the findings schema (audit.diff.findings.to_findings)."""
        self.staging.add_frame(self.stage, self.position, self.check, frame)

    def add_findings_table(self, table: pa.Table) -> None:
        """Findings already in the driver (a small frame's `toArrow()`): written without a Spark job."""
        self.staging.add_table(self.stage, self.position, self.check, table)

    # --- connections -------------------------------------------------------------------------------
    def url(self, side: str) -> str | None:
        """The side's server URL with its secret (hand it to a client only; never print it)."""
        from audit.urls import endpoint_url

        return endpoint_url(getattr(self.pair, side), self.resolver)

    def spark(self) -> SparkSession:
        from audit.diff.spark import get_spark

        return get_spark()
