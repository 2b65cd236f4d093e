"""The keyspace of a Redis fleet pair: every node snapshotted as a Spark task, diffed, re-checked live.

Two shapes (the pair's, see audit/sources/redis/model.py):

- **replication audit** (no `replica` given): each shard's master against each of its replicas. The
  snapshot's master side holds every shard master, side `replica` every shard's first replica
  (`replica-2` the second ones, ...). A cluster's rows carry the shard's ordinal as their db
  (`shard_as_db`), so a key is compared within its shard only; findings get db 0 back and
  `detail.shard` / `detail.replica`. The recheck runs shard by shard on that shard's two nodes,
  judged by the replication stream as for a standalone pair.
- **migration** (a `replica` given, `check_replication: false`): keys compared by (db, key) whichever
  node holds them: a cluster side is db 0, a standalone or sentinel side is read on the dbs the pair
  names (db 0 by default). The recheck reads a cluster side by slot, following MOVED and ASK.

Topologies come from the topology check (audit/sources/redis/fleet_check.py). A shard that could not
be read is left out of the comparison on both sides, counted as uncovered, and fails the pair (exit
3) at the end of the recheck; so does a failover while the recheck read the keys (the roles are read
again once it is done: audit/sources/redis/fleet_check.py). The findings' extras (field-level
differences, the repair plan, the summary's notes) are the standalone keyspace check's
(audit/sources/redis/divergence.py).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

from audit.errors import SnapshotError, SourceError
from audit.kernel.check import Check, Uncovered
from audit.kernel.context import StageContext
from audit.kernel.state import MetricValue, PairState
from audit.layout import RunDir
from audit.sources.redis.client import connect, open_pipe
from audit.sources.redis.divergence import (
    COMPARE_MEANING,
    compare_limit,
    compare_note,
    field_evidence,
    filter_note,
    first_value_mismatches,
    selecting,
    with_fields,
    write_repair,
)
from audit.sources.redis.fleet_check import excluded_nodes, roles_changed, roles_changed_before, side_topology
from audit.sources.redis.fleet_readers import SingleServer, fleet_nodes, pipes_for, side_reader
from audit.sources.redis.fleet_snapshot import FleetSnapshot, TaskResult, side_tasks, snapshot_fleet
from audit.sources.redis.keyfilter import KeyFilter
from audit.sources.redis.keys import KeyReader
from audit.sources.redis.keyspace_check import (
    WINDOW_BYTES,
    KeyspaceCheck,
    KeyspaceExtras,
    recheck_failed,
    recheck_unreadable,
)
from audit.sources.redis.model import RedisPair, topology_of
from audit.sources.redis.recheck import RecheckStats, set_confirmed_live
from audit.sources.redis.resp import RespPipe
from audit.sources.redis.routing import AskAbsentReader
from audit.sources.redis.topology import Shard, Topology

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

HOT_KEYS = 100


def replica_side(index: int) -> str:
    """The snapshot side of each shard's `index`-th replica: replica, replica-2, replica-3, ..."""
    return "replica" if index == 0 else f"replica-{index + 1}"


def _result_json(r: TaskResult) -> dict[str, Any]:
    return {k: getattr(r, k) for k in TaskResult.__dataclass_fields__ if k != "meta"}


def _result(d: dict[str, Any]) -> TaskResult:
    return TaskResult(**d, meta=None)


