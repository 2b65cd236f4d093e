"""Re-read diverged keys live; only divergences that persist are reported.

A key that differs once may only be in flight. Each round reads the remaining keys on the master, then
on the replica, and compares them with the diff's rule (:func:`category_of`, the per-key twin of
audit/diff/keyspace.py's `classify`; a test holds the two to the same cases):

- with the replication stream to go by (a :class:`~audit.sources.redis.ack.ReplicaAck`): the first round
  runs at once; after the master's read the recheck waits until the replica has applied the master's
  position, reads the replica, then the master again. A key the replica now agrees with (either master
  read) has converged; one whose master value moved is in flight and read again in the next round. One
  that still differs while both master reads agree is a confirmed divergence at once if the master
  wrote nothing between them (its position did not move). Else the key may have moved and come back
  between the two reads while the replica, read in between, held the state it passed through: it is a
  suspect, judged at the replica's own offset (audit/sources/redis/hotkeys.py) when it fits one read,
  else (or without a verdict in time) confirmed when a second round finds it differing with the same
  values on both sides;
- without it (two independent servers): rounds `interval_s` apart; a key that differs while the master's
  value did not change since its previous read survives the round; one whose master value changed is in
  flight this round and read again in the next. What still differs after the last round is reported.

Keys still in flight after the last round are not judged: they are counted (`recheck_in_flight`, gated
by `max_in_flight` when a pair sets it), never silently dropped.
"""

from __future__ import annotations

import functools
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from audit.diff.compare_modes import mode_category
from audit.diff.keyspace import VALUE_COLUMNS
from audit.diff.spark import arrow_frame
from audit.pacing import Pacer, PaceSettings
from audit.sources.redis.ack import ReplicaAck, wait_for
from audit.sources.redis.hotkeys import Verdict, as_state, fits_one_read, judge_keys
from audit.sources.redis.keys import ERROR, UNSTABLE, VANISHED, KeyReader, KeyState, expiries_differ
from audit.sources.redis.resp import RespPipe
from audit.sources.redis.snapshot import SNAPSHOT_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

MASTER_FIELDS = ("m_type", "m_digest", "m_length", "m_expire_at_ms", "m_status")
Key = tuple[int, bytes]
_READS = pa.field("reads", pa.int64())  # reads of the key the diff kept: one per live read
SURVIVORS_SCHEMA = pa.schema(
    [
        ("db", pa.int32()),
        ("key", pa.binary()),
        *[
            (f"{p}{f.name}", f.type)
            for p in ("m_", "r_")
            for f in (*[SNAPSHOT_SCHEMA.field(c) for c in VALUE_COLUMNS], _READS)
        ],
        ("category", pa.string()),
    ]
)
"""The candidates' diff rows (audit/diff/keyspace.py) as the recheck reports its survivors."""


@dataclass
class RecheckStats:
    candidates: int = 0
    converged: int = 0
    in_flight: int = 0
    confirmed: int = 0
    """Divergences judged against the replication stream (the replica had applied the master's read)."""
    live: bool = False
    """Whether the recheck had the replication stream to judge by. Without it (two servers that do not
    replicate: a verification, `check_replication: false`) nothing can be confirmed live, and `confirmed`
    is not a count of anything: the metric `recheck_confirmed_live` is then left out, not reported 0."""
    divergent: int = 0
    """Every divergence the recheck kept: `confirmed` plus those judged by rounds without an ack."""
    unreadable: int = 0
    """Keys whose last live read was an error reply (MOVED, CLUSTERDOWN, NOPERM, BUSY...): not judged."""
    rounds_run: int = 0
    per_round_remaining: list[int] = field(default_factory=list)


CONFIRMED_LIVE = "recheck_confirmed_live"


def set_confirmed_live(metrics: dict[str, Any], stats: RecheckStats) -> None:
    """`recheck_confirmed_live` where the replication stream judged the recheck; without it, left out (and
    one a resumed run kept from before is dropped): a 0 there read as "no divergence was confirmed"."""
    if stats.live:
        metrics[CONFIRMED_LIVE] = stats.confirmed
    else:
        metrics.pop(CONFIRMED_LIVE, None)


