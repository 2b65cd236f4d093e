"""Re-read diverged keys live for a few rounds; only divergences that persist are reported.

A key that differs once may only be in flight (redis-full-check's idea). Each round reads the
remaining keys on the master, then on the replica, and classifies them with the same Spark rule as
the diff. A key is dropped when both sides now agree (`converged`), or when the master's own value
changed since the previous read (`in_flight`: it is being written, or expired, so no verdict can be
given about the replica from this audit).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from audit.diff.keyspace import classify, join_sides, latest_read
from audit.sources.redis.keys import KeyReader, KeyState
from audit.sources.redis.resp import RespPipe
from audit.sources.redis.snapshot import SNAPSHOT_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

MASTER_FIELDS = ("m_type", "m_digest", "m_length", "m_expire_at_ms", "m_status")


@dataclass
class RecheckStats:
    candidates: int = 0
    converged: int = 0
    in_flight: int = 0
    rounds_run: int = 0
    per_round_remaining: list[int] = field(default_factory=list)


class DbReader(Protocol):
    """Reads keys of one db wherever they live (a cluster: `audit.sources.redis.routing.ClusterKeyReader`)."""

    def read_db(self, db: int, keys: Sequence[bytes]) -> list[KeyState]: ...


def read_keys(reader: KeyReader | DbReader, keys: Iterable[tuple[int, bytes]]) -> list[tuple[int, KeyState]]:
    by_db: dict[int, list[bytes]] = defaultdict(list)
    for db, key in keys:
        by_db[db].append(key)
    out: list[tuple[int, KeyState]] = []
    for db, db_keys in sorted(by_db.items()):
        if not isinstance(reader, KeyReader):
            for i in range(0, len(db_keys), 1000):
                out.extend((db, s) for s in reader.read_db(db, db_keys[i : i + 1000]))
            continue
        reader.pipe.execute([(b"SELECT", b"%d" % db)])
        for i in range(0, len(db_keys), 1000):
            out.extend((db, s) for s in reader.read(db_keys[i : i + 1000]))
    return out


def states_frame(spark: SparkSession, reads: list[tuple[int, KeyState]]) -> DataFrame:
    present = [(db, s) for db, s in reads if s.status != "vanished"]
    rows: dict[str, list[Any]] = {"db": [db for db, _ in present]}
    for name in SNAPSHOT_SCHEMA.names[1:]:
        rows[name] = [getattr(s, name) for _, s in present]
    return spark.createDataFrame(pa.Table.from_pydict(rows, schema=SNAPSHOT_SCHEMA))


def _master_changed(before: tuple[Any, ...], now: tuple[Any, ...], tolerance_ms: int) -> bool:
    b_type, b_digest, b_len, b_exp, _ = before
    n_type, n_digest, n_len, n_exp, n_status = now
    if n_status == "unstable" or (b_type, b_digest, b_len) != (n_type, n_digest, n_len):
        return True
    if (b_exp is None) != (n_exp is None):
        return True
    return b_exp is not None and abs(b_exp - n_exp) > tolerance_ms


def recheck(
    spark: SparkSession,
    candidates: DataFrame,
    master: RespPipe | DbReader,
    replica: RespPipe | DbReader,
    *,
    rounds: int,
    interval_s: float,
    tolerance_ms: int,
    page: int,
    window_bytes: int,
) -> tuple[DataFrame, RecheckStats]:
    """Return the persisting divergences (same columns as the diff's candidates) and what happened.

    `master`/`replica`: a pipe to one server (keys read there, db by db), or a DbReader (a fleet side).
    """
    stats = RecheckStats()
    rows = candidates.select("db", "key", *MASTER_FIELDS).collect()
    stats.candidates = len(rows)
    master_before = {(r["db"], bytes(r["key"])): tuple(r[f] for f in MASTER_FIELDS) for r in rows}
    current = candidates
    m_reader, r_reader = (
        KeyReader(side, page, window_bytes) if isinstance(side, RespPipe) else side for side in (master, replica)
    )
    for _ in range(rounds):
        if not master_before:
            break
        time.sleep(interval_s)
        keys = list(master_before)
        m_reads = read_keys(m_reader, keys)
        r_reads = read_keys(r_reader, keys)
        joined = join_sides(latest_read(states_frame(spark, m_reads)), latest_read(states_frame(spark, r_reads)))
        current = classify(joined, tolerance_ms).where("category IS NOT NULL").drop("unreadable").cache()
        still = {
            (r["db"], bytes(r["key"])): tuple(r[f] for f in MASTER_FIELDS)
            for r in current.select("db", "key", *MASTER_FIELDS).collect()
        }
        survivors = {}
        for k, before in master_before.items():
            if k not in still:
                stats.converged += 1
            elif _master_changed(before, still[k], tolerance_ms):
                stats.in_flight += 1
            else:
                survivors[k] = still[k]
        master_before = survivors
        stats.rounds_run += 1
        stats.per_round_remaining.append(len(survivors))
    if stats.rounds_run == 0:
        return candidates, stats
    keep = spark.createDataFrame([(db, key) for db, key in master_before], "db int, key binary")
    return current.join(keep, on=["db", "key"], how="left_semi"), stats