class FleetKeyspaceCheck(Check):
    name = "keyspace"
    coverage = (
        *KeyspaceCheck.coverage,
        "shards_read",
        "shards_unread",
        "keys_in_moving_slots",
        "keys_in_unread_shards",
    )

    def __init__(self, pair: RedisPair, extras: KeyspaceExtras) -> None:
        self.pair = pair
        self.settings = pair.settings
        self.extras = extras
        self._field_budget = extras.field_diff_keys

    @property
    def replication_audit(self) -> bool:
        return self.pair.replica is None

    # --- snapshot ----------------------------------------------------------------------------------
    def _dbs(self, topo: Topology, skip: set[str]) -> list[int]:
        """db 0 on a cluster; else the pair's dbs, or (a replication audit) every db the master or one of
        its replicas lists (a db only a replica holds keys in is a divergence), or (a migration) db 0."""
        if topo.kind == "cluster":
            return [0]
        if self.pair.dbs:
            return list(self.pair.dbs)
        if self.replication_audit:
            from audit.sources.redis.info import keyspace_dbs
            from audit.sources.redis.snapshot import capture_state

            dbs: set[int] = set()
            for node in (topo.shards[0].master, *topo.shards[0].replicas):
                if node.addr in skip:
                    continue
                client = connect(node.url, role=f"pair {self.pair.name} node {node.addr}")
                try:
                    dbs.update(keyspace_dbs(capture_state(client, with_clients=False)["info_keyspace"]))
                finally:
                    client.close()
            return sorted(dbs) or [0]
        return [0]

    def _tasks(self, ctx: StageContext) -> tuple[list[Any], dict[str, list[int]]]:
        master = side_topology(ctx, "master")
        assert master is not None
        skip = excluded_nodes(ctx)
        if self.replication_audit:
            dbs = self._dbs(master, skip)
            tasks = side_tasks("master", master, dbs=dbs)
            for i in range(max((len(s.replicas) for s in master.shards), default=0)):
                tasks += side_tasks(replica_side(i), master, dbs=dbs, replica_index=i)
            sides_dbs = {"master": dbs, "replica": dbs}
        else:
            replica = side_topology(ctx, "replica")
            assert replica is not None
            sides_dbs = {"master": self._dbs(master, skip), "replica": self._dbs(replica, skip)}
            tasks = side_tasks("master", master, dbs=sides_dbs["master"])
            tasks += side_tasks("replica", replica, dbs=sides_dbs["replica"])
        return [t for t in tasks if t.node not in skip], sides_dbs

    def snapshot(self, ctx: StageContext) -> None:
        tasks, sides_dbs = self._tasks(ctx)
        master = side_topology(ctx, "master")
        shard_as_db = self.replication_audit and master is not None and master.kind == "cluster"
        key_filter = KeyFilter.of(self.extras.keys)
        fleet = snapshot_fleet(
            tasks,
            ctx.snapshot_dir("master").parent,
            self.settings.snapshot_options(),
            spark=ctx.spark() if self.settings.fleet_snapshot == "spark" else None,
            key_filter=key_filter,
            shard_as_db=shard_as_db,
            threads=self.settings.fleet_threads,
        )
        sides = sorted({t.side for t in tasks}, key=lambda s: (s != "master", s))
        ctx.data.update(
            results=[_result_json(r) for r in fleet.results],
            shard_as_db=shard_as_db,
            replica_sides=[s for s in sides if s != "master"],
            unread=[f"{r.side} {r.node} (shard {r.shard}): {r.error}" for r in fleet.errors],
        )
        self._snapshot_metrics(ctx, fleet)
        ctx.state.dbs = sides_dbs["master"]
        self._notes(ctx, fleet, sides_dbs, key_filter)
        ctx.done(f"{len(fleet.results) - len(fleet.errors)} of {len(fleet.results)} nodes read")

    def _snapshot_metrics(self, ctx: StageContext, fleet: FleetSnapshot) -> None:
        m = ctx.metrics
        for r in fleet.results:
            side = "master" if r.side == "master" else "replica"
            stats = (r.meta or {}).get("stats") or {}
            for name in ("keys_scanned", "keys_vanished", "commands"):
                m[f"{side}_{name}"] = int(m.get(f"{side}_{name}") or 0) + int(stats.get(name) or 0)
            m[f"{side}_keys_filtered_out"] = int(m.get(f"{side}_keys_filtered_out") or 0) + r.filtered_out
            took = float((r.meta or {}).get("duration_s") or 0)
            m[f"{side}_snapshot_s"] = max(float(m.get(f"{side}_snapshot_s") or 0), took)
        moving = sum(int((r.meta or {}).get("keys_in_moving_slots") or 0) for r in fleet.results)
        m["keys_in_moving_slots"] = moving
        if moving:
            said = (  # MOVED or ASK: a slot being imported, or a node no longer the master of its slots (a failover)
                f"{moving} keys answered MOVED or ASK on the node read (a slot mid-migration, or a failover since "
                "the shards were found) and were not compared"
            )
            ctx.state.notes.append(said)
            ctx.state.limits.append(said)
        m["shards_read"] = len({r.shard for r in fleet.results if r.status == "ok"})
        m["shards_unread"] = len({r.shard for r in fleet.errors})

    def _notes(
        self, ctx: StageContext, fleet: FleetSnapshot, sides_dbs: dict[str, list[int]], kf: KeyFilter | None
    ) -> None:
        notes = ctx.state.notes
        if self.replication_audit:
            notes.append(
                f"replication audit: each shard's master against each of its replicas; dbs {sides_dbs['master']}"
            )
        else:
            default = "" if self.pair.dbs else _migration_dbs_default(self.pair)
            notes.append(
                f"migration: keys compared by (db, key) whichever node holds them; dbs compared: master "
                f"{sides_dbs['master']}, replica {sides_dbs['replica']}; a cluster side is db 0{default}"
            )
        notes.append(compare_note(self.extras.compare))
        if limit := compare_limit(self.extras.compare):
            ctx.state.limits.append(limit)
        if kf is not None:
            counts = {s: int(ctx.metrics.get(f"{s}_keys_filtered_out") or 0) for s in ("master", "replica")}
            match = kf.scan_match()
            said = filter_note(kf.describe(), counts, match.decode("utf-8", "replace") if match else None)
            notes.append(said)
            ctx.state.limits.append(f"only the keys the filter keeps: {said}")
        how = "Spark tasks" if self.settings.fleet_snapshot == "spark" else f"{self.settings.fleet_threads} threads"
        notes.append(f"snapshot: {len(fleet.results)} nodes read as {how}")

    # --- diff ---------------------------------------------------------------------------------------
    def _fleet(self, ctx: StageContext) -> FleetSnapshot:
        return FleetSnapshot([_result(d) for d in ctx.data.get("results", [])], {})

    def _paths(self, ctx: StageContext, rside: str) -> tuple[str, str]:
        """Each side's shard files to diff: the shards both sides read (a replication audit pairs shard i
        with shard i), or every file a side read (a migration)."""
        fleet, root = self._fleet(ctx), ctx.snapshot_dir("master").parent
        if self.replication_audit:
            return fleet.comparable_paths(root, ("master", rside))
        out = []
        for side in ("master", rside):
            names = [Path(r.keys_file or "").name for r in fleet.side(side) if r.status == "ok"]
            glob = names[0] if len(names) == 1 else "{" + ",".join(names) + "}"
            out.append(str(root / side / "keys.parquet" / glob) if names else "")
        return out[0], out[1]

    def diff(self, ctx: StageContext) -> None:
        from audit.diff.keyspace import diff_snapshots

        started = time.time()
        totals: dict[str, int] = {}
        for rside in ctx.data.get("replica_sides", []):
            m_path, r_path = self._paths(ctx, rside)
            if not m_path or not r_path:
                continue
            out = str(ctx.work_dir() / f"candidates-{rside}.parquet")
            found = diff_snapshots(
                ctx.spark(), m_path, r_path, out, self.settings.ttl_tolerance_ms, self.extras.compare
            )
            for k, v in found.items():  # the master's own counts once, the rest summed over replicas
                totals[k] = v if k.startswith("master_") and k in totals else totals.get(k, 0) + v
            ctx.data.setdefault("diffed", []).append(rside)
        ctx.metrics.update(totals)
        ctx.metrics["diff_s"] = round(time.time() - started, 3)

    # --- recheck ------------------------------------------------------------------------------------
    def recheck(self, ctx: StageContext) -> None:
        ctx.metrics["recheck_unrechecked"] = 0
        frames: list[DataFrame] = []
        stats = RecheckStats()
        self._field_budget = self.extras.field_diff_keys  # keys whose fields are compared, over all shards
        try:
            for rside in ctx.data.get("diffed", []):
                cands = ctx.spark().read.parquet(str(ctx.work_dir() / f"candidates-{rside}.parquet"))
                if self.replication_audit:
                    frames += self._recheck_shards(ctx, rside, cands, stats)
                else:
                    frames += self._recheck_migration(ctx, self._outside_unread(ctx, cands), stats)
        except (OSError, ConnectionError, redis.RedisError) as e:
            # a failover closes the old master's clients (Sentinel does): say so, not just the driver's words
            changed = roles_changed(ctx, self.replication_audit)
            if changed is not None:
                raise SourceError(f"{changed} (the recheck's read failed: {e})", where=changed.where) from None
            raise recheck_failed(self.pair.name, e, fleet_nodes(ctx)) from None
        if not roles_changed_before(ctx) and (changed := roles_changed(ctx, self.replication_audit)) is not None:
            ctx.fail_after(changed)  # a failover while the keys were re-read: they were read in the wrong roles
        found = _union(ctx, frames)
        ctx.add_findings_frame(found)
        if stats.candidates:  # no candidate, no finding: nothing to repair
            write_repair(ctx, found, extra={"topology": self._topology_words(ctx)})
        ctx.metrics.update(
            recheck_candidates=stats.candidates,
            recheck_converged=stats.converged,
            recheck_in_flight=stats.in_flight,
            recheck_unreadable=stats.unreadable,
            recheck_divergent=stats.divergent,
            recheck_rounds=stats.rounds_run,
        )
        set_confirmed_live(ctx.metrics, stats)
        if ctx.data.get("unread"):
            ctx.fail_after(SnapshotError(f"pair {self.pair.name}: nodes not read: " + "; ".join(ctx.data["unread"])))

    def _topology_words(self, ctx: StageContext) -> str:
        return ", ".join(
            f"{side} {t.kind}" for side in ("master", "replica") if (t := side_topology(ctx, side)) is not None
        )

    def _run_recheck(
        self,
        ctx: StageContext,
        cands: DataFrame,
        sides: tuple[Any, Any],
        stats: RecheckStats,
        ack: bool,
        extra: Mapping[str, Any] | None = None,
    ) -> tuple[DataFrame, DataFrame]:
        """(survivors, findings): candidates over `recheck_max_keys` become findings without a recheck,
        counted as `recheck_unrechecked`, as for a standalone pair."""
        from audit.diff.findings import keyspace_findings
        from audit.sources.redis.ack import RedisOffsetAck
        from audit.sources.redis.recheck import recheck, split_for_recheck

        s = self.settings
        total = cands.count()
        to_check, rest = split_for_recheck(cands, s.recheck_max_keys, total)
        survivors, st = recheck(
            ctx.spark(),
            to_check,
            *sides,
            rounds=s.recheck_rounds,
            interval_s=s.recheck_interval_s,
            tolerance_ms=s.ttl_tolerance_ms,
            page=s.big_key_elements,
            window_bytes=WINDOW_BYTES,
            ack=RedisOffsetAck() if ack else None,
            ack_wait_s=s.recheck_ack_wait_s,
            judge_hot_keys=HOT_KEYS if ack else 0,
            mode=self.extras.compare,
            max_keys_per_s=s.snapshot_options().pace_settings().max_keys_per_s,
        )
        for name in ("candidates", "converged", "in_flight", "confirmed", "divergent", "unreadable"):
            setattr(stats, name, getattr(stats, name) + getattr(st, name))
        stats.rounds_run = max(stats.rounds_run, st.rounds_run)
        stats.live = stats.live or st.live
        found = keyspace_findings(survivors, st.rounds_run, extra)
        if rest is not None:
            found = found.unionByName(keyspace_findings(rest, 0, extra))
            unrechecked = int(ctx.metrics.get("recheck_unrechecked") or 0) + total - s.recheck_max_keys
            ctx.metrics["recheck_unrechecked"] = unrechecked
        return survivors, found

    def _recheck_shards(self, ctx: StageContext, rside: str, cands: DataFrame, stats: RecheckStats) -> list[DataFrame]:
        """Shard by shard on its own two nodes, judged by the replication stream."""
        from pyspark.sql import functions as F

        topo = side_topology(ctx, "master")
        assert topo is not None
        index = 0 if rside == "replica" else int(rside.rsplit("-", 1)[1]) - 1
        by_db = bool(ctx.data.get("shard_as_db"))
        present = {int(r["db"]) for r in cands.select("db").distinct().collect()} if by_db else {0}
        frames = []
        for ordinal, shard in enumerate(topo.shards):
            if ordinal not in present or index >= len(shard.replicas):
                continue
            replica = shard.replicas[index]
            part = cands.where(F.col("db") == ordinal).withColumn("db", F.lit(0)) if by_db else cands
            role = f"pair {self.pair.name} shard {shard.name}"
            pipes = [
                open_pipe(shard.master.url, role=f"{role} master"),
                open_pipe(replica.url, role=f"{role} replica", readonly=topo.kind == "cluster"),
            ]
            try:
                master: RespPipe | KeyReader = pipes[0]
                if by_db:
                    part = self._still_in_shard(ctx, part, shard, pipes[0])
                    master = AskAbsentReader(pipes[0], self.settings.big_key_elements, WINDOW_BYTES)
                # `replica_node`, not `replica`: that is what the replica holds (detail.replica, as for a pair)
                extra = {"shard": F.lit(shard.name), "replica_node": F.lit(replica.addr)}
                survivors, found = self._run_recheck(ctx, part, (master, pipes[1]), stats, True, extra)
                evidence = self._fields(survivors, selecting(*pipes))
            finally:
                for p in pipes:
                    p.close()
            frames.append(with_fields(found, evidence))
        return frames

    def _still_in_shard(self, ctx: StageContext, cands: DataFrame, shard: Shard, master: RespPipe) -> DataFrame:
        """A shard's candidates but those of slots it owned at discovery and its master no longer owns: a
        key resharded away since answers MOVED there, never its value; left out and counted, as moving
        slots' keys are. A slot being migrated away stays: its master still answers for every key of it
        (its value, or ASK for a key it does not hold, read as absent: AskAbsentReader), so a key only
        the replica holds there is compared. A key of a slot the shard never owned (a replica's orphan)
        stays."""
        from audit.sources.redis.routing import served_slots

        reply = master.execute([(b"CLUSTER", b"NODES")])[0]
        text = reply.decode("utf-8", "replace") if isinstance(reply, bytes) else ""
        served = served_slots(text) if text else None
        gone = {n for a, b in shard.slots for n in range(a, b + 1)} - (served or set())
        if served is None or not gone:  # no master now, or no answer: the reads say so (roles changed, ...)
            return cands
        kept = _outside_slots(cands, gone)
        if moved := cands.count() - kept.count():
            ctx.metrics["keys_in_moving_slots"] = int(ctx.metrics.get("keys_in_moving_slots") or 0) + moved
            said = f"{moved} differing keys moved out of their shard during the audit (resharding): not compared"
            ctx.state.notes.append(said)
            ctx.state.limits.append(said)
        return kept

    def _outside_unread(self, ctx: StageContext, cands: DataFrame) -> DataFrame:
        """A migration's candidates without the keys of a cluster shard a side could not read: their
        absence there says nothing (the pair fails with exit 3 naming the node instead)."""
        unread = self._unread_slots(ctx)
        if not unread:
            return cands
        kept = _outside_slots(cands, unread)
        ctx.metrics["keys_in_unread_shards"] = cands.count() - kept.count()
        return kept

    def _unread_slots(self, ctx: StageContext) -> set[int]:
        """Slots of the cluster shards (either side) whose master was not read."""
        failed = {(r.side, r.ordinal) for r in self._fleet(ctx).errors}
        skip = excluded_nodes(ctx)
        slots: set[int] = set()
        for side in ("master", "replica"):
            topo = side_topology(ctx, side)
            if topo is None or topo.kind != "cluster":
                continue
            for ordinal, shard in enumerate(topo.shards):
                if shard.master.addr in skip or (side, ordinal) in failed:
                    slots.update(n for a, b in shard.slots for n in range(a, b + 1))
        return slots

    def _recheck_migration(self, ctx: StageContext, cands: DataFrame, stats: RecheckStats) -> list[DataFrame]:
        """Two independent systems: rounds apart, a cluster side read by slot (MOVED and ASK followed)."""

        readers = [side_reader(ctx, side) for side in ("master", "replica")]
        try:
            sides = [r.pipe if isinstance(r, SingleServer) else r for r in readers]
            survivors, found = self._run_recheck(ctx, cands, (sides[0], sides[1]), stats, False)
            evidence = self._fields(survivors, pipes_for(*readers))
        finally:
            for r in readers:
                r.close()
        return [with_fields(found, evidence)]

    def _fields(self, survivors: DataFrame, pipes_for: Any) -> list[tuple[int, bytes, str]]:
        rows = first_value_mismatches(survivors, self._field_budget)
        self._field_budget -= len(rows)
        return field_evidence(rows, pipes_for, show_values=self.extras.show_values, page=self.settings.big_key_elements)

    # --- what the summary, the gate and a certificate need -------------------------------------------
    def uncovered(self, metrics: Mapping[str, MetricValue]) -> list[Uncovered]:
        unread = int(metrics.get("shards_unread") or 0)
        unreadable = int(metrics.get("master_keys_unreadable") or 0) + int(metrics.get("replica_keys_unreadable") or 0)
        return [
            Uncovered(unread, f"{unread} shard(s) could not be snapshotted: not compared"),
            Uncovered(unreadable, f"{unreadable} keys could not be read (see snapshots/*/shards/*/snapshot.json)"),
            recheck_unreadable(metrics),
        ]

    def certify(self, run: RunDir, state: PairState, side: str) -> dict[str, Any]:
        from audit.sources.redis.content import side_certificate

        certified = side_certificate(Path(run.snapshot(state.pair, side)), state, side, self.extras.compare)
        return {**certified, "compare": self.extras.compare, "compare_meaning": COMPARE_MEANING[self.extras.compare]}


def _outside_slots(cands: DataFrame, slots: set[int]) -> DataFrame:
    """The candidates whose key's cluster slot is not in `slots`."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType

    from audit.sources.redis.routing import key_slot

    keep = lambda key: key_slot(bytes(key)) not in slots  # noqa: E731 (no hints: a plain UDF)
    return cands.where(F.udf(keep, BooleanType())(F.col("key")))


def _union(ctx: StageContext, frames: list[DataFrame]) -> DataFrame:
    if not frames:
        from audit.findings import FINDINGS_SCHEMA

        return ctx.spark().createDataFrame([], schema=_spark_schema(FINDINGS_SCHEMA))
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


def _spark_schema(schema: Any) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def _migration_dbs_default(pair: RedisPair) -> str:
    """What the note says of a migration's dbs left out: db 0, and whether `dbs` can name others (a cluster
    side has db 0 only, so the inventory refuses any other db for the pair)."""
    if any(topology_of(v) == "cluster" for v in (pair.master, pair.replica) if v is not None):
        return " (db 0 only: no other db can be compared with a cluster)"
    return " (db 0 by default: set dbs to compare others)"