def split_for_recheck(cands: DataFrame, max_keys: int, total: int) -> tuple[DataFrame, DataFrame | None]:
    """(the candidates to recheck, the rest to report without a recheck, or None when all fit).

    The first `max_keys` by (db, key): an unordered `limit` may pick other rows each time it is evaluated
    (once by the recheck, once by the anti-join), so a key could be both rechecked and reported
    unrechecked, or neither. Ordered, the two parts always complement each other.
    """
    if total <= max_keys:
        return cands, None
    to_check = cands.orderBy("db", "key").limit(max_keys)
    return to_check, cands.join(to_check.select("db", "key"), on=["db", "key"], how="left_anti")


class DbReader(Protocol):
    """Reads keys of one db wherever they live (a cluster side: audit.sources.redis.routing.ClusterKeyReader)."""

    def read_db(self, db: int, keys: Sequence[bytes]) -> list[KeyState]: ...


Reader = KeyReader | DbReader


def read_keys(reader: Reader, keys: Iterable[Key], pacer: Pacer | None = None) -> dict[Key, KeyState]:
    """Each key's state, 1000 keys a batch; with `pacer`, at most its keys/s (the side's max_keys_per_s)."""
    by_db: dict[int, list[bytes]] = defaultdict(list)
    for db, key in keys:
        by_db[db].append(key)
    out: dict[Key, KeyState] = {}
    for db, db_keys in sorted(by_db.items()):
        if isinstance(reader, KeyReader):
            reader.pipe.select(db)
        for i in range(0, len(db_keys), _BATCH):
            batch = db_keys[i : i + _BATCH]
            if pacer is not None:
                pacer.before_batch(len(batch))
            got = reader.read(batch) if isinstance(reader, KeyReader) else reader.read_db(db, batch)
            out.update(((db, s.key), s) for s in got)
    return out


_BATCH = 1000


def pacers(max_keys_per_s: float | None) -> tuple[Pacer | None, Pacer | None]:
    """A token bucket per side for the recheck's reads: the cap a snapshot keeps holds here too (a
    broken replica can leave recheck_max_keys candidates, read two or three times a round)."""
    if max_keys_per_s is None:
        return None, None
    return Pacer(PaceSettings(max_keys_per_s=max_keys_per_s)), Pacer(PaceSettings(max_keys_per_s=max_keys_per_s))


def _present(s: KeyState | None) -> KeyState | None:
    return None if s is None or s.status == VANISHED else s


def category_of(master: KeyState | None, replica: KeyState | None, tolerance_ms: int, mode: str = "full") -> str | None:
    """The keyspace diff's category for one key read live on both sides (None: they agree, or unreadable),
    as the pair's compare mode counts it (audit/diff/compare_modes.py)."""
    found = _full_category(master, replica, tolerance_ms)
    if mode == "full" or found is None:
        return found
    m, r = _present(master), _present(replica)
    return mode_category(
        found,
        mode,
        m_length=m.length if m else None,
        r_length=r.length if r else None,
        m_status=m.status if m else None,
        r_status=r.status if r else None,
        ttl_differs=m is not None and r is not None and expiries_differ(m.expire_at_ms, r.expire_at_ms, tolerance_ms),
    )


def _full_category(master: KeyState | None, replica: KeyState | None, tolerance_ms: int) -> str | None:
    m, r = _present(master), _present(replica)
    if (m is not None and m.status == ERROR) or (r is not None and r.status == ERROR):
        return None
    if m is None and r is None:
        return None
    if r is None:
        return "missing_on_replica"
    if m is None:
        return "extra_on_replica"
    if m.type != r.type:
        return "type_mismatch"
    if m.digest != r.digest or m.length != r.length or UNSTABLE in (m.status, r.status):
        return "value_mismatch"
    return "ttl_mismatch" if expiries_differ(m.expire_at_ms, r.expire_at_ms, tolerance_ms) else None


