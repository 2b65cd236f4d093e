"""A fleet pair's sides between stages: each side's endpoint, and its discovered topology without secrets.

Stages may run in different processes (an Airflow task each), so the topology found at `snapshot` is
kept in the pair's state, which is a file: node URLs (they hold credentials) are left out and rebuilt
from the pair's endpoint when read back (:func:`topology_from_json`). Keeping the snapshot's topology,
rather than discovering again, means the recheck reads the very nodes the snapshot read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import SecretStr

from audit.kernel.pair import PairBase
from audit.sources.redis.endpoints import NodeEndpoint, RedisEndpoint, SentinelEndpoint, node_url, parse_endpoint
from audit.sources.redis.topology import Node, Shard, SlotMove, Topology
from audit.urls import ConnResolver

SIDES = ("master", "replica")
UrlFor = Callable[[str, int], str]
"""(host, port) -> the URL of that node, with the side's credentials."""


def endpoint_of(pair: PairBase, side: str) -> RedisEndpoint | None:
    """The side's endpoint as a model (a plain URL is a standalone NodeEndpoint); None when not given."""
    value = getattr(pair, side)
    if isinstance(value, NodeEndpoint | SentinelEndpoint):
        return value
    return parse_endpoint(value if isinstance(value, SecretStr | str) else None, f"pair {pair.name} {side}")


def url_maker(endpoint: RedisEndpoint, resolver: ConnResolver | None) -> UrlFor:
    if isinstance(endpoint, SentinelEndpoint):
        return endpoint.node_url
    seed = endpoint.resolve(resolver)
    return lambda host, port: node_url(seed, host, port)


def _node(n: Node) -> dict[str, Any]:
    return {"host": n.host, "port": n.port, "node_id": n.node_id, "health": n.health}


def topology_json(t: Topology) -> dict[str, Any]:
    """Everything of a topology but the node URLs."""
    return {
        "kind": t.kind,
        "seed": t.seed,
        "source": t.source,
        "cluster_state": t.cluster_state,
        "service": t.service,
        "shards": [
            {"master": _node(s.master), "replicas": [_node(r) for r in s.replicas], "slots": [list(r) for r in s.slots]}
            for s in t.shards
        ],
        "uncovered": [list(r) for r in t.uncovered],
        "moves": [{"slot": m.slot, "state": m.state, "node": m.node, "peer": m.peer} for m in t.moves],
        "unreachable": dict(t.unreachable),
    }


def topology_from_json(data: dict[str, Any], url_for: UrlFor, master_url: str | None = None) -> Topology:
    """The topology back, each node's URL rebuilt by `url_for` (a standalone master keeps `master_url`,
    which may name a db or a unix socket)."""

    def node(d: dict[str, Any], url: str | None = None) -> Node:
        return Node(d["host"], int(d["port"]), url or url_for(d["host"], int(d["port"])), d["node_id"], d["health"])

    standalone = data["kind"] == "standalone"
    shards = tuple(
        Shard(
            node(s["master"], master_url if standalone else None),
            tuple(node(r) for r in s["replicas"]),
            tuple((int(a), int(b)) for a, b in s["slots"]),
        )
        for s in data["shards"]
    )
    return Topology(
        kind=data["kind"],
        seed=data["seed"],
        shards=shards,
        source=data["source"],
        cluster_state=data["cluster_state"],
        uncovered=tuple((int(a), int(b)) for a, b in data["uncovered"]),
        moves=tuple(SlotMove(**m) for m in data["moves"]),
        service=data["service"],
        unreachable=dict(data["unreachable"]),
    )


def load_side(pair: PairBase, side: str, data: dict[str, Any], resolver: ConnResolver | None) -> Topology:
    """A side's topology as the snapshot stage found it (`data`: :func:`topology_json`)."""
    ep = endpoint_of(pair, side)
    assert ep is not None, f"pair {pair.name} has no {side}"
    if isinstance(ep, SentinelEndpoint):
        ep.check_tls_files(f"pair {pair.name} {side}")
    master_url = ep.resolve(resolver) if isinstance(ep, NodeEndpoint) else None
    return topology_from_json(data, url_maker(ep, resolver), master_url)
