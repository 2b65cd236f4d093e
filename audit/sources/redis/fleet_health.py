"""Health of a discovered fleet: which nodes answer, and what the topology itself says is wrong.

:func:`probe` reads `INFO replication` and the run_id from every node (the only I/O here); the rest are pure functions
of a :class:`~audit.sources.redis.topology.Topology` and those states:

| finding            | when                                                                  | detail            |
|--------------------|-----------------------------------------------------------------------|-------------------|
| `uncovered_slots`  | a slot range no master owns (one finding per range; start/end_num)    | cluster_state     |
| `cluster_down`     | `CLUSTER INFO` says cluster_state is not ok                           | cluster_state     |
| `slot_migration`   | a master migrating or importing a slot (info: resharding in progress) | shard, peer       |
| `wrong_master`     | a replica of a shard that follows some other node, or is no replica;  | shard, replica    |
|                    | a shard master that reports itself a replica                          |                   |

Per-shard replication state (link_down, lagging, replica_ahead, lag_metric_unreliable) is the
standalone detector :func:`audit.sources.redis.replication.replication_findings` run per (shard, replica)
through :func:`shard_replication_findings`, which adds `detail.shard` and `detail.replica`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import redis

from audit.errors import SourceConnectError
from audit.findings import Finding
from audit.sources.redis.client import connect, info_text, server_run_id
from audit.sources.redis.info import parse_info
from audit.sources.redis.replication import Sample, replication_findings, wrong_master
from audit.sources.redis.topology import Node, Shard, Topology


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node's `INFO replication` (parsed), or why it could not be read."""

    addr: str
    info: dict[str, Any] | None
    error: str | None = None
    run_id: str | None = None
    """The id the node drew at its start (INFO server), which tells one node given on both sides of a pair."""


def probe(topology: Topology, *, role: str = "") -> dict[str, NodeState]:
    """INFO replication (and the run_id) of every node of the topology, by address; an unreachable node
    gets its error."""
    out: dict[str, NodeState] = {}
    for node in topology.nodes:
        if node.addr in topology.unreachable:
            out[node.addr] = NodeState(node.addr, None, topology.unreachable[node.addr])
            continue
        try:
            with connect(node.url, role=f"{role or topology.kind} node") as client:
                info = parse_info(info_text(client, "replication"))
                out[node.addr] = NodeState(node.addr, info, run_id=server_run_id(client))
        except SourceConnectError as e:
            out[node.addr] = NodeState(node.addr, None, str(e))
        except (redis.RedisError, OSError) as e:
            out[node.addr] = NodeState(node.addr, None, f"{node.addr}: {e}")
    return out


def unreachable_error(topology: Topology, states: dict[str, NodeState], *, role: str = "") -> SourceConnectError | None:
    """One error naming every node that could not be read, with its shard; None when all answered."""
    bad = [s for s in states.values() if s.info is None]
    if not bad:
        return None
    parts = []
    for s in bad:
        shard = topology.shard_of(s.addr)
        what = "shard master" if shard is not None and shard.master.addr == s.addr else "replica"
        parts.append(f"{what} {s.addr} (shard {shard.name if shard else '?'}): {s.error}")
    return SourceConnectError(
        f"{role or topology.seed}: {len(bad)} node(s) unreachable: " + "; ".join(parts), where=bad[0].addr
    )


def replication_pairs(topology: Topology) -> list[tuple[Shard, Node]]:
    """Every (shard, replica) whose replication is audited: each shard's master against each replica."""
    return [(s, r) for s in topology.shards for r in s.replicas]


def topology_findings(topology: Topology) -> list[Finding]:
    """uncovered_slots, cluster_down and slot_migration, from discovery alone."""
    out = [
        Finding(
            "cluster",
            "uncovered_slots",
            start=str(a),
            end=str(b),
            start_num=a,
            end_num=b,
            count=b - a + 1,
            evidence={"cluster_state": topology.cluster_state, "seed": topology.seed},
        )
        for a, b in topology.uncovered
    ]
    if topology.kind == "cluster" and topology.cluster_state not in (None, "ok"):
        out.append(Finding("cluster", "cluster_down", evidence={"cluster_state": topology.cluster_state}))
    out += [
        Finding(
            "cluster",
            "slot_migration",
            start=str(m.slot),
            end=str(m.slot),
            start_num=m.slot,
            end_num=m.slot,
            count=1,
            evidence={"shard": m.node, "state": m.state, "peer": m.peer},
        )
        for m in topology.moves
    ]
    return out