def _same_master_value(a: KeyState | None, b: KeyState | None, tolerance_ms: int) -> bool:
    """The master's value did not move between two reads (expiry within the tolerance counts as still)."""
    a, b = _present(a), _present(b)
    if a is None or b is None:
        return a is None and b is None
    if UNSTABLE in (a.status, b.status) or (a.type, a.digest, a.length) != (b.type, b.digest, b.length):
        return False
    return not expiries_differ(a.expire_at_ms, b.expire_at_ms, tolerance_ms)


@dataclass
class _Round:
    """What one round decided: keys judged divergent (with the reads that show it) and keys to read again."""

    divergent: dict[Key, tuple[KeyState | None, KeyState | None]] = field(default_factory=dict)
    again: dict[Key, KeyState | None] = field(default_factory=dict)
    converged: int = 0
    unreadable: set[Key] = field(default_factory=set)
    """Keys read again because a read was an error reply: an unreadable key never counts as converged."""
    suspects: dict[Key, tuple[KeyState | None, KeyState | None]] = field(default_factory=dict)
    """Keys that differed with the master's two reads alike while the master wrote meanwhile: the key may
    have moved and come back between them (a key deleted and created again, a member added and removed),
    and the replica, read in between, have held the state it passed through. Not judged yet."""


def _errored(*states: KeyState | None) -> bool:
    return any(s is not None and s.status == ERROR for s in states)


def _round_with_ack(
    keys: list[Key],
    m_reader: KeyReader,
    r_reader: KeyReader,
    ack: ReplicaAck,
    ack_wait_s: float,
    tolerance_ms: int,
    mode: str,
    paced: tuple[Pacer | None, Pacer | None] = (None, None),
) -> _Round:
    out = _Round()
    before = read_keys(m_reader, keys, paced[0])
    mark = ack.mark(m_reader.pipe)
    acked = wait_for(ack, r_reader.pipe, mark, ack_wait_s)
    replica = read_keys(r_reader, keys, paced[1])
    after = read_keys(m_reader, keys, paced[0])
    # Nothing written since `mark`: the replica, at `mark` or later, is at `mark`, where the master held
    # what `after` read. Else a key alike in both master reads may still have changed between them.
    quiet = acked and ack.mark(m_reader.pipe) == mark
    for k in keys:
        r = replica.get(k)
        if _errored(before.get(k), r, after.get(k)):
            out.again[k] = after.get(k)
            out.unreadable.add(k)
        elif (
            category_of(before.get(k), r, tolerance_ms, mode) is None
            or category_of(after.get(k), r, tolerance_ms, mode) is None
        ):
            out.converged += 1
        elif acked and _same_master_value(before.get(k), after.get(k), tolerance_ms):
            (out.divergent if quiet else out.suspects)[k] = (after.get(k), r)
        else:
            out.again[k] = after.get(k)
    return out


Judge = Callable[[dict[Key, str]], dict[Key, Verdict]]
"""Judges keys (read as the type given) at the replica's offset (audit/sources/redis/hotkeys.py)."""


def _settle(
    result: _Round,
    earlier: dict[Key, tuple[KeyState | None, KeyState | None]],
    judge: Judge | None,
    fits: Callable[[KeyState | None], bool],
    tolerance_ms: int,
) -> dict[Key, tuple[KeyState | None, KeyState | None]]:
    """Decide a round's suspects; return those seen for the first time (the next round's `earlier`).

    A key the judge may read whole is judged at the replica's own offset, between two master reads a
    few hundred microseconds apart. Any other (a key bigger than a page, no judge, no verdict in time)
    is a divergence once a second round finds it differing with the same values on both sides."""
    small = {}
    for k, (m, r) in result.suspects.items():
        m, r = _present(m), _present(r)
        if (shown := m or r) is not None and fits(m) and fits(r):
            small[k] = shown.type
    judged = judge(small) if judge is not None and small else {}
    first_seen = {}
    for k, (m, r) in result.suspects.items():
        if (verdict := judged.get(k)) is not None:
            if verdict.agrees:
                result.converged += 1
            else:
                result.divergent[k] = (as_state(k[1], verdict.master), as_state(k[1], verdict.replica))
        elif (seen := earlier.get(k)) is not None and all(map(_same_master_value, seen, (m, r), (tolerance_ms,) * 2)):
            result.divergent[k] = (m, r)
        else:
            first_seen[k] = (m, r)
            result.again[k] = m
    return first_seen


