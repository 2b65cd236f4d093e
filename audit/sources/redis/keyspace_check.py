"""The keyspace check over the Redis protocol (kind redis; kind pika composes it too).

snapshot: SCAN each db on both sides at once into keys.parquet (audit/sources/redis/snapshot.py).
diff: the Spark full outer join by (db, key) (audit/diff/keyspace.py); differing keys are candidates.
recheck: candidates re-read live for a few rounds; what persists becomes findings.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import redis

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

from audit.errors import ConfigError, SourceConnectError, SourceError
from audit.kernel.check import Check, Uncovered
from audit.kernel.context import StageContext
from audit.kernel.identity import refuse_one_server
from audit.kernel.state import MetricValue, PairState
from audit.layout import RunDir
from audit.sources.redis.ack import ReplicaAck
from audit.sources.redis.client import connect, connected_sides, info_text, server_run_id
from audit.sources.redis.divergence import (
    COMPARE_MEANING,
    compare_limit,
    compare_note,
    field_evidence,
    filter_note,
    filtered_out,
    first_value_mismatches,
    selecting,
    with_fields,
    with_fields_table,
    write_repair,
)
from audit.sources.redis.info import keyspace_dbs, parse_info
from audit.sources.redis.keyfilter import KeyFilter, KeysSpec
from audit.sources.redis.model import KeyspaceSettings
from audit.sources.redis.resp import RespPipe
from audit.sources.redis.snapshot import KEYS_FILE, NO_SUCH_DB, SnapshotOptions
from audit.urls import shown_server_url

SIDES = ("master", "replica")
Annotate = Callable[[StageContext, "DataFrame"], "DataFrame"]
"""Adds a kind's evidence to keyspace findings (findings-schema DataFrame in, the same out)."""
CANDIDATES = "candidates.parquet"
SURVIVORS = "survivors.parquet"
WINDOW_BYTES = 1 << 20


@dataclass(frozen=True)
class KeyspaceExtras:
    """What a redis pair asks of its keyspace beyond the comparison (Pika's pairs take the defaults):
    a key filter, a compare mode, field-level differences for the first `field_diff_keys` keys still
    differing (short values shown unless `show_values` is false), and a repair plan."""

    keys: KeysSpec | None = None
    compare: str = "full"
    show_values: bool = True
    field_diff_keys: int = 0
    repair_plan: bool = False

    def key_filter(self) -> KeyFilter | None:
        return KeyFilter.of(self.keys)

    def filtered(self, options: SnapshotOptions) -> SnapshotOptions:
        """The snapshot options with the key filter: SCAN MATCH where one include allows it, the rest per page."""
        kf = self.key_filter()
        if kf is None:
            return options
        return dataclasses.replace(options, match=kf.scan_match(), key_filter=kf.keep)