@dataclass(frozen=True)
class _RoleMismatch:
    """A node not in the role the topology gives it: the shard's master itself (`replica` None: it reports
    itself a replica), or one of its replicas following another node (`found`: wrong_master's finding)."""

    shard: Shard
    master_info: dict[str, Any]
    replica: Node | None = None
    replica_info: dict[str, Any] | None = None
    found: Finding | None = None


def _follows(info: dict[str, Any]) -> str:
    return f"{info.get('master_host')}:{info.get('master_port')}"


def _role_mismatches(
    topology: Topology, states: dict[str, NodeState], replicas: bool = True
) -> Iterator[_RoleMismatch]:
    """Each shard's master, then (`replicas`, and only under a master that still is one) its replicas,
    against their roles in `topology`. Nodes that do not answer are not judged (their checks say so)."""
    for shard in topology.shards:
        m = states.get(shard.master.addr)
        if m is None or m.info is None:
            continue
        if m.info.get("role") not in ("master", None):
            yield _RoleMismatch(shard, m.info)
            continue
        for r in shard.replicas if replicas else ():
            st = states.get(r.addr)
            if st is None or st.info is None:
                continue
            wm = wrong_master(m.info, st.info, shard.master.host, shard.master.port)
            if wm is not None:
                yield _RoleMismatch(shard, m.info, r, st.info, wm)


def wrong_master_findings(topology: Topology, states: dict[str, NodeState]) -> list[Finding]:
    """Replicas that do not follow their shard's master; shard masters that are not masters."""
    out = []
    for x in _role_mismatches(topology, states):
        if x.replica is None or x.replica_info is None or x.found is None:
            reason = "the shard's master reports itself a replica (failover in progress?)"
            evidence = {"shard": x.shard.name, "replica": None, "reason": reason, "follows": _follows(x.master_info)}
            out.append(Finding("replication", "wrong_master", evidence=evidence))
            continue
        outside = topology.shard_of(_follows(x.replica_info))
        evidence = {
            **x.found.evidence,
            "shard": x.shard.name,
            "replica": x.replica.addr,
            "follows_shard": outside.name if outside else None,
        }
        out.append(replace(x.found, evidence=evidence))
    return out


def shard_replication_findings(
    per_replica: Sequence[tuple[Shard, Node, Sequence[Sample]]],
    max_lag_bytes: int | None,
    max_lag_seconds: float | None,
) -> list[Finding]:
    """The standalone replication detector per (shard, replica, samples), tagged with shard and replica.

    A master's unacked SYNC clients (`lag_metric_unreliable`) are the master's, not one replica's: they
    are reported once per shard, not once per replica.
    """
    out: list[Finding] = []
    seen_unacked: set[tuple[str, str]] = set()
    for shard, replica, samples in per_replica:
        for f in replication_findings(samples, replica.port, max_lag_bytes, max_lag_seconds):
            tagged = replace(f, evidence={**f.evidence, "shard": shard.name, "replica": replica.addr})
            if f.category == "lag_metric_unreliable":
                key = (shard.name, str(f.evidence.get("entry")))
                if key in seen_unacked:
                    continue
                seen_unacked.add(key)
                tagged = replace(tagged, evidence={**tagged.evidence, "replica": None})
            out.append(tagged)
    return out


def role_changes(topology: Topology, states: dict[str, NodeState], replicas: bool) -> list[str]:
    """What no longer matches the roles the snapshot read the nodes in: a shard master that now reports
    itself a replica (a failover since), and (`replicas`) a replica that now follows another node.
    Nodes that do not answer are not judged here (their checks say so)."""
    return [
        f"shard master {x.shard.master.addr} is now a replica of {_follows(x.master_info)}"
        if x.replica is None
        else f"replica {x.replica.addr} of shard {x.shard.name} no longer follows it"
        for x in _role_mismatches(topology, states, replicas)
    ]
