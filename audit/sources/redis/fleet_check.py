"""The redis kind's fleet checks: what a fleet's topology says, and each shard's replication state.

:class:`TopologyCheck` (snapshot) discovers each side (audit/sources/redis/topology.py): the shards of a
cluster, the master and replicas of a sentinel service, or a standalone server. It keeps each side's
topology in the pair's state (without credentials: audit/sources/redis/fleet_state.py) for the other
checks and stages, reads every node's INFO replication, and stages what the topology itself shows:
`uncovered_slots`, `cluster_down`, `slot_migration`, and, in a replication audit, `wrong_master` for a
replica that follows a node outside its shard. A node that cannot be reached leaves its shard
unaudited: the other shards go on, and the pair ends with exit 3 naming the node (at recheck, once
everything else is done).

:class:`ShardReplicationCheck` (diff, recheck) samples each (shard master, replica) twice, a second
apart, and runs the standalone detector on each (link_down, lagging, replica_ahead,
lag_metric_unreliable / REDIS_SYNC_NO_ACK), every finding tagged with `detail.shard` and
`detail.replica`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, replace
from typing import Any

import redis

from audit.errors import SourceConnectError, SourceError
from audit.findings import Finding
from audit.kernel.check import Check, Uncovered
from audit.kernel.context import StageContext
from audit.kernel.identity import refuse_one_server
from audit.kernel.state import MetricValue
from audit.sources.redis.client import connect
from audit.sources.redis.fleet_health import (
    NodeState,
    probe,
    replication_pairs,
    role_changes,
    shard_replication_findings,
    topology_findings,
    unreachable_error,
    wrong_master_findings,
)
from audit.sources.redis.fleet_state import SIDES, endpoint_of, load_side, topology_json
from audit.sources.redis.model import RedisPair
from audit.sources.redis.replication import Sample, lag_of, second_sample_gap_s
from audit.sources.redis.replication_check import sleep_until, take_sample
from audit.sources.redis.topology import Node, Shard, Topology, discover

TOPOLOGY_SLOT = "topology"
"""The topology check's data slot in the pair's state, which the other fleet checks read."""


def side_topology(ctx: StageContext, side: str) -> Topology | None:
    """A side's topology as the snapshot stage discovered it (None: the pair has no such side)."""
    data = (ctx.state.check_data.get(TOPOLOGY_SLOT) or {}).get("sides", {}).get(side)
    return load_side(ctx.pair, side, data, ctx.resolver) if data is not None else None


def excluded_nodes(ctx: StageContext) -> set[str]:
    """Nodes the keyspace must not read: unreachable ones, and replicas following another master."""
    slot = ctx.state.check_data.get(TOPOLOGY_SLOT) or {}
    return set(slot.get("unreachable", {})) | set(slot.get("wrong_master", []))


def _side_notes(side: str, t: Topology) -> str:
    replicas = sum(len(s.replicas) for s in t.shards)
    what = f"{side}: {t.kind}"
    if t.kind == "cluster":
        what += f" ({t.source}), {len(t.shards)} shards, {replicas} replicas, cluster_state {t.cluster_state}"
    elif t.kind == "sentinel":
        what += f" service {t.service}: master {t.shards[0].master.addr}, {replicas} replicas"
    return what