class KeyspaceCheck(Check):
    name = "keyspace"
    coverage = (
        "master_keys",
        "replica_keys",
        "keys_compared",
        "master_keys_unreadable",
        "replica_keys_unreadable",
        "master_scan_duplicates",
        "replica_scan_duplicates",
        "master_keys_vanished",
        "replica_keys_vanished",
        "master_keys_filtered_out",
        "replica_keys_filtered_out",
        "recheck_candidates",
        "recheck_converged",
        "recheck_in_flight",
        "recheck_divergent",
        "recheck_confirmed_live",
        "recheck_unrechecked",
        "recheck_unreadable",
    )

    def __init__(
        self,
        settings: KeyspaceSettings,
        *,
        dbs: list[int] | None,
        dbs_from_info: bool,
        ack: ReplicaAck | None,
        judge_hot_keys: int = 0,
        annotate: Annotate | None = None,
        extras: KeyspaceExtras | None = None,
    ) -> None:
        """`dbs` as the pair names them; without them, every db INFO keyspace lists on either side when
        `dbs_from_info` (Redis), else db 0 (Pika's INFO keyspace is not a reliable list). `ack` tells the
        recheck when the replica has applied a master read (None for two independent servers); up to
        `judge_hot_keys` keys still moving after the rounds are judged at the replica's offset
        (audit/sources/redis/hotkeys.py: Redis replication offsets only). `annotate` adds a kind's own
        evidence to the findings before they are staged (Pika: what its binlogs say of each key).
        `extras`: key filter, compare mode, field-level differences, repair plan (kind redis)."""
        self.settings = settings
        self.dbs = dbs
        self.dbs_from_info = dbs_from_info
        self.ack = ack
        self.judge_hot_keys = judge_hot_keys
        self.annotate = annotate
        self.extras = extras or KeyspaceExtras()

    def _clients(self, ctx: StageContext) -> AbstractContextManager[dict[str, redis.Redis]]:
        return connected_sides({side: str(ctx.url(side)) for side in SIDES}, ctx.pair.name)

    # --- snapshot ----------------------------------------------------------------------------------
    def snapshot(self, ctx: StageContext) -> None:
        listed: dict[str, dict[int, int]] = {}
        with self._clients(ctx) as clients:  # both sides answer before any snapshot process starts
            refuse_one_server(ctx.pair.name, {s: server_run_id(c) for s, c in clients.items()}, "run_id")
            if self.dbs_from_info:
                listed = {s: keyspace_dbs(parse_info(info_text(c, "keyspace"))) for s, c in clients.items()}
        dbs, totals = self.dbs or [0], {"master": 0, "replica": 0}
        if self.dbs_from_info:
            dbs = self.dbs or sorted(set(listed["master"]) | set(listed["replica"])) or [0]
            totals = {side: sum(found.get(d, 0) for d in dbs) for side, found in listed.items()}
        from audit.sources.redis.sides import SideJob, snapshot_sides

        s = self.settings
        jobs = [
            SideJob(side, str(ctx.url(side)), shown_server_url(ctx.url(side)), dbs, ctx.snapshot_dir(side))
            for side in SIDES
        ]
        progress = ctx.progress
        label = ctx.pair.name
        # Both sides at once (a process each): the reads of one key on the two sides are close in time,
        # so fewer in-flight writes show up as differences, and the wall time halves.
        try:
            metas = snapshot_sides(
                jobs,
                self.extras.filtered(s.snapshot_options()),
                processes=s.snapshot_processes,
                on_keys=(lambda side, n: progress(f"{label} {side}", n, totals[side])) if progress else None,
            )
        except ConfigError as e:
            if self.dbs or NO_SUCH_DB not in str(e):
                raise  # a db the inventory names: the operator's mistake (exit 2)
            raise fewer_databases(ctx.pair.name, e, listed) from None
        for side, meta in metas.items():
            st = meta["stats"]
            ctx.metrics[f"{side}_keys_scanned"] = st["keys_scanned"]
            ctx.metrics[f"{side}_keys_vanished"] = st["keys_vanished"]
            ctx.metrics[f"{side}_snapshot_s"] = meta["duration_s"]
            ctx.metrics[f"{side}_keys_per_s"] = round(st["keys_scanned"] / max(meta["duration_s"], 1e-6))
            ctx.metrics[f"{side}_commands"] = st["commands"]
        ctx.state.dbs = dbs
        if not self.dbs and not self.dbs_from_info:  # Pika: nothing lists its DBs, so db 0 unless told
            ctx.state.limits.append("db 0 only: the servers do not list their DBs; set dbs to compare others")
        self._notes(ctx, {side: filtered_out(meta) for side, meta in metas.items()})
        ctx.done(f"dbs {dbs}")

    def _notes(self, ctx: StageContext, filtered: dict[str, int]) -> None:
        """The compare mode and what the key filter left out, for the summary (and their metrics)."""
        ctx.state.notes.append(compare_note(self.extras.compare))
        if limit := compare_limit(self.extras.compare):
            ctx.state.limits.append(limit)
        kf = self.extras.key_filter()
        if kf is None:
            return
        for side, n in filtered.items():
            ctx.metrics[f"{side}_keys_filtered_out"] = n
        match = kf.scan_match()
        said = filter_note(kf.describe(), filtered, match.decode("utf-8", "replace") if match is not None else None)
        ctx.state.notes.append(said)
        ctx.state.limits.append(f"only the keys the filter keeps: {said}")

    # --- diff ---------------------------------------------------------------------------------------
    def diff(self, ctx: StageContext) -> None:
        from audit.diff.keyspace import diff_snapshots

        started = time.time()
        m_path, r_path = (str(ctx.snapshot_dir(side) / KEYS_FILE) for side in SIDES)
        candidates = str(ctx.work_dir() / CANDIDATES)
        coverage = diff_snapshots(
            ctx.spark(), m_path, r_path, candidates, self.settings.ttl_tolerance_ms, self.extras.compare
        )
        ctx.metrics.update(coverage)
        ctx.metrics["diff_s"] = round(time.time() - started, 3)

    # --- recheck --------------------------------------------------------------------------------------
    def recheck(self, ctx: StageContext) -> None:
        from audit.diff.findings import keyspace_findings
        from audit.sources.redis.recheck import recheck, set_confirmed_live, split_for_recheck

        s = self.settings
        spark = ctx.spark()
        cands = spark.read.parquet(str(ctx.work_dir() / CANDIDATES))
        total = int(ctx.metrics.get("candidates") or 0)
        to_check, rest = split_for_recheck(cands, s.recheck_max_keys, total)
        with self._clients(ctx) as clients:  # closed once the pipes, each on its own connection, are made
            pipes = [RespPipe(clients[side]) for side in SIDES]
        try:
            survivors, stats = recheck(
                spark,
                to_check,
                *pipes,
                rounds=s.recheck_rounds,
                interval_s=s.recheck_interval_s,
                tolerance_ms=s.ttl_tolerance_ms,
                page=s.big_key_elements,
                window_bytes=WINDOW_BYTES,
                ack=self.ack,
                ack_wait_s=s.recheck_ack_wait_s,
                judge_hot_keys=self.judge_hot_keys,
                mode=self.extras.compare,
                max_keys_per_s=s.snapshot_options().pace_settings().max_keys_per_s,
            )
            rows = first_value_mismatches(survivors, self.extras.field_diff_keys if total else 0)
            evidence = field_evidence(
                rows, selecting(*pipes), show_values=self.extras.show_values, page=s.big_key_elements
            )
        except (OSError, ConnectionError, redis.RedisError) as e:
            raise recheck_failed(ctx.pair.name, e, [(str(ctx.url(side)), side) for side in SIDES]) from None
        finally:
            for p in pipes:
                p.close()
        found = self._findings(ctx, keyspace_findings(survivors, stats.rounds_run), evidence, rest)
        if isinstance(found, pa.Table):
            ctx.add_findings_table(found)
        else:
            ctx.add_findings_frame(found)
        if self.extras.repair_plan and total:  # no candidate, no finding: nothing to repair
            write_repair(ctx, found)
        ctx.metrics.update(
            recheck_candidates=stats.candidates,
            recheck_converged=stats.converged,
            recheck_in_flight=stats.in_flight,
            recheck_unreadable=stats.unreadable,
            recheck_divergent=stats.divergent,
            recheck_rounds=stats.rounds_run,
            recheck_unrechecked=max(0, total - s.recheck_max_keys),
        )
        set_confirmed_live(ctx.metrics, stats)

    def _findings(
        self, ctx: StageContext, found: DataFrame, evidence: list[tuple[int, bytes, str]], rest: DataFrame | None
    ) -> DataFrame | pa.Table:
        """The rechecked findings with their field evidence, plus `rest` (reported without a recheck).

        Every candidate rechecked and no kind's annotation: at most recheck_max_keys rows, brought into the
        driver once (a projection of the survivors, which Spark computes there) and written from it. A
        Spark join, write and second pass for the repair plan would cost a few jobs for a few rows.
        """
        from audit.diff.findings import keyspace_findings

        if rest is None and self.annotate is None:
            return with_fields_table(found.toArrow(), evidence)
        found = with_fields(found, evidence)
        if rest is not None:
            found = found.unionByName(keyspace_findings(rest, 0))
        return found if self.annotate is None else self.annotate(ctx, found)

    # --- what the summary, the gate and a certificate need ----------------------------------------------
    def uncovered(self, metrics: Mapping[str, MetricValue]) -> list[Uncovered]:
        unreadable = int(metrics.get("master_keys_unreadable") or 0) + int(metrics.get("replica_keys_unreadable") or 0)
        unrechecked = int(metrics.get("recheck_unrechecked") or 0)
        return [
            Uncovered(unreadable, f"{unreadable} keys could not be read (see snapshots/*/snapshot.json errors_sample)"),
            Uncovered(
                unrechecked,
                f"{unrechecked} divergent keys reported without a live recheck (over recheck_max_keys)",
                gated=False,
            ),
            recheck_unreadable(metrics),
        ]

    def certify(self, run: RunDir, state: PairState, side: str) -> dict[str, Any]:
        from audit.sources.redis.content import side_certificate

        certified = side_certificate(Path(run.snapshot(state.pair, side)), state, side, self.extras.compare)
        return {**certified, "compare": self.extras.compare, "compare_meaning": COMPARE_MEANING[self.extras.compare]}


