"""The live readers a fleet pair's recheck uses on each side: a cluster side read by slot (following MOVED
and ASK, audit/sources/redis/routing.py), a standalone or sentinel side on its one server."""

from __future__ import annotations

from typing import Any

from audit.kernel.context import StageContext
from audit.sources.redis.client import open_pipe
from audit.sources.redis.fleet_check import side_topology
from audit.sources.redis.keyspace_check import WINDOW_BYTES
from audit.sources.redis.resp import RespPipe


class SingleServer:
    """A standalone (or sentinel master) side for the migration recheck: one pipe, dbs selected per key."""

    def __init__(self, url: str, role: str) -> None:
        self.pipe = open_pipe(url, role=role)

    def close(self) -> None:
        self.pipe.close()


def fleet_nodes(ctx: StageContext) -> list[tuple[str, str]]:
    """Every node of either side, as (url, side)."""
    out = []
    for side in ("master", "replica"):
        topo = side_topology(ctx, side)
        out += [(n.url, side) for shard in (topo.shards if topo else []) for n in (shard.master, *shard.replicas)]
    return out


def side_reader(ctx: StageContext, side: str) -> Any:
    from audit.sources.redis.routing import ClusterKeyReader

    topo = side_topology(ctx, side)
    assert topo is not None
    if topo.kind == "cluster":
        page = ctx.pair.settings.big_key_elements  # type: ignore[attr-defined]
        return ClusterKeyReader(topo, page=page, window_bytes=WINDOW_BYTES)
    return SingleServer(topo.shards[0].master.url, f"pair {ctx.pair.name} {side}")


def pipes_for(master: Any, replica: Any) -> Any:
    """(db, key) -> the pipes holding the key on each side: a cluster side's slot owner, or the server."""

    def one(reader: Any, db: int, key: bytes) -> RespPipe:
        if isinstance(reader, SingleServer):
            reader.pipe.select(db)
            return reader.pipe
        pipe: RespPipe = reader.pipe_for(key)
        return pipe

    return lambda db, key: (one(master, db, key), one(replica, db, key))
