"""The redis kind's replication check: who the replica follows, and its state over two samples.

snapshot: both servers' INFO (versions and roles for the summary); a replica that follows another
master is `wrong_master`, and the keyspace is then not diffed against this pair's master.
diff: the first INFO/CLIENT LIST sample. recheck: the second, at least a second later (a lag that only
grows needs two samples), then link_down, lagging, replica_ahead and lag_metric_unreliable.
"""

from __future__ import annotations

import json
import time
from contextlib import AbstractContextManager
from dataclasses import asdict
from typing import Any
from urllib.parse import urlsplit

import redis

from audit.errors import ConfigError
from audit.kernel.check import Check
from audit.kernel.context import StageContext
from audit.kernel.state import Offsets
from audit.sources.redis.client import connected_sides
from audit.sources.redis.info import as_int
from audit.sources.redis.model import RedisPair
from audit.sources.redis.replication import (
    Sample,
    lag_of,
    replication_findings,
    second_sample_gap_s,
    wrong_master,
)
from audit.sources.redis.snapshot import capture_state
from audit.urls import shown_server_url

SIDES = ("master", "replica")
_REPL_FIELDS = (
    "role",
    "master_host",
    "master_port",
    "master_link_status",
    "master_last_io_seconds_ago",
    "master_repl_offset",
    "slave_repl_offset",
    "master_replid",
    "connected_slaves",
)


def host_port(url: str, default_port: int = 6379) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "localhost", parts.port or default_port


def _repl_view(info: dict[str, Any]) -> dict[str, Any]:
    view = {k: info[k] for k in _REPL_FIELDS if k in info}
    view.update({k: v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)})
    return view


def take_sample(master: redis.Redis, replica: redis.Redis) -> Sample:
    """INFO replication of both sides (the replica first) and the master's CLIENT LIST."""
    r = capture_state(replica, with_clients=False)
    m = capture_state(master, with_clients=True)
    return Sample(
        at_ms=m["at_ms"],
        master=m["info_replication"],
        replica=r["info_replication"],
        master_clients_raw=m.get("client_list_raw"),
    )


def sleep_until(first_at_ms: float, gap_s: float) -> None:
    """Sleep until `gap_s` seconds after the first sample (at once if that time has passed)."""
    time.sleep(max(0.0, gap_s - (time.time() * 1000 - first_at_ms) / 1000))


def offsets_of(samples: list[Sample]) -> Offsets:
    """The master's replication offset and the replica's processed offset at each sample."""
    points = [
        (s.at_ms, _float(s.master.get("master_repl_offset")), _float(s.replica.get("slave_repl_offset")))
        for s in samples
    ]
    return Offsets(samples=[p for p in points if p[1] is not None or p[2] is not None])


def _float(value: Any) -> float | None:
    n = as_int(value)
    return float(n) if n is not None else None


class ReplicationCheck(Check):
    name = "replication"

    def __init__(self, pair: RedisPair) -> None:
        self.pair = pair

    def _clients(self, ctx: StageContext) -> AbstractContextManager[dict[str, redis.Redis]]:
        return connected_sides({side: str(ctx.url(side)) for side in SIDES}, self.pair.name)

    def snapshot(self, ctx: StageContext) -> None:
        with self._clients(ctx) as clients:
            states = {side: capture_state(c, with_clients=False) for side, c in clients.items()}
        for side, s in states.items():
            standalone_only(side, shown_server_url(ctx.url(side)), str(s["info_server"].get("redis_mode") or ""))
            ctx.state.servers[side] = {
                "endpoint": shown_server_url(ctx.url(side)),
                "version": s["info_server"].get("redis_version"),
                "role": s["info_replication"].get("role"),
            }
        if not self.pair.check_replication:
            ctx.skip("check_replication: false")
            return
        found = wrong_master(
            states["master"]["info_replication"],
            states["replica"]["info_replication"],
            *host_port(str(ctx.url("master"))),
        )
        if found is not None:
            ctx.add_findings([found])
            why = f"the replica does not follow this pair's master ({json.dumps(found.evidence, sort_keys=True)})"
            ctx.skip_check("keyspace", why)
            ctx.skip(why)

    def diff(self, ctx: StageContext) -> None:
        with self._clients(ctx) as clients:
            ctx.data["first_sample"] = asdict(take_sample(clients["master"], clients["replica"]))

    def recheck(self, ctx: StageContext) -> None:
        with self._clients(ctx) as clients:
            first = Sample(**ctx.data["first_sample"])
            sleep_until(first.at_ms, second_sample_gap_s([first]))
            samples = [first, take_sample(clients["master"], clients["replica"])]
        replica_port = host_port(str(ctx.url("replica")))[1]
        gate = self.pair.gate
        ctx.add_findings(replication_findings(samples, replica_port, gate.max_lag_bytes, gate.max_lag_seconds))
        lag_bytes, lag_s = lag_of(samples[-1], replica_port)
        ctx.metrics.update(lag_bytes=lag_bytes, lag_seconds=lag_s)
        ctx.state.replication_samples = [
            {"at_ms": s.at_ms, "master": _repl_view(s.master), "replica": _repl_view(s.replica)} for s in samples
        ]
        ctx.state.offsets = offsets_of(samples)
        ctx.done(f"{len(samples)} INFO samples")


_MODE_ENDPOINT = {
    "cluster": "{url: ..., topology: cluster}",
    "sentinel": "{sentinels: [host:port, ...], service: <name>} (the sentinels, not a data server)",
}


def standalone_only(side: str, shown: str, mode: str) -> None:
    """A plain URL names a standalone server: a cluster node read alone would be one shard's keys (the
    others answer MOVED, then count as not covered), a sentinel holds no data."""
    if mode in _MODE_ENDPOINT:
        raise ConfigError(
            f"{side} {shown}: the server runs in {mode} mode (INFO server: redis_mode:{mode}); "
            f"give this side as {_MODE_ENDPOINT[mode]}"
        )
