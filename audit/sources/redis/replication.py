"""Replication state of a Redis pair, from INFO replication and CLIENT LIST samples. Pure functions.

Evidence, not verdicts, is what the master's `slaveN:` line gives: `offset` is the last REPLCONF ACK
and `lag` the seconds since it. A replica attached with plain SYNC never acks (port=0, offset=0, lag
growing for ever; docs/incidents.md#redis_sync_no_ack), so for such an entry the lag is reported as
unreliable and the keyspace diff decides whether the data is fine.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from audit.findings import Finding
from audit.sources.redis.info import as_int, parse_client_list, replicas_listed

SAMPLE_GAP_S = 1.1
UNACKED_GAP_S = 3.0
"""How far apart the two samples are when the first lists a replica with no ack. `lag` counts whole
seconds of the server's cached clock, so two samples 1.1 s apart can read the same lag twice when the
first INFO was answered late; 3 s apart, a lag that only grows has grown."""


@dataclass(frozen=True, slots=True)
class Sample:
    """INFO replication of both sides, the replica read just before the master."""

    at_ms: int
    master: dict[str, Any]
    replica: dict[str, Any]
    master_clients_raw: str | None = None


def _resolve(host: str) -> str:
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host


def wrong_master(master: dict[str, Any], replica: dict[str, Any], master_host: str, master_port: int) -> Finding | None:
    """A `wrong_master` finding if the replica does not follow this pair's master, else None."""
    role = replica.get("role")
    if role not in ("slave", "replica"):
        return Finding("replication", "wrong_master", evidence={"replica_role": role, "reason": "not a replica"})
    linked = replica.get("master_link_status") == "up"
    same_stream = linked and replica.get("master_replid") == master.get("master_replid")
    follows = (str(replica.get("master_host", "")), as_int(replica.get("master_port"), -1))
    expected = (master_host, master_port)
    same_address = follows[1] == expected[1] and _resolve(follows[0]) == _resolve(expected[0])
    if same_stream or same_address:
        return None
    return Finding(
        "replication",
        "wrong_master",
        evidence={
            "follows": f"{follows[0]}:{follows[1]}",
            "expected": f"{expected[0]}:{expected[1]}",
            "replica_master_replid": replica.get("master_replid"),
            "master_replid": master.get("master_replid"),
        },
    )


def _pair_entry(master: dict[str, Any], replica_port: int) -> dict[str, Any] | None:
    return next((e for e in replicas_listed(master) if e.get("port") == replica_port), None)


def lag_of(sample: Sample, replica_port: int) -> tuple[int | None, int | None]:
    """(lag_bytes, lag_seconds) of the pair's replica: master offset minus the replica's processed offset."""
    m_off = as_int(sample.master.get("master_repl_offset"))
    r_off = as_int(sample.replica.get("slave_repl_offset"))
    entry = _pair_entry(sample.master, replica_port)
    if r_off is None and entry is not None:
        r_off = as_int(entry.get("offset"))
    lag_bytes = None if m_off is None or r_off is None else m_off - r_off
    lag_s = as_int(sample.replica.get("master_last_io_seconds_ago"))
    if lag_bytes is not None and lag_bytes <= 0 and sample.replica.get("master_link_status") == "up":
        # it has applied every write: a master with none to send pings only every repl-ping-replica-period
        # (10 s by default, raised by some), so the seconds since it last heard are silence, not lag
        lag_s = 0
    return lag_bytes, lag_s


