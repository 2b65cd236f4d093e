"""Replication state of a mysql pair (check `replication`): link, lag, missing and errant GTIDs.

Read-only, with SELECT plus the privilege the status command needs on the replica (MariaDB: SLAVE
MONITOR; MySQL: REPLICATION CLIENT). The order of reads is what keeps lag out of the verdicts:

1. the master's executed set M0, then the replica's status and applied set;
2. the replica waits (MASTER_GTID_WAIT / WAIT_FOR_EXECUTED_GTID_SET, at most `gtid_wait_s`) until it
   has applied M0, then its applied set R1 is read, then the master's set again, M1;
3. `missing_gtid` = M0 - R1 where the replica will not get them: holes below transactions it has
   (skipped), or anything while its link is down or the domain is filtered out. A tail the running
   replica has simply not applied yet is lag: `lagging` when it outlasts the wait (or the lag passes
   the thresholds given), with the distance in GTIDs and Seconds_Behind_Master;
4. `errant_gtid` = what the replica executed that the master never had, read after the replica: MySQL
   R1 - M1; MariaDB from both `gtid_binlog_state`s (gtid.mariadb_errant).
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from audit.findings import Finding
from audit.sources.mysql import gtid
from audit.sources.mysql.client import Server, connect_pair
from audit.sources.mysql.endpoint import MySQLEndpoint, MySQLSettings
from audit.sources.mysql.filters import Status, status_list

_RENAMES = (("Replica_", "Slave_"), ("Source_", "Master_"), ("_Source", "_Master"), ("_Replica", "_Slave"))


def normalise_status(row: Status) -> Status:
    """MySQL 8.0.22+ names (Replica_IO_Running, Source_Host, ...) as the older/MariaDB ones."""
    out = {}
    for name, value in row.items():
        for new, old in _RENAMES:
            name = name.replace(new, old)
        out[name] = value
    return out


def read_status(replica: Server) -> list[Status]:
    """Every replication connection/channel of `replica` (empty when it replicates from nobody)."""
    if replica.flavor == "mariadb":
        rows = replica.dicts("SHOW ALL SLAVES STATUS", "SHOW ALL SLAVES STATUS (replication state)")
    elif _version(replica.version) >= (8, 0, 22):
        rows = replica.dicts("SHOW REPLICA STATUS", "SHOW REPLICA STATUS (replication state)")
    else:  # MySQL before 8.0.22 only knows the old name
        rows = replica.dicts("SHOW SLAVE STATUS", "SHOW SLAVE STATUS (replication state)")
    return [normalise_status(r) for r in rows]


def _version(text: str) -> tuple[int, ...]:
    numbers = re.match(r"^(\d+)\.(\d+)\.(\d+)", text)
    return tuple(int(n) for n in numbers.groups()) if numbers else (0,)


def _resolve(host: str) -> str:
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host


@dataclass(frozen=True)
class MasterIdentity:
    host: str
    port: int
    server_id: str
    uuid: str | None


def following(rows: list[Status], master: MasterIdentity) -> Status | None:
    """The status row whose master is `master`: same uuid (MySQL), same address, or same server id."""
    for row in rows:
        if master.uuid and (row.get("Master_UUID") or "").lower() == master.uuid.lower():
            return row
        same_port = str(row.get("Master_Port")) == str(master.port)
        if same_port and _resolve(str(row.get("Master_Host") or "")) == _resolve(master.host):
            return row
    for row in rows:
        if row.get("Slave_IO_Running") == "Yes" and str(row.get("Master_Server_Id")) == master.server_id:
            return row
    return None


def link_up(row: Status) -> bool:
    return row.get("Slave_IO_Running") == "Yes" and row.get("Slave_SQL_Running") == "Yes"


def wrong_master_finding(rows: list[Status], master: MasterIdentity) -> Finding:
    if not rows:
        return Finding("replication", "wrong_master", evidence={"reason": "not a replica", "expected": _addr(master)})
    return Finding(
        "replication",
        "wrong_master",
        evidence={
            "reason": "replicates from another master",
            "expected": _addr(master),
            "expected_server_id": master.server_id,
            "follows": [
                {"master": f"{r.get('Master_Host')}:{r.get('Master_Port')}", "server_id": r.get("Master_Server_Id")}
                for r in rows
            ],
        },
    )


def _addr(master: MasterIdentity) -> str:
    return f"{master.host}:{master.port}"


def link_down_finding(row: Status) -> Finding:
    keep = (
        "Slave_IO_Running",
        "Slave_SQL_Running",
        "Slave_IO_State",
        "Last_IO_Errno",
        "Last_IO_Error",
        "Last_SQL_Errno",
        "Last_SQL_Error",
        "Connection_name",
        "Channel_Name",
    )
    evidence: dict[str, Any] = {k: row.get(k) for k in keep if row.get(k) not in (None, "")}
    evidence["last_error"] = row.get("Last_SQL_Error") or row.get("Last_IO_Error") or None
    return Finding("replication", "link_down", evidence=evidence)


def range_findings(category: str, ranges: list[gtid.GtidRange], **evidence: Any) -> list[Finding]:
    return [
        Finding(
            "replication",
            category,
            start=r.first,
            end=r.last,
            start_num=r.start,
            end_num=r.end,
            count=r.count,
            evidence={"source": r.source, **evidence},
        )
        for r in ranges
    ]


def split_missing(
    missing: gtid.GtidSet, applied: gtid.GtidSet, up: bool, ignored_sources: frozenset[str] = frozenset()
) -> tuple[list[gtid.GtidRange], list[gtid.GtidRange]]:
    """(lost, lag): ranges the replica will not get vs the tail a running replica is still applying."""
    lost, lag = [], []
    for r in missing.ranges():
        have = applied.sets.get(r.source, ())
        hole = bool(have) and have[-1][1] > r.end
        if hole or not up or r.source in ignored_sources:
            lost.append(r)
        else:
            lag.append(r)
    return lost, lag


@dataclass
class ReplicationAudit:
    findings: list[Finding]
    metrics: dict[str, float]
    state: dict[str, Any] = field(default_factory=dict)
    """Strings for the snapshot record: versions, server ids, GTID sets, the status row."""
    follows_master: bool = True
    """False when the replica follows another master (wrong_master): its rows are not to be diffed."""


def master_identity(master: Server, endpoint: MySQLEndpoint) -> MasterIdentity:
    uuid = master.text("SELECT @@GLOBAL.server_uuid") if master.flavor == "mysql" else None
    return MasterIdentity(endpoint.host, endpoint.port, master.text("SELECT @@GLOBAL.server_id"), uuid)


def _applied(replica: Server) -> str:
    var = "@@GLOBAL.gtid_slave_pos" if replica.flavor == "mariadb" else "@@GLOBAL.gtid_executed"
    return replica.text(f"SELECT {var}", "reading the replica's applied GTIDs")


def _binlog_state(server: Server) -> str:
    return server.text("SELECT @@GLOBAL.gtid_binlog_state", "reading the GTID binlog state")


def replication_findings(
    master_url: str,
    replica_url: str,
    settings: MySQLSettings | None = None,
    *,
    max_lag_seconds: float | None = None,
    max_lag_gtids: int | None = None,
) -> ReplicationAudit:
    """link_down, lagging, missing_gtid, errant_gtid and wrong_master of one pair (see the module doc)."""
    settings = settings or MySQLSettings()
    with connected(master_url, replica_url, settings) as (master, replica, m_ep):
        return audit_connected(master, replica, m_ep, settings, max_lag_seconds, max_lag_gtids)


@contextmanager
def connected(
    master_url: str, replica_url: str, settings: MySQLSettings
) -> Iterator[tuple[Server, Server, MySQLEndpoint]]:
    """A session on each side (read timeouts long enough for `gtid_wait_s`), closed on the way out."""
    m_ep = MySQLEndpoint.from_url(master_url, "master")
    r_ep = MySQLEndpoint.from_url(replica_url, "replica")
    master, replica = connect_pair(m_ep, r_ep, read_timeout_s=max(60.0, settings.gtid_wait_s + 30))
    try:
        yield master, replica, m_ep
    finally:
        master.close()
        replica.close()


def audit_connected(
    master: Server,
    replica: Server,
    m_ep: MySQLEndpoint,
    settings: MySQLSettings,
    max_lag_seconds: float | None,
    max_lag_gtids: int | None,
) -> ReplicationAudit:
    flavor = master.flavor
    ident = master_identity(master, m_ep)
    m0_text = master.gtid_position()
    rows = read_status(replica)
    r0_text = _applied(replica)
    state: dict[str, Any] = {
        "flavor": flavor,
        "versions": {"master": master.version, "replica": replica.version},
        "master_server_id": ident.server_id,
        "master_gtid_start": m0_text,
        "replica_applied_start": r0_text,
    }
    row = following(rows, ident)
    if row is None:
        state["status"] = rows
        return ReplicationAudit([wrong_master_finding(rows, ident)], {"wrong_master": 1.0}, state, False)
    state["status"] = row
    findings: list[Finding] = []
    up = link_up(row)
    if not up:
        findings.append(link_down_finding(row))
    m0, r0 = gtid.parse(flavor, m0_text), gtid.parse(flavor, r0_text)
    behind_before = len(m0 - r0)
    reached = replica.wait_for(m0_text, settings.gtid_wait_s) if up and behind_before else behind_before == 0
    r1_text = _applied(replica)
    r1_state = _binlog_state(replica) if flavor == "mariadb" else ""
    m1_text = master.gtid_position()
    m1_state = _binlog_state(master) if flavor == "mariadb" else ""
    state.update(replica_applied_end=r1_text, master_gtid_end=m1_text, replica_binlog_state=r1_state)

    # read once, after the replica's binlog state; domain lists and multi-source are MariaDB's
    others = _received_from_others(replica, row) if flavor == "mariadb" else ""
    r1 = gtid.parse(flavor, r1_text)
    ignored = _ignored_domains(row, m0)
    if ignored:
        r1 = gtid.parse(flavor, _without_domains(r1_text, ignored, others))
    lost, lag = split_missing(m0 - r1, r1, up, ignored)
    findings += range_findings("missing_gtid", lost, master_set=m0_text, replica_set=r1_text)
    if flavor == "mariadb":
        errant = gtid.mariadb_errant(r1_state, m1_state, r1_text, others)
    else:
        errant = r1 - gtid.parse(flavor, m1_text)
    findings += range_findings("errant_gtid", errant.ranges(), master_set=m1_text)

    seconds = _number(row.get("Seconds_Behind_Master"))
    behind_after = sum(r.count for r in lag)
    too_slow = up and not reached and behind_after > 0
    too_far = (max_lag_seconds is not None and seconds is not None and seconds > max_lag_seconds) or (
        max_lag_gtids is not None and behind_before > max_lag_gtids
    )
    if up and (too_slow or too_far):
        findings.append(
            Finding(
                "replication",
                "lagging",
                count=behind_after or behind_before,
                evidence={
                    "seconds_behind_master": seconds,
                    "sql_delay": int(row.get("SQL_Delay") or 0),  # MASTER_DELAY: behind by design
                    "gtids_behind": behind_before,
                    "gtids_behind_after_wait": behind_after,
                    "gtid_wait_s": settings.gtid_wait_s,
                    "max_lag_seconds": max_lag_seconds,
                    "max_lag_gtids": max_lag_gtids,
                },
            )
        )
    metrics = {
        "link_up": 1.0 if up else 0.0,
        "lag_gtids": float(behind_before),
        "lag_gtids_after_wait": float(behind_after),
        "missing_gtids": float(sum(r.count for r in lost)),
        "errant_gtids": float(len(errant)),
    }
    if seconds is not None:
        metrics["lag_seconds"] = seconds
    return ReplicationAudit(findings, metrics, state, True)


def _ignored_domains(row: Status, master: gtid.GtidSet) -> frozenset[str]:
    """The master's domains this connection does not replicate (IGNORE_DOMAIN_IDS, or outside
    DO_DOMAIN_IDS)."""

    do = frozenset(status_list(row, "Do_Domain_Ids"))
    outside = frozenset(d for d in master.sets if do and d not in do)
    return frozenset(status_list(row, "Ignore_Domain_Ids")) | outside


def _without_domains(position: str, domains: frozenset[str], others: str) -> str:
    """A MariaDB replica's position without `domains`, save what other connections received in them:
    a connection that ignores a domain still moves gtid_slave_pos past its transactions, which it never
    applies (they were counted as applied, and no missing_gtid was reported)."""
    keep = [g for g in gtid.parse_mariadb_list(position) if str(g[0]) not in domains]
    keep += [g for g in gtid.parse_mariadb_list(others) if str(g[0]) in domains]
    return ",".join(f"{d}-{s}-{q}" for d, s, q in keep)


def _received_from_others(replica: Server, row: Status) -> str:
    """The GTIDs the replica's other connections (multi-source) received, read after its binlog state:
    a connection's IO thread receives a transaction before it is applied and binlogged there."""
    name = row.get("Connection_name")
    rows = [r for r in read_status(replica) if r.get("Connection_name") != name]
    return ",".join(r.get("Gtid_IO_Pos") or "" for r in rows)


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value not in (None, "") else None
    except ValueError:
        return None