def fewer_databases(pair: str, error: ConfigError, listed: Mapping[str, Mapping[int, int]]) -> SourceError:
    """A db one server's INFO keyspace lists that the other refuses: the servers differ in `databases`.
    A replica with fewer cannot hold the master's keys there (it refuses the stream's SELECT and applies
    what follows to the db it had): the servers' set-up, not the inventory, which named no db."""
    holders = ", ".join(f"the {side}'s INFO keyspace lists dbs {sorted(dbs)}" for side, dbs in listed.items() if dbs)
    return SourceError(
        f"pair {pair}: {error} ({holders}): the two servers are set up with different `databases`, and the one"
        " with fewer databases than the other cannot hold its keys there; set `databases` alike (or give `dbs`"
        " to audit the dbs both have)"
    )


def recheck_failed(pair: str, error: BaseException, servers: Iterable[tuple[str, str]]) -> SourceError:
    """A read that failed mid-recheck, with each of `servers` (url, role) that no longer answers named:
    the driver's own words ("Connection reset by peer") name no server."""
    down = []
    for url, role in servers:
        try:
            connect(url, role=role).close()
        except SourceConnectError as e:
            down.append(e)
    said = "".join(f"; {d}" for d in down)
    return SourceError(f"pair {pair}: recheck failed: {error}{said}", where=down[0].where if down else "")


def recheck_unreadable(metrics: Mapping[str, MetricValue]) -> Uncovered:
    """Differing keys the recheck could not read live (an error reply): neither converged nor confirmed."""
    n = int(metrics.get("recheck_unreadable") or 0)
    return Uncovered(n, f"{n} differing keys could not be re-read live (an error reply): not judged")
