"""Replication state of a Pika pair from `INFO replication` samples, per database. Pure functions.

Pika's own `lag` figure is measured against what the master *sent*, not what the slave acked, and
reads `not syncing`/`full syncing` outside binlog sync, so the lag
reported here is computed from the per-DB `binlog_offset` of both sides instead, and a `lag` of 0
next to a slave whose offset stays behind is reported as unreliable.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass, field

from audit.findings import Finding
from audit.sources.pika.info import BinlogOffset, PikaReplication, SlaveEntry


@dataclass(frozen=True, slots=True)
class PikaSample:
    at_ms: int
    master: PikaReplication
    slave: PikaReplication
    raw: dict[str, str] = field(default_factory=dict)  # the INFO text, kept in the pair's state as evidence


def offset_lag(master: BinlogOffset, slave: BinlogOffset, file_size: int) -> int:
    """Bytes the slave's producer position is behind the master's (negative: ahead), as Pika computes it."""
    return (master.filenum - slave.filenum) * file_size + master.offset - slave.offset


def _same_host(a: str, b: str) -> bool:
    def resolve(h: str) -> str:
        try:
            return socket.gethostbyname(h)
        except OSError:
            return h

    return resolve(a) == resolve(b)


def wrong_master(slave: PikaReplication, master_host: str, master_port: int) -> Finding | None:
    """A `wrong_master` finding unless the slave follows this pair's master."""
    if not slave.is_slave:
        return Finding("replication", "wrong_master", evidence={"replica_role": slave.role, "reason": "not a slave"})
    if slave.master_port == master_port and _same_host(slave.master_host or "", master_host):
        return None
    return Finding(
        "replication",
        "wrong_master",
        evidence={"follows": f"{slave.master_host}:{slave.master_port}", "expected": f"{master_host}:{master_port}"},
    )


def slave_entry(master: PikaReplication, slave_port: int) -> SlaveEntry | None:
    return next((e for e in master.slaves if e.port == slave_port), None)


def pika_replication_findings(
    samples: Sequence[PikaSample], dbs: Sequence[int], slave_port: int, file_size: int, max_lag_bytes: int | None
) -> list[Finding]:
    """link_down, lagging, replica_ahead, lag_metric_unreliable per database from time-ordered samples."""
    if not samples:
        return []
    first, last = samples[0], samples[-1]
    out: list[Finding] = []
    s = last.slave
    down = [d for d in dbs if s.repl_connect_status.get(d, "connected") != "connected" or d in s.db_repl_state]
    if s.master_link_status != "up" and not down:
        down = list(dbs)
    for d in down:
        out.append(
            Finding(
                "replication",
                "link_down",
                db=d,
                evidence={
                    "master_link_status": s.master_link_status,
                    "repl_connect_status": s.repl_connect_status.get(d),
                    "db_repl_state": s.db_repl_state.get(d),
                },
            )
        )
    entry, first_entry = slave_entry(last.master, slave_port), slave_entry(first.master, slave_port)
    for d in dbs:
        m_off, s_off = last.master.binlog.get(d), s.binlog.get(d)
        if m_off is None or s_off is None:
            continue
        lag = offset_lag(m_off, s_off, file_size)
        lags = [
            offset_lag(p.master.binlog[d], p.slave.binlog[d], file_size)
            for p in samples
            if d in p.master.binlog and d in p.slave.binlog
        ]
        evidence = {
            "master_binlog_offset": str(m_off),
            "slave_binlog_offset": str(s_off),
            "lag_bytes": lag,
            "lag_bytes_samples": lags,
            "binlog_file_size": file_size,
        }
        if all(x < 0 for x in lags):
            out.append(
                Finding(
                    "replication",
                    "replica_ahead",
                    db=d,
                    bytes=-lag,
                    start=str(m_off),
                    end=str(s_off),
                    start_num=m_off.position,
                    end_num=s_off.position,
                    evidence=evidence,
                )
            )
        elif d not in down and max_lag_bytes is not None and lag > max_lag_bytes:
            out.append(
                Finding(
                    "replication", "lagging", db=d, bytes=lag, evidence={**evidence, "max_lag_bytes": max_lag_bytes}
                )
            )
        reported = entry.lag.get(d) if entry is not None else None
        earlier = first_entry.lag.get(d) if first_entry is not None else None
        stuck = len(lags) > 1 and all(x > 0 for x in lags) and first.slave.binlog.get(d) == s_off
        if (reported == 0 and earlier == 0 and stuck) or (isinstance(reported, str) and d not in down):
            out.append(
                Finding(
                    "replication",
                    "lag_metric_unreliable",
                    db=d,
                    evidence={
                        **evidence,
                        "master_reported_lag": reported,
                        "slave_state": s.repl_connect_status.get(d),
                        "reason": "lag=0 while the slave's offset stays behind"
                        if reported == 0
                        else f"master says {reported!r} while the slave says connected",
                    },
                )
            )
    return out


def lag_total(sample: PikaSample, dbs: Sequence[int], file_size: int) -> int | None:
    """The largest per-DB offset lag of a sample (what the gate's max_lag_bytes is about)."""
    lags = [
        offset_lag(sample.master.binlog[d], sample.slave.binlog[d], file_size)
        for d in dbs
        if d in sample.master.binlog and d in sample.slave.binlog
    ]
    return max(lags) if lags else None


def manifest_behind_info(
    side: str, db: int, info: BinlogOffset | None, manifest: tuple[int, int] | None
) -> Finding | None:
    """INFO is read just before the manifest, so the manifest can only be at or past INFO's binlog_offset.

    Behind it, the binlog directory given is not this server's (or is a stale copy): the offsets the
    server reports cannot be tied to the files audited, so its lag figures are not evidence here.
    """
    if info is None or manifest is None or manifest >= (info.filenum, info.offset):
        return None
    return Finding(
        "binlog",
        "lag_metric_unreliable",
        db=db,
        start=str(info),
        end=f"{manifest[0]}:{manifest[1]}",
        evidence={
            "side": side,
            "info_binlog_offset": str(info),
            "manifest_position": f"{manifest[0]}:{manifest[1]}",
            "reason": "the binlog directory's manifest is behind the server's binlog_offset",
        },
    )
