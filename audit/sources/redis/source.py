"""Kind `redis`: keyspace snapshot and diff, live recheck, replication state. Pika reuses the keyspace part."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar
from urllib.parse import urlsplit

import redis

from audit.errors import ConfigError, SourceError
from audit.inventory import ConnResolver, Pair, endpoint_url, redact_url
from audit.layout import RunDir
from audit.sources.base import Progress
from audit.sources.redis.client import connect
from audit.sources.redis.info import keyspace_dbs
from audit.sources.redis.replication import Sample, lag_of, replication_findings, wrong_master
from audit.sources.redis.resp import RespPipe
from audit.sources.redis.snapshot import KEYS_FILE, META_FILE, SnapshotOptions, capture_state, snapshot_side
from audit.sources.sink import FindingsSink, finding_from_row

SIDES = ("master", "replica")
CANDIDATES = "candidates.parquet"
SURVIVORS = "survivors.parquet"


def _urls(pair: Pair, resolver: ConnResolver | None) -> tuple[str, str]:
    m, r = endpoint_url(pair.master, resolver), endpoint_url(pair.replica, resolver)
    for side, url in (("master", m), ("replica", r)):
        if not url:
            raise ConfigError(f"pair {pair.name}: {side}: a redis:// URL is required for kind {pair.kind}")
        if urlsplit(url).scheme not in ("redis", "rediss", "unix"):
            raise ConfigError(
                f"pair {pair.name}: {side}: expected redis://, rediss:// or unix://, got {redact_url(url)}"
            )
    assert m is not None and r is not None
    return m, r


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "localhost", parts.port or 6379


class RedisSource:
    KIND: ClassVar[str] = "redis"
    SUITE: ClassVar[str] = "redis.json"
    ENDPOINT_HELP: ClassVar[str] = "redis://[user:password@]host:port  (rediss:// for TLS), or conn:<airflow_conn_id>"

    # --- snapshot ----------------------------------------------------------------------------------
    def snapshot(self, pair: Pair, run: RunDir, resolver: ConnResolver | None, progress: Progress | None) -> None:
        m_url, r_url = _urls(pair, resolver)
        clients = {
            "master": connect(m_url, role=f"{pair.name} master"),
            "replica": connect(r_url, role=f"{pair.name} replica"),
        }
        state = run.load_state(pair.name)
        states = {side: capture_state(c, with_clients=False) for side, c in clients.items()}
        state["servers"] = {
            side: {
                "endpoint": redact_url(url),
                "version": s["info_server"].get("redis_version"),
                "role": s["info_replication"].get("role"),
            }
            for (side, s), url in zip(states.items(), (m_url, r_url), strict=True)
        }
        early: list[dict[str, Any]] = []
        if pair.check_replication:
            wm = wrong_master(
                states["master"]["info_replication"], states["replica"]["info_replication"], *_host_port(m_url)
            )
            if wm is not None:
                early.append(wm.to_row(run.run_id, pair.name, pair.kind))
                state["checks"]["keyspace"] = {
                    "status": "skipped",
                    "reason": "the replica does not follow this "
                    f"pair's master ({json.dumps(wm.evidence, sort_keys=True)})",
                }
        else:
            state["checks"]["replication"] = {"status": "skipped", "reason": "check_replication: false"}
        state["early_findings"] = early
        if state["checks"].get("keyspace", {}).get("status") != "skipped":
            dbs = (
                pair.dbs
                or sorted(
                    set(keyspace_dbs(states["master"]["info_keyspace"]))
                    | set(keyspace_dbs(states["replica"]["info_keyspace"]))
                )
                or [0]
            )
            totals = {side: sum(keyspace_dbs(s["info_keyspace"]).get(d, 0) for d in dbs) for side, s in states.items()}
            self._snapshot_sides(pair, run, clients, (m_url, r_url), dbs, totals, progress, state)
        state["stages"]["snapshot"] = {"at_ms": int(time.time() * 1000)}
        run.save_state(pair.name, state)

    def _snapshot_sides(
        self,
        pair: Pair,
        run: RunDir,
        clients: dict[str, redis.Redis],
        urls: tuple[str, str],
        dbs: list[int],
        totals: dict[str, int],
        progress: Progress | None,
        state: dict[str, Any],
    ) -> None:
        s = pair.settings
        options = SnapshotOptions(qps=s.qps, scan_count=s.scan_count, page=s.big_key_elements)

        def one(side: str, url: str) -> dict[str, Any]:
            label = f"{pair.name} {side}"
            hook = (lambda n: progress(label, n, totals[side])) if progress else None
            return snapshot_side(
                clients[side],
                side=side,
                endpoint=redact_url(url),
                dbs=dbs,
                out_dir=run.snapshot(pair.name, side),
                options=options,
                on_keys=hook,
            )

        # Both sides at once: the reads of one key on the two sides are close in time, so fewer
        # in-flight writes show up as differences, and the wall time halves.
        with ThreadPoolExecutor(2) as pool:
            metas = dict(zip(SIDES, pool.map(one, SIDES, urls), strict=True))
        m = state["metrics"]
        for side, meta in metas.items():
            st = meta["stats"]
            m[f"{side}_keys_scanned"] = st["keys_scanned"]
            m[f"{side}_keys_vanished"] = st["keys_vanished"]
            m[f"{side}_snapshot_s"] = meta["duration_s"]
            m[f"{side}_keys_per_s"] = round(st["keys_scanned"] / max(meta["duration_s"], 1e-6))
            m[f"{side}_commands"] = st["commands"]
        state["dbs"] = dbs
        state["checks"]["keyspace"] = {"status": "done", "reason": f"dbs {dbs}"}

    # --- diff ------------------------------------------------------------------------------------
    def diff(self, pair: Pair, run: RunDir) -> None:
        state = run.require_stage(pair.name, "snapshot")
        if state["checks"].get("keyspace", {}).get("status") == "done":
            diff_keyspace(pair, run, state)
        state["stages"]["diff"] = {"at_ms": int(time.time() * 1000)}
        run.save_state(pair.name, state)

    # --- recheck, replication state, diagnosis, findings ------------------------------------------
    def recheck(self, pair: Pair, run: RunDir, resolver: ConnResolver | None) -> None:
        state = run.require_stage(pair.name, "diff")
        m_url, r_url = _urls(pair, resolver)
        master, replica = connect(m_url, role=f"{pair.name} master"), connect(r_url, role=f"{pair.name} replica")
        samples = [self._sample(master, replica)]
        with FindingsSink(run, pair.name, pair.kind) as sink:
            if state["checks"].get("keyspace", {}).get("status") == "done":
                self._recheck_keyspace(pair, run, state, master, replica, sink)
            # lag growth needs two samples over a second apart
            time.sleep(max(0.0, 1.1 - (time.time() * 1000 - samples[0].at_ms) / 1000))
            samples.append(self._sample(master, replica))
            extra = [finding_from_row(row) for row in state.get("early_findings", [])]
            if pair.check_replication and not extra:
                extra += replication_findings(
                    samples, _host_port(r_url)[1], pair.gate.max_lag_bytes, pair.gate.max_lag_seconds
                )
                lag_bytes, lag_s = lag_of(samples[-1], _host_port(r_url)[1])
                state["metrics"].update(lag_bytes=lag_bytes, lag_seconds=lag_s)
                state["checks"]["replication"] = {"status": "done", "reason": f"{len(samples)} INFO samples"}
            sink.add(extra)
        state["replication_samples"] = [
            {"at_ms": s.at_ms, "master": _repl_view(s.master), "replica": _repl_view(s.replica)} for s in samples
        ]
        state["counts"] = sink.counts
        state["stages"]["recheck"] = {"at_ms": int(time.time() * 1000)}
        run.save_state(pair.name, state)

    def _sample(self, master: redis.Redis, replica: redis.Redis) -> Sample:
        r = capture_state(replica, with_clients=False)
        m = capture_state(master, with_clients=True)
        return Sample(
            at_ms=m["at_ms"],
            master=m["info_replication"],
            replica=r["info_replication"],
            master_clients_raw=m.get("client_list_raw"),
        )

    def _recheck_keyspace(
        self,
        pair: Pair,
        run: RunDir,
        state: dict[str, Any],
        master: redis.Redis,
        replica: redis.Redis,
        sink: FindingsSink,
    ) -> None:
        from audit.diff.findings import keyspace_findings
        from audit.diff.spark import get_spark
        from audit.sources.redis.recheck import recheck

        spark = get_spark()
        s = pair.settings
        cands = spark.read.parquet(str(run.work(pair.name) / CANDIDATES))
        total = int(state["metrics"].get("candidates", 0))
        to_check = cands.limit(s.recheck_max_keys) if total > s.recheck_max_keys else cands
        pipes = [RespPipe(c) for c in (master, replica)]  # recheck reads few keys: no rate limiter needed
        try:
            survivors, stats = recheck(
                spark,
                to_check,
                *pipes,
                rounds=s.recheck_rounds,
                interval_s=s.recheck_interval_s,
                tolerance_ms=s.ttl_tolerance_ms,
                page=s.big_key_elements,
                window_bytes=1 << 20,
            )
        except (OSError, ConnectionError, redis.RedisError) as e:
            raise SourceError(f"pair {pair.name}: recheck failed: {e}") from None
        finally:
            for p in pipes:
                p.close()
        parts = [keyspace_findings(survivors, run.run_id, pair.name, pair.kind, stats.rounds_run)]
        if total > s.recheck_max_keys:
            rest = cands.join(to_check.select("db", "key"), on=["db", "key"], how="left_anti")
            parts.append(keyspace_findings(rest, run.run_id, pair.name, pair.kind, 0))
        tmp = run.work(pair.name) / SURVIVORS
        df = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
        df.write.mode("overwrite").parquet(str(tmp))
        sink.copy(tmp)
        state["metrics"].update(
            recheck_candidates=stats.candidates,
            recheck_converged=stats.converged,
            recheck_in_flight=stats.in_flight,
            recheck_rounds=stats.rounds_run,
            recheck_unrechecked=max(0, total - s.recheck_max_keys),
        )


def diff_keyspace(pair: Pair, run: RunDir, state: dict[str, Any]) -> None:
    """The Spark diff of the two keys.parquet snapshots; coverage into the pair's metrics (Redis and Pika)."""
    from audit.diff.keyspace import diff_snapshots
    from audit.diff.spark import get_spark

    started = time.time()
    m_path, r_path = (str(run.snapshot(pair.name, side) / KEYS_FILE) for side in SIDES)
    coverage = diff_snapshots(
        get_spark(), m_path, r_path, str(run.work(pair.name) / CANDIDATES), pair.settings.ttl_tolerance_ms
    )
    state["metrics"].update(coverage)
    state["metrics"]["diff_s"] = round(time.time() - started, 3)


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


def _repl_view(info: dict[str, Any]) -> dict[str, Any]:
    view = {k: info[k] for k in _REPL_FIELDS if k in info}
    view.update({k: v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)})
    return view


__all__ = ["META_FILE", "RedisSource"]
