"""A check: one thing a kind audits, stage by stage (template methods the pipeline calls in order).

A kind is a list of checks with their settings. The pipeline calls ``snapshot``, ``diff`` and
``recheck`` of each check in the kind's order, each with a :class:`~audit.kernel.context.StageContext`;
a check does only its own work there (read, compare, stage findings, set metrics). What it must not do
is bookkeeping: loading and saving the state, stamping stages, writing the findings file and counting
it are the pipeline's.

A check also declares what the summary, the gate and the report need to know without naming a kind:
its coverage metrics (shown under "coverage") and what it could not cover (:meth:`Check.uncovered`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from audit.kernel.state import MetricValue, PairState

if TYPE_CHECKING:
    from audit.kernel.context import StageContext
    from audit.layout import RunDir


@dataclass(frozen=True, slots=True)
class Uncovered:
    """Something asked for that the audit could not compare: `count` units, and why.

    `gated` ones count toward the gate's `uncovered` column (max_uncovered, 0 by default); the others
    are only listed under "not covered" in the summary (they are reported some other way, e.g. as
    findings that were not re-checked live).
    """

    count: int
    reason: str
    gated: bool = True


class Check:
    """Base class of every check; override the stages the check takes part in."""

    name: ClassVar[str]
    """The findings' `check` column and the key of the check's status in the pair's state."""
    coverage: ClassVar[tuple[str, ...]] = ()
    """Metric names that say how much this check covered (keys, records, bytes per side, compared)."""

    def snapshot(self, ctx: StageContext) -> None:
        """Capture what each side holds (files, keys, server state) under the run directory."""

    def diff(self, ctx: StageContext) -> None:
        """Compare the captures (Spark); stage findings or candidates for the recheck."""

    def recheck(self, ctx: StageContext) -> None:
        """Confirm candidates live, sample replication state; stage the findings that persist."""

    def uncovered(self, metrics: Mapping[str, MetricValue]) -> list[Uncovered]:
        """What this check was asked to compare and could not, from the pair's metrics."""
        return []

    def certify(self, run: RunDir, state: PairState, side: str) -> dict[str, Any]:
        """What a verification certificate states about one side's content (e.g. an order-independent
        content digest); empty when the check has nothing to certify."""
        return {}
