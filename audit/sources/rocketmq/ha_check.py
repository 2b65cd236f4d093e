"""The rocketmq kind's HA check: the slave's ack offset against both stores' max offsets.

The max offsets come from the files (the commit-log check's metrics); the ack offset from the master's
broker log (`Slave fall behind master` lines, HA requests) or a saved `mqadmin haStatus`. Without
either, the ack is not checked, and the summary says so. A given file that is not what it claims is
never taken as "checked": binary data or a haStatus file without a status block is an error naming the
file (exit 3), and broker logs without a single HA line leave the ack unchecked, which the gate counts
as uncovered. A saved `mqadmin brokerStatus` of either side gives that broker's own commitLogMaxOffset,
kept next to the offset read from its files (docs/formats/rocketmq-commitlog.md, "Min and max offsets").
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from audit.errors import SnapshotError
from audit.kernel.check import Check, Uncovered
from audit.kernel.context import StageContext
from audit.kernel.state import MetricValue
from audit.sources.rocketmq.model import RocketMQPair, StoreEndpoint

if TYPE_CHECKING:
    from audit.sources.rocketmq.ha import BrokerLog

ACK_EVIDENCE = "ha_ack_evidence"
"""HA lines parsed from the broker logs and haStatus blocks (absent when neither was given): 0 means the
files given held nothing to check the ack offset with."""


def read_text(path: str | None, what: str, pair: str) -> str | None:
    """The file's text; an error naming it when it cannot be read or holds binary data (NUL bytes)."""
    if not path:
        return None
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise SnapshotError(f"pair {pair}: {what} {path}: cannot read: {e.strerror}", where=path) from None
    if b"\0" in data:
        raise SnapshotError(
            f"pair {pair}: {what} {path}: binary data, not a text file: nothing parsable was found", where=path
        )
    return data.decode(errors="replace")


def _paths(value: str | list[str] | None) -> list[str]:
    return [] if not value else [value] if isinstance(value, str) else list(value)


class HaCheck(Check):
    name = "ha"

    def __init__(self, pair: RocketMQPair) -> None:
        self.pair = pair

    def snapshot(self, ctx: StageContext) -> None:
        if not self.pair.check_replication:
            ctx.skip("check_replication: false")

    def uncovered(self, metrics: Mapping[str, MetricValue]) -> list[Uncovered]:
        if metrics.get(ACK_EVIDENCE) == 0:
            reason = "broker_log holds no 'slave fall behind master' or 'request offset' line: ack offset not checked"
            return [Uncovered(1, reason)]
        return []

    def _status_offsets(self, ctx: StageContext, stores: Mapping[str, StoreEndpoint]) -> list[str]:
        """Each side's brokerStatus commitLogMaxOffset as a metric, and the difference from its files'."""
        from audit.sources.rocketmq.ha import max_offset_from_status

        said = []
        for side in ("master", "replica"):
            path = stores[side].broker_status
            text = read_text(path, "broker_status", self.pair.name)
            if text is None:
                continue
            value = max_offset_from_status(text)
            if value is None:
                raise SnapshotError(
                    f"pair {self.pair.name}: broker_status {path}: no commitLogMaxOffset found: nothing parsable",
                    where=str(path),
                )
            ctx.metrics[f"{side}_status_max_offset"] = value
            files = ctx.metrics.get(f"{side}_max_offset")
            if files is not None:
                ctx.metrics[f"{side}_status_offset_diff"] = int(files) - value
            said.append(f"{side} brokerStatus max offset {value} (files: {files})")
        return said

    def recheck(self, ctx: StageContext) -> None:
        from audit.sources.rocketmq.ha import ha_findings, parse_broker_log, parse_ha_status

        # each side once: a conn:<id> store is a lookup in Airflow's connections
        stores = {side: self.pair.store(side, ctx.resolver) for side in ("master", "replica")}
        master, name = stores["master"], self.pair.name
        log = None
        if logs := _paths(master.broker_log):
            lines: list[str] = []
            for path in logs:
                lines += (read_text(path, "broker_log", name) or "").splitlines()
            log = parse_broker_log(lines)
        status_text = read_text(master.ha_status, "ha_status", name)
        status = parse_ha_status(status_text) if status_text is not None else []
        if status_text is not None and not status:
            raise SnapshotError(
                f"pair {name}: ha_status {master.ha_status}: no mqadmin haStatus block found: nothing parsable",
                where=str(master.ha_status),
            )
        m = ctx.metrics
        if log is not None or status:
            m[ACK_EVIDENCE] = (0 if log is None else len(log.lags) + len(log.requests)) + len(status)

        def offset(key: str) -> int | None:
            value = m.get(key)
            return int(value) if value is not None else None

        ctx.add_findings(
            ha_findings(
                master_max=offset("master_max_offset"),
                replica_max=offset("replica_max_offset"),
                master_min=offset("master_min_offset"),
                log=log,
                ha_status=status,
                replica_addr=stores["replica"].ha_addr,
            )
        )
        said = self._status_offsets(ctx, stores)
        ctx.done("; ".join([_ack_source(log, logs, bool(status)), *said]))


def _ack_source(log: BrokerLog | None, logs: list[str], status: bool) -> str:
    """Where the ack offset came from, for the check's status line."""
    given = []
    if log is not None and (log.lags or log.requests):
        given.append(f"broker_log ({len(log.lags) + len(log.requests)} HA lines)")
    if status:
        given.append("ha_status")
    if given:
        return f"max offsets from the files; ack offset from {', '.join(given)}"
    if log is not None:
        return f"ack offset not checked: no HA line in broker_log {', '.join(logs)} (nothing parsable)"
    return "max offsets from the files only (no broker_log or ha_status given: the ack offset was not checked)"
