"""What every source kind offers: three stages over a run directory. Backends describe themselves."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, Protocol

from audit.inventory import ConnResolver, Pair
from audit.layout import RunDir

Progress = Callable[[str, int, int | None], None]
"""progress(task_label, advance, total) for the CLI's progress bars; the library never prints."""


class Source(Protocol):
    KIND: ClassVar[str]
    SUITE: ClassVar[str]
    """File name in expectations/ of the GX suite that gates this kind."""
    ENDPOINT_HELP: ClassVar[str]

    def snapshot(self, pair: Pair, run: RunDir, resolver: ConnResolver | None, progress: Progress | None) -> None:
        """Capture both sides (data and replication state) under run.snapshot(pair, side)."""

    def diff(self, pair: Pair, run: RunDir) -> None:
        """Compare the snapshots with Spark; leave candidates and coverage metrics in the pair's state."""

    def recheck(self, pair: Pair, run: RunDir, resolver: ConnResolver | None) -> None:
        """Confirm candidates live, add state findings, diagnose, write findings and metrics."""
