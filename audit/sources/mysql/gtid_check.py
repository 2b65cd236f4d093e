"""The mysql kind's replication check: the replica's threads and its GTID set against the master's.

snapshot: server versions; and, with check_replication, link_down, lagging, missing_gtid, errant_gtid
or wrong_master (audit/sources/mysql/replication.py). A replica that follows another master is not
compared row by row against this pair's master.
"""

from __future__ import annotations

import json

from audit.kernel.check import Check
from audit.kernel.context import StageContext
from audit.kernel.identity import refuse_one_server
from audit.sources.mysql.model import MySQLPair
from audit.urls import shown_server_url

SIDES = ("master", "replica")


class GtidCheck(Check):
    name = "replication"

    def __init__(self, pair: MySQLPair) -> None:
        self.pair = pair

    def snapshot(self, ctx: StageContext) -> None:
        from audit.sources.mysql.replication import audit_connected, connected

        for side in SIDES:
            ctx.state.servers[side] = {"endpoint": shown_server_url(ctx.url(side)), "version": None}
        settings = self.pair.settings
        with connected(str(ctx.url("master")), str(ctx.url("replica")), settings) as (master, replica, m_ep):
            # both endpoints leading to one server are an inventory mistake, found before any table is read
            identities = {"master": master.identity(), "replica": replica.identity()}
            refuse_one_server(ctx.pair.name, identities, "server id")
            if not self.pair.check_replication:
                ctx.skip("check_replication: false")
                return
            audit = audit_connected(master, replica, m_ep, settings, self.pair.gate.max_lag_seconds, None)
        ctx.add_findings(audit.findings)
        ctx.metrics.update(audit.metrics)
        for side in SIDES:
            ctx.state.servers[side]["version"] = (audit.state.get("versions") or {}).get(side)
        ctx.data["state"] = json.loads(json.dumps(audit.state, default=str))
        if not audit.follows_master:
            why = "the replica does not follow this pair's master (wrong_master)"
            ctx.skip_check("rows", why)
            ctx.skip(why)
            return
        ctx.done(f"GTID sets of both sides ({audit.state.get('flavor')})")
