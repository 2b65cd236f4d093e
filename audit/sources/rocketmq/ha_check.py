"""The rocketmq kind's HA check: the slave's ack offset against both stores' max offsets.

The max offsets come from the files (the commit-log check's metrics); the ack offset from the master's
broker log (`Slave fall behind master` lines, HA requests) or a saved `mqadmin haStatus`. Without
either, the ack is not checked, and the summary says so.
"""

from __future__ import annotations

from pathlib import Path

from audit.errors import SnapshotError
from audit.kernel.check import Check
from audit.kernel.context import StageContext
from audit.sources.rocketmq.model import RocketMQPair


def read_text(path: str | None, what: str, pair: str) -> str | None:
    if not path:
        return None
    try:
        return Path(path).read_text(errors="replace")
    except OSError as e:
        raise SnapshotError(f"pair {pair}: {what} {path}: cannot read: {e.strerror}", where=path) from None


class HaCheck(Check):
    name = "ha"

    def __init__(self, pair: RocketMQPair) -> None:
        self.pair = pair

    def snapshot(self, ctx: StageContext) -> None:
        if not self.pair.check_replication:
            ctx.skip("check_replication: false")

    def recheck(self, ctx: StageContext) -> None:
        from audit.sources.rocketmq.ha import ha_findings, parse_broker_log, parse_ha_status

        master = self.pair.master
        log = None
        if master.broker_log:
            lines: list[str] = []
            for path in [master.broker_log] if isinstance(master.broker_log, str) else master.broker_log:
                lines += (read_text(path, "broker_log", self.pair.name) or "").splitlines()
            log = parse_broker_log(lines)
        status_text = read_text(master.ha_status, "ha_status", self.pair.name)
        status = parse_ha_status(status_text) if status_text else []
        m = ctx.metrics

        def offset(name: str) -> int | None:
            value = m.get(name)
            return int(value) if value is not None else None

        ctx.add_findings(
            ha_findings(
                master_max=offset("master_max_offset"),
                replica_max=offset("replica_max_offset"),
                master_min=offset("master_min_offset"),
                log=log,
                ha_status=status,
                replica_addr=self.pair.replica.ha_addr,
            )
        )
        given = [w for w, v in (("broker_log", log), ("ha_status", status_text)) if v]
        ctx.done(
            f"max offsets from the files; ack offset from {', '.join(given)}"
            if given
            else "max offsets from the files only (no broker_log or ha_status given: the ack offset was not checked)"
        )