def replication_findings(
    samples: Sequence[Sample], replica_port: int, max_lag_bytes: int | None, max_lag_seconds: float | None
) -> list[Finding]:
    """link_down, lagging, replica_ahead and lag_metric_unreliable from time-ordered samples."""
    if not samples:
        return []
    last = samples[-1]
    out: list[Finding] = []
    r = last.replica
    if r.get("master_link_status") != "up":
        out.append(
            Finding(
                "replication",
                "link_down",
                evidence={
                    "master_link_status": r.get("master_link_status"),
                    "master_link_down_since_seconds": as_int(r.get("master_link_down_since_seconds")),
                    "master_sync_in_progress": as_int(r.get("master_sync_in_progress")),
                },
            )
        )
    lag_bytes, lag_s = lag_of(last, replica_port)
    same_stream = r.get("master_replid") == last.master.get("master_replid")
    if lag_bytes is not None and lag_bytes < 0 and same_stream:
        out.append(
            Finding(
                "replication",
                "replica_ahead",
                bytes=-lag_bytes,
                evidence={
                    "master_repl_offset": as_int(last.master.get("master_repl_offset")),
                    "slave_repl_offset": as_int(r.get("slave_repl_offset")),
                },
            )
        )
    too_far = lag_bytes is not None and max_lag_bytes is not None and lag_bytes > max_lag_bytes
    too_old = lag_s is not None and max_lag_seconds is not None and lag_s > max_lag_seconds
    if r.get("master_link_status") == "up" and (too_far or too_old):
        out.append(
            Finding(
                "replication",
                "lagging",
                bytes=lag_bytes,
                evidence={
                    "lag_bytes": lag_bytes,
                    "lag_seconds": lag_s,
                    "max_lag_bytes": max_lag_bytes,
                    "max_lag_seconds": max_lag_seconds,
                },
            )
        )
    out.extend(_unacked_replicas(samples))
    return out


def unacked_entries(sample: Sample) -> list[dict[str, Any]]:
    """The master's replica entries with offset=0 once something was written (`master_repl_offset` > 0);
    with nothing written since the replicas attached, offset=0 is all there is to acknowledge."""
    if as_int(sample.master.get("master_repl_offset")) == 0:
        return []
    return [e for e in replicas_listed(sample.master) if e.get("offset") == 0]


def second_sample_gap_s(first_samples: Sequence[Sample]) -> float:
    """How long after the first samples to take the second ones (UNACKED_GAP_S if any lists no ack)."""
    return UNACKED_GAP_S if any(unacked_entries(s) for s in first_samples) else SAMPLE_GAP_S


def _unacked_replicas(samples: Sequence[Sample]) -> list[Finding]:
    """Entries the master lists with offset=0: replicas that never sent REPLCONF ACK.

    `redis-cli --replica` shows as port=0; a real replica that fell back to SYNC announced its
    listening port first (REPLCONF listening-port), so it shows its real port with offset=0. Either way
    the catalog wants a lag that only grows, or `cmd=sync` in CLIENT LIST, before it calls it
    REDIS_SYNC_NO_ACK (a replica that just attached has offset=0 until its first ack, a second later).
    """
    first, last = samples[0], samples[-1]
    clients = parse_client_list(last.master_clients_raw or "")
    out = []
    for entry in unacked_entries(last):
        earlier = next(
            (
                e
                for e in replicas_listed(first.master)
                if e.get("ip") == entry.get("ip") and e.get("port") == entry.get("port") and e.get("offset") == 0
            ),
            None,
        )
        lags = [earlier.get("lag") if earlier else None, entry.get("lag")]
        growing = None
        if earlier is not None and last.at_ms - first.at_ms >= 1000:
            growing = bool(isinstance(lags[0], int) and isinstance(lags[1], int) and lags[1] > lags[0])
        replica_clients = [
            c for c in clients if "S" in c.get("flags", "") and c.get("addr", "").rsplit(":", 1)[0] == entry.get("ip")
        ]
        cmds = sorted({c.get("cmd", "") for c in replica_clients})
        out.append(
            Finding(
                "replication",
                "lag_metric_unreliable",
                evidence={
                    "entry": entry.get("name"),
                    "slave_ip": entry.get("ip"),
                    "slave_port": entry.get("port"),
                    "ack_offset": 0,
                    "state": entry.get("state"),
                    "lag_samples_s": lags,
                    "sample_interval_ms": last.at_ms - first.at_ms,
                    "lag_growing": growing,
                    "client_cmd": "sync" if "sync" in cmds else (cmds[0] if cmds else None),
                    "client_idle_s": [as_int(c.get("idle")) for c in replica_clients],
                },
            )
        )
    return out