def _round_without_ack(
    keys: list[Key],
    previous: dict[Key, KeyState | None],
    m_reader: Reader,
    r_reader: Reader,
    tolerance_ms: int,
    last: bool,
    mode: str,
    paced: tuple[Pacer | None, Pacer | None] = (None, None),
) -> _Round:
    out = _Round()
    master = read_keys(m_reader, keys, paced[0])
    replica = read_keys(r_reader, keys, paced[1])
    for k in keys:
        m, r = master.get(k), replica.get(k)
        if _errored(m, r):
            out.again[k] = m
            out.unreadable.add(k)
        elif category_of(m, r, tolerance_ms, mode) is None:
            out.converged += 1
        elif last and _same_master_value(previous.get(k), m, tolerance_ms):
            out.divergent[k] = (m, r)
        else:
            out.again[k] = m  # a difference must persist to the last round, with the master's value still
    return out


def _snapshot_state(row: Any) -> KeyState | None:
    """The master's side of a diff candidate row, as the state the first round compares against."""
    if row["m_type"] is None:
        return None
    return KeyState(
        bytes(row["key"]),
        row["m_type"],
        None,
        row["m_expire_at_ms"],
        row["m_length"] or 0,
        row["m_digest"],
        row["m_status"],
        None,
        0,
    )


def recheck(
    spark: SparkSession,
    candidates: DataFrame,
    master: RespPipe | KeyReader | DbReader,
    replica: RespPipe | KeyReader | DbReader,
    *,
    rounds: int,
    interval_s: float,
    tolerance_ms: int,
    page: int,
    window_bytes: int,
    ack: ReplicaAck | None = None,
    ack_wait_s: float = 5.0,
    judge_hot_keys: int = 0,
    mode: str = "full",
    max_keys_per_s: float | None = None,
) -> tuple[DataFrame, RecheckStats]:
    """The persisting divergences (the diff's candidate columns, re-read values) and what happened.

    `master`/`replica`: a pipe to one server (keys read there, db by db), a KeyReader on one (a reader
    that reads some replies its own way: audit/sources/redis/routing.py AskAbsentReader), or a DbReader
    (a fleet side whose keys live on several nodes). The replication stream (`ack`) and hot-key judging
    need one server on each side: with a DbReader they are not used (two independent systems).
    """
    stats = RecheckStats()
    rows = candidates.select("db", "key", *MASTER_FIELDS).collect()
    stats.candidates = len(rows)
    m_reader, r_reader = (_reader(side, page, window_bytes) for side in (master, replica))
    stats.live = ack is not None and isinstance(m_reader, KeyReader) and isinstance(r_reader, KeyReader)
    if rounds == 0:
        return candidates, stats
    pending: dict[Key, KeyState | None] = {(r["db"], bytes(r["key"])): _snapshot_state(r) for r in rows}
    divergent: dict[Key, tuple[KeyState | None, KeyState | None]] = {}
    paced = pacers(max_keys_per_s)
    unreadable: set[Key] = set()
    suspected: dict[Key, tuple[KeyState | None, KeyState | None]] = {}
    if not (isinstance(m_reader, KeyReader) and isinstance(r_reader, KeyReader)):
        ack, judge_hot_keys = None, 0
    judging: Judge | None = None
    if judge_hot_keys and isinstance(m_reader, KeyReader) and isinstance(r_reader, KeyReader):
        pipes = (m_reader.pipe, r_reader.pipe)
        judging = functools.partial(
            judge_keys, pipes=pipes, budget_s=ack_wait_s, tolerance_ms=tolerance_ms, paced=paced
        )
    fits = functools.partial(fits_one_read, page=page, window_bytes=window_bytes)
    for n in range(rounds):
        if not pending:
            break
        if ack is None or n > 0:
            time.sleep(interval_s)
        keys = list(pending)
        if ack is not None:
            assert isinstance(m_reader, KeyReader) and isinstance(r_reader, KeyReader)
            result = _round_with_ack(keys, m_reader, r_reader, ack, ack_wait_s, tolerance_ms, mode, paced)
            suspected = _settle(result, suspected, judging, fits, tolerance_ms)
        else:
            last = n == rounds - 1
            result = _round_without_ack(keys, pending, m_reader, r_reader, tolerance_ms, last, mode, paced)
        divergent.update(result.divergent)
        stats.converged += result.converged
        unreadable = result.unreadable
        stats.confirmed += len(result.divergent) if ack is not None else 0
        pending = result.again
        stats.rounds_run += 1
        stats.per_round_remaining.append(len(pending))
    stats.unreadable = len(unreadable & pending.keys())
    pending = {k: v for k, v in pending.items() if k not in unreadable}
    if judging is not None and pending:
        hot = [(k, s.type) for k, s in pending.items() if s is not None and fits(s)][:judge_hot_keys]
        _judge_still_moving(judging(dict(hot)), pending, divergent, stats)
    stats.in_flight = len(pending)
    stats.divergent = len(divergent)
    return _divergent_frame(spark, divergent, tolerance_ms, mode), stats