class TopologyCheck(Check):
    name = "topology"
    coverage = ("shards", "nodes", "nodes_unreachable", "slots_uncovered", "shards_without_replica")

    def __init__(self, pair: RedisPair) -> None:
        self.pair = pair

    @property
    def replication_audit(self) -> bool:
        return self.pair.replica is None

    def snapshot(self, ctx: StageContext) -> None:
        sides: dict[str, Any] = {}
        unreachable: dict[str, str] = {}
        wrong: list[str] = []
        found: list[Finding] = []
        identities: dict[str, str | None] = {}
        for side in SIDES:
            ep = endpoint_of(self.pair, side)
            if ep is None:
                continue
            topo = discover(ep, ctx.resolver, role=f"pair {self.pair.name} {side}")
            sides[side] = topology_json(topo)
            # a migration reads each side's shard masters only: their replicas need not answer
            probed = topo if self.replication_audit else _masters_only(topo)
            states = probe(probed, role=f"pair {self.pair.name} {side}")
            identities[side] = _fleet_identity(states)
            unreachable.update({a: str(s.error) for a, s in states.items() if s.info is None})
            found += [_tagged(f, side) for f in topology_findings(topo)]
            if self.replication_audit:
                self._without_replica(ctx, topo)
                wm = wrong_master_findings(topo, states)
                found += wm
                wrong += [str(f.evidence["replica"]) for f in wm if f.evidence.get("replica")]
            ctx.state.servers[side] = _server_view(ep.display(), topo, states)
            ctx.state.notes.append(_side_notes(side, topo))
            self._metrics(ctx, topo, len([s for s in states.values() if s.info is None]))
        refuse_one_server(self.pair.name, identities, "shard masters' run_ids")
        ctx.data.update(sides=sides, unreachable=unreachable, wrong_master=wrong)
        ctx.add_findings(found)
        ctx.done(", ".join(f"{side} {d['kind']}" for side, d in sides.items()))

    def _metrics(self, ctx: StageContext, topo: Topology, unreachable: int) -> None:
        m = ctx.metrics
        m["shards"] = int(m.get("shards") or 0) + len(topo.shards)
        m["nodes"] = int(m.get("nodes") or 0) + len(topo.nodes)
        m["nodes_unreachable"] = int(m.get("nodes_unreachable") or 0) + unreachable
        m["slots_uncovered"] = int(m.get("slots_uncovered") or 0) + sum(b - a + 1 for a, b in topo.uncovered)

    def _without_replica(self, ctx: StageContext, topo: Topology) -> None:
        """Shards holding slots with no replica at all: nothing to compare their keys with (a sentinel
        service whose replicas are gone, a cluster shard whose replica was lost), never a silent pass."""
        bare = [s.name for s in topo.shards if not s.replicas and s.slots]
        ctx.metrics["shards_without_replica"] = len(bare)
        if bare:
            said = f"shard(s) without any replica, their keys compared with nothing: {', '.join(bare)}"
            ctx.state.notes.append(said)
            ctx.state.limits.append(said)

    def recheck(self, ctx: StageContext) -> None:
        """A node that could not be reached fails the pair (exit 3, naming it) once the rest is audited;
        so does a failover since the snapshot (the keys were read, diffed and re-checked on nodes whose
        roles have changed: a master's reads answered MOVED, and were taken for a slot migration)."""
        changed = roles_changed(ctx, self.replication_audit)
        ctx.data["roles_changed"] = changed is not None
        if changed is not None:
            ctx.fail_after(changed)
        down: dict[str, str] = ctx.data.get("unreachable") or {}
        for side in SIDES:
            topo = side_topology(ctx, side)
            if topo is None or not down:
                continue
            states = {a: NodeState(a, None, why) for a, why in down.items() if topo.shard_of(a) is not None}
            error = unreachable_error(topo, states, role=f"pair {self.pair.name} {side}")
            if error is not None:
                ctx.fail_after(error)
                return

    def uncovered(self, metrics: Mapping[str, MetricValue]) -> list[Uncovered]:
        n = int(metrics.get("nodes_unreachable") or 0)
        bare = int(metrics.get("shards_without_replica") or 0)
        return [
            Uncovered(n, f"{n} node(s) could not be reached: their shards were not audited"),
            Uncovered(bare, f"{bare} shard(s) have no replica: their keys were compared with nothing"),
        ]


def roles_changed(ctx: StageContext, replication_audit: bool) -> SourceError | None:
    """The error naming every node no longer in the role the snapshot read it in (a failover, a replica
    re-pointed), or None: asked as the recheck starts and again once the keys were re-read there."""
    skip = excluded_nodes(ctx)
    changed: list[str] = []
    for side in SIDES:
        topo = side_topology(ctx, side)
        if topo is None or topo.kind == "standalone":
            continue
        probed = topo if replication_audit else _masters_only(topo)
        states = probe(probed, role=f"pair {ctx.pair.name} {side}")
        found = role_changes(probed, {a: st for a, st in states.items() if a not in skip}, replication_audit)
        changed += [f"{side} {c}" for c in found]
    if not changed:
        return None
    said = "; ".join(changed)
    return SourceError(f"pair {ctx.pair.name}: roles changed during the audit (a failover?): {said}; audit again")


def roles_changed_before(ctx: StageContext) -> bool:
    """Whether the topology check's recheck already found roles changed (its error is on its way)."""
    return bool((ctx.state.check_data.get(TOPOLOGY_SLOT) or {}).get("roles_changed"))


def _masters_only(topo: Topology) -> Topology:
    return replace(topo, shards=tuple(Shard(s.master, (), s.slots) for s in topo.shards))


def _tagged(f: Finding, side: str) -> Finding:
    return replace(f, evidence={**f.evidence, "side": side})