def _judge_still_moving(
    verdicts: dict[Key, Verdict],
    pending: dict[Key, KeyState | None],
    divergent: dict[Key, tuple[KeyState | None, KeyState | None]],
    stats: RecheckStats,
) -> None:
    """The judge's verdicts on keys still moving after the rounds: each judged key leaves `pending`."""
    for k, verdict in verdicts.items():
        del pending[k]
        if verdict.agrees:
            stats.converged += 1
        else:
            stats.confirmed += 1
            divergent[k] = (as_state(k[1], verdict.master), as_state(k[1], verdict.replica))


def _reader(side: RespPipe | KeyReader | DbReader, page: int, window_bytes: int) -> Reader:
    return KeyReader(side, page, window_bytes) if isinstance(side, RespPipe) else side


def _divergent_frame(
    spark: SparkSession,
    divergent: dict[Key, tuple[KeyState | None, KeyState | None]],
    tolerance_ms: int,
    mode: str = "full",
) -> DataFrame:
    """The judged keys as diff rows (db, key, category, m_*, r_*), classified by :func:`category_of`, the
    per-key twin of the diff's rule (the recheck judged them with it; tests/unit/test_recheck.py holds
    it to the Spark rule). Built in the driver (at most `recheck_max_keys` rows) as a local frame: the
    evidence, the findings and the repair plan all read it, and Spark computes their projections of
    it on the driver, with no job of its own."""
    rows = []
    for (db, key), (m, r) in divergent.items():
        category = category_of(m, r, tolerance_ms, mode)
        if category is not None:
            sides = {**_side_columns("m_", _present(m)), **_side_columns("r_", _present(r))}
            rows.append({"db": db, "key": key, **sides, "category": category})
    return arrow_frame(spark, pa.Table.from_pylist(rows, schema=SURVIVORS_SCHEMA))


def _side_columns(prefix: str, state: KeyState | None) -> dict[str, Any]:
    """One side's columns of a diff row: the read's values and its read count (null where it lacks the key)."""
    values = {f"{prefix}{name}": None if state is None else getattr(state, name) for name in VALUE_COLUMNS}
    return {**values, f"{prefix}reads": None if state is None else 1}