def _fleet_identity(states: Mapping[str, NodeState]) -> str | None:
    """A side's nodes as the run_ids they drew at their start; None unless every node told its own."""
    run_ids = [s.run_id for s in states.values()]
    return ",".join(sorted(r for r in run_ids if r)) if run_ids and all(run_ids) else None


def _server_view(endpoint: str, topo: Topology, states: Mapping[str, NodeState]) -> dict[str, Any]:
    first = states.get(topo.shards[0].master.addr) if topo.shards else None
    role = (first.info or {}).get("role") if first is not None else None
    return {
        "endpoint": endpoint,
        "topology": topo.kind,
        "shards": len(topo.shards),
        "replicas": sum(len(s.replicas) for s in topo.shards),
        "role": role,
    }


class ShardReplicationCheck(Check):
    """Each shard's master against each of its replicas: two INFO samples, the standalone detector."""

    name = "replication"
    coverage = ("replicas_sampled", "replicas_unsampled")

    def __init__(self, pair: RedisPair) -> None:
        self.pair = pair

    def _pairs(self, ctx: StageContext) -> list[tuple[Shard, Node]]:
        topo = side_topology(ctx, "master")
        skip = excluded_nodes(ctx)
        if topo is None:
            return []
        return [(s, r) for s, r in replication_pairs(topo) if s.master.addr not in skip and r.addr not in skip]

    def _sample(self, shard: Shard, replica: Node) -> Sample:
        role = f"pair {self.pair.name} shard {shard.name}"
        with connect(shard.master.url, role=f"{role} master") as master:
            with connect(replica.url, role=f"{role} replica {replica.addr}") as replica_client:
                return take_sample(master, replica_client)

    def diff(self, ctx: StageContext) -> None:
        first: dict[str, Any] = {}
        lost: list[list[str]] = []  # [address that did not answer, what was not sampled and why]
        for s, r in self._pairs(ctx):
            problem = _unreachable(s, r)
            if problem is None:
                first[f"{s.name} {r.addr}"] = asdict(self._sample(s, r))
            else:
                lost.append([problem[0], f"replica {r.addr} (shard {s.name}): {problem[1]}"])
        ctx.data.update(first=first, lost=lost)

    def recheck(self, ctx: StageContext) -> None:
        first = {key: Sample(**v) for key, v in (ctx.data.get("first") or {}).items()}
        oldest = min((s.at_ms for s in first.values()), default=time.time() * 1000)
        sleep_until(oldest, second_sample_gap_s(list(first.values())))
        per_replica: list[tuple[Shard, Node, list[Sample]]] = []
        for shard, replica in self._pairs(ctx):
            earlier = first.get(f"{shard.name} {replica.addr}")
            if earlier is not None:
                per_replica.append((shard, replica, [earlier, self._sample(shard, replica)]))
        gate = self.pair.gate
        ctx.add_findings(shard_replication_findings(per_replica, gate.max_lag_bytes, gate.max_lag_seconds))
        lags = [lag_of(samples[-1], r.port) for _, r, samples in per_replica]
        ctx.metrics.update(
            replicas_sampled=len(per_replica),
            lag_bytes=max((b for b, _ in lags if b is not None), default=None),
            lag_seconds=max((s for _, s in lags if s is not None), default=None),
        )
        ctx.state.replication_samples = [
            {"at_ms": s[-1].at_ms, "shard": shard.name, "replica": r.addr, "lag": lag_of(s[-1], r.port)}
            for shard, r, s in per_replica
        ]
        lost: list[list[str]] = ctx.data.get("lost") or []
        ctx.metrics["replicas_unsampled"] = len(lost)
        if lost:  # read by the snapshot, gone since: its replication state is unknown, never "fine"
            said = "; ".join(why for _, why in lost)
            error = f"pair {self.pair.name}: replication not sampled, node lost since the snapshot: {said}"
            ctx.fail_after(SourceConnectError(error, where=lost[0][0]))
        ctx.done(f"{len(per_replica)} replicas sampled twice")

    def uncovered(self, metrics: Mapping[str, MetricValue]) -> list[Uncovered]:
        n = int(metrics.get("replicas_unsampled") or 0)
        return [Uncovered(n, f"{n} replica(s) lost after the snapshot: replication state not sampled")]


def _unreachable(shard: Shard, replica: Node) -> tuple[str, str] | None:
    """(the end that does not answer now, why), or None when both do."""
    for n in (shard.master, replica):
        try:
            connect(n.url, role=f"shard {shard.name} node").close()
        except SourceConnectError as e:
            return n.addr, str(e)
        except (redis.RedisError, OSError) as e:
            return n.addr, f"{n.addr}: {type(e).__name__}: {e}"
    return None
