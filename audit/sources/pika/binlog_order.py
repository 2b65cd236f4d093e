"""Order over the whole db for the Pika binlog alignment (audit/sources/pika/binlog_align.py): the pairs its
passes found, cut down to pairs that do not cross, and the records between them paired again in order.

Each pass pairs what the ones before it left, and only checks order around the records it pairs. Where the
master wrote the same command in several separate runs (two `INCR c` loops with other records between),
a gap or a replay can move the slave's copies of one run onto the master's positions of the other: the
position pass pairs them, across pairs the content passes make later. A pair whose master record comes
before another's while its slave record comes after cannot both be right (each side writes in order), and
the counts that follow from it were wrong (docs/formats/pika-binlog.md, "Alignment across repeated runs").

Only divergent pairs get here (a healthy one pairs every record by position):

1. the pairs, as segments: runs of consecutive master records at one shift (slave seq - master seq);
2. per db with a crossing, the heaviest chain of segments that keeps order on both sides (most records);
   the segments off it are dropped, and so are the short ones on it that cross a dropped one;
3. in each window between two pairs with records left on both sides, those records pair by a longest
   common subsequence of their content;
4. where records are still left on both sides, the whole stretch between two long segments around them
   pairs again by one, if that pairs more: shorter segments inside it may sit at a shift identical
   records allowed by chance.
"""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from audit.diff.materialize import Stage

MAX_SEGMENTS = 200_000
"""Segments of one diff, collected to the driver, past which order is left as the passes found it."""
MAX_WINDOW_RECORDS = 400_000
"""Records of both sides in the windows to pair again, collected to the driver, past which likewise."""
EXACT_LCS_CELLS = 4_000_000
"""A window of at most this many (master x slave) records pairs by an exact longest common subsequence;
a larger one by difflib's matching blocks (close to one, not always as long)."""


@dataclass(frozen=True)
class Segment:
    db: int
    m_first: int
    s_first: int
    n: int

    @property
    def m_last(self) -> int:
        return self.m_first + self.n - 1

    @property
    def s_last(self) -> int:
        return self.s_first + self.n - 1


def heaviest_chain(segments: Sequence[Segment]) -> list[Segment]:
    """The segments of one db, in master order, whose slave order is the same and whose records are the
    most: a heaviest increasing subsequence, by a prefix-maximum tree over slave ranks (n log n)."""
    segs = sorted(segments, key=lambda g: g.m_first)
    rank = {s: i + 1 for i, s in enumerate(sorted(g.s_first for g in segs))}
    tree = [(0, -1)] * (len(segs) + 1)  # (weight, index of the segment ending the chain)
    before = [-1] * len(segs)
    best = (0, -1)
    for i, seg in enumerate(segs):
        r, top = rank[seg.s_first], (0, -1)
        k = r - 1
        while k > 0:
            top, k = max(top, tree[k]), k - (k & -k)
        before[i] = top[1]
        here = (top[0] + seg.n, i)
        best = max(best, here)
        while r <= len(segs):
            tree[r], r = max(tree[r], here), r + (r & -r)
    chain, i = [], best[1]
    while i >= 0:
        chain.append(segs[i])
        i = before[i]
    return chain[::-1]


def lcs_pairs(a: Sequence[int], b: Sequence[int]) -> list[tuple[int, int]]:
    """Index pairs of a longest common subsequence of a and b (exact up to EXACT_LCS_CELLS cells), each
    record paired as early as one allows: what is left unpaired on the master comes last, where a slave
    behind has simply not written it yet (lag), not inside the stretch (loss)."""
    if not a or not b:
        return []
    if len(a) * len(b) > EXACT_LCS_CELLS:
        blocks = difflib.SequenceMatcher(None, list(a), list(b), autojunk=False).get_matching_blocks()
        return [(x.a + k, x.b + k) for x in blocks for k in range(x.size)]
    rows = [[0] * (len(b) + 1)]  # rows[k][j]: the longest common subsequence of a[-k:] and b[j:]
    for x in reversed(a):
        prev, row = rows[-1], [0] * (len(b) + 1)
        for j in range(len(b) - 1, -1, -1):
            row[j] = prev[j + 1] + 1 if x == b[j] else max(prev[j], row[j + 1])
        rows.append(row)
    out, i, j, n = [], 0, 0, len(a)
    while i < n and j < len(b):
        here, below = rows[n - i], rows[n - i - 1]
        if a[i] == b[j] and here[j] == below[j + 1] + 1:
            out.append((i, j))
            i, j = i + 1, j + 1
        elif here[j + 1] >= below[j]:  # a slave record skipped first keeps the master's for later ones
            j += 1
        else:
            i += 1
    return out


SMALL_SEGMENT = 10_000
"""A kept segment of at most this many pairs that crosses a dropped one is dropped too, and its records
paired again: a stretch of identical records pairs by chance at several shifts, and the chain may keep a
wrong short one (both sides then left the records between with nothing to pair them with)."""


def crosses(a: Segment, b: Segment) -> bool:
    return (a.m_first < b.m_first) != (a.s_first < b.s_first)


def dropped_segments(segments: Sequence[Segment]) -> list[Segment]:
    """For one db: the segments to drop, those off the heaviest chain and the short ones of it that cross
    one of those."""
    chain = heaviest_chain(segments)
    kept = set(chain)
    dropped = [g for g in segments if g not in kept]
    near = [g for g in chain if g.n <= SMALL_SEGMENT and any(crosses(g, d) for d in dropped)]
    return dropped + near


@dataclass(frozen=True)
class Region:
    """Records strictly between two long segments (bounds exclusive; -1 and None where there is none)."""

    db: int
    m_lo: int
    m_hi: int | None
    s_lo: int
    s_hi: int | None


def regions_between_long_segments(segments: Sequence[Segment]) -> list[Region]:
    """For one db whose segments keep order: the stretches between segments of more than SMALL_SEGMENT
    pairs (the whole db when there is none). Inside one, shorter segments may sit at a shift identical
    records allowed by chance: the stretch is paired again as a whole."""
    db = segments[0].db
    longs = sorted((g for g in segments if g.n > SMALL_SEGMENT), key=lambda g: g.m_first)
    bounds = [None, *longs, None]
    return [
        Region(
            db,
            lo.m_last if lo else -1,
            hi.m_first if hi else None,
            lo.s_last if lo else -1,
            hi.s_first if hi else None,
        )
        for lo, hi in itertools.pairwise(bounds)
    ]


def keep_order(
    matched: DataFrame, m_rest: DataFrame, s_rest: DataFrame, m: DataFrame, s: DataFrame, stage: Stage
) -> tuple[DataFrame, DataFrame, DataFrame]:
    """`matched` (db, m_seq, s_seq, m_epos, s_epos, m_spos, s_spos, how) without crossing pairs, and both
    sides' rests (side columns, `m_db`/`s_db`), with the records between kept pairs paired again."""
    uncrossed = _without_crossings(matched, m_rest, s_rest, m, s, stage)
    if uncrossed is None:  # too many segments to order on the driver: as the passes left them
        return matched, m_rest, s_rest
    matched, m_rest, s_rest = uncrossed
    again = _pair_in_windows(matched, m_rest, s_rest)
    if again is not None:
        keys = {p: again.select(F.col("db").alias(f"{p}db"), f"{p}seq") for p in ("m_", "s_")}
        matched = stage(matched.unionByName(again), "ordered")
        m_rest = stage(m_rest.join(keys["m_"], ["m_db", "m_seq"], "left_anti"), "m_ordered_rest")
        s_rest = stage(s_rest.join(keys["s_"], ["s_db", "s_seq"], "left_anti"), "s_ordered_rest")
    return _regions_again(matched, m_rest, s_rest, m, s, stage)


def _regions_again(
    matched: DataFrame, m_rest: DataFrame, s_rest: DataFrame, m: DataFrame, s: DataFrame, stage: Stage
) -> tuple[DataFrame, DataFrame, DataFrame]:
    """Where records are still left on both sides of a db, each stretch between long segments that holds
    some on both sides, paired again as a whole by a longest common subsequence where that pairs more
    than the passes did (their pairs are a common subsequence too, and place a gap where the docs say)."""
    regions = _regions_to_redo(matched, m_rest, s_rest)
    if not regions:
        return matched, m_rest, s_rest
    bounds = _bounds_frame(matched.sparkSession, regions)
    records = [_records_in(side, p, bounds) for p, side in (("m_", m), ("s_", s))]
    if records[0] is None or records[1] is None:
        return matched, m_rest, s_rest
    held = _pairs_per_region(matched, bounds)
    pairs, better = [], []
    for r, region in enumerate(regions):
        ms, ss = records[0].get(r, []), records[1].get(r, [])
        found = lcs_pairs([d for _, d in ms], [d for _, d in ss])
        if len(found) > held.get(r, 0):  # else the passes' pairs stay, and where they placed a gap
            better.append(region)
            pairs += [(region.db, ms[i][0], ss[j][0]) for i, j in found]
    if not better:
        return matched, m_rest, s_rest
    redone = _bounds_frame(matched.sparkSession, better)
    kept = matched.join(F.broadcast(redone), _inside("", "m_"), "left_anti")
    new_matched = stage(kept.unionByName(_pairs_frame(pairs, m, s)), "regions")
    rests = [
        stage(
            side.join(new_matched.select(F.col("db").alias(f"{p}db"), f"{p}seq"), [f"{p}db", f"{p}seq"], "left_anti"),
            f"{p}regions_rest",
        )
        for p, side in (("m_", m), ("s_", s))
    ]
    return new_matched, rests[0], rests[1]


def _pairs_per_region(matched: DataFrame, bounds: DataFrame) -> dict[int, int]:
    counts = matched.join(F.broadcast(bounds), _inside("", "m_")).groupBy("_r").count().collect()
    return {r["_r"]: r["count"] for r in counts}


def _regions_to_redo(matched: DataFrame, m_rest: DataFrame, s_rest: DataFrame) -> list[Region] | None:
    """The stretches between long segments that hold records left on both sides."""
    dbs = m_rest.select(F.col("m_db").alias("db")).intersect(s_rest.select(F.col("s_db").alias("db")))
    both = [r["db"] for r in dbs.collect()]
    if not both:
        return None
    by_db = _collected(_segments(matched), both)
    if by_db is None:
        return None
    regions = [
        g
        for db in both
        for g in (regions_between_long_segments(by_db[db]) if db in by_db else [Region(db, -1, None, -1, None)])
    ]
    bounds = _bounds_frame(matched.sparkSession, regions)
    held = [
        rest.join(F.broadcast(bounds), _inside(p, p)).select("_r").distinct()
        for p, rest in (("m_", m_rest), ("s_", s_rest))
    ]
    return [regions[r["_r"]] for r in held[0].intersect(held[1]).collect()]


def _bounds_frame(spark: SparkSession, regions: Sequence[Region]) -> DataFrame:
    return spark.createDataFrame(
        [(i, g.db, g.m_lo, g.m_hi, g.s_lo, g.s_hi) for i, g in enumerate(regions)],
        "_r long, _db long, m_lo long, m_hi long, s_lo long, s_hi long",
    )


def _inside(p: str, bound: str) -> Column:
    """A record of side `p` (or a pair's `{bound}seq`, p="") strictly inside a region's `bound` side."""
    seq = F.col(f"{p or bound}seq")
    return (
        (F.col(f"{p}db" if p else "db") == F.col("_db"))
        & (seq > F.col(f"{bound}lo"))
        & (F.col(f"{bound}hi").isNull() | (seq < F.col(f"{bound}hi")))
    )


def _records_in(side: DataFrame, p: str, bounds: DataFrame) -> dict[int, list[tuple[int, int]]] | None:
    """Per region index (`_bounds_frame`), its records (seq, digest) on side `p`, in order; None past
    MAX_WINDOW_RECORDS."""
    rows = side.join(F.broadcast(bounds), _inside(p, p)).select("_r", f"{p}seq", f"{p}digest")
    if rows.count() > MAX_WINDOW_RECORDS:  # counted first: a long lag tail stays out of the driver
        return None
    got = rows.collect()
    out: dict[int, list[tuple[int, int]]] = {}
    for r in got:
        out.setdefault(r["_r"], []).append((r[f"{p}seq"], r[f"{p}digest"]))
    return {k: sorted(v) for k, v in out.items()}


def _pairs_frame(pairs: list[tuple[int, int, int]], m: DataFrame, s: DataFrame) -> DataFrame:
    """(db, m_seq, s_seq) pairs in the shape of `matched`, their positions from the sides."""
    keys = m.sparkSession.createDataFrame(pairs, "db long, m_seq long, s_seq long")
    ends = {
        p: side.select(F.col(f"{p}db").alias("db"), f"{p}seq", f"{p}epos", f"{p}spos")
        for p, side in (("m_", m), ("s_", s))
    }
    return (
        keys.join(ends["m_"], ["db", "m_seq"])
        .join(ends["s_"], ["db", "s_seq"])
        .select("db", "m_seq", "s_seq", "m_epos", "s_epos", "m_spos", "s_spos", F.lit("order").alias("how"))
    )


def _without_crossings(
    matched: DataFrame, m_rest: DataFrame, s_rest: DataFrame, m: DataFrame, s: DataFrame, stage: Stage
) -> tuple[DataFrame, DataFrame, DataFrame] | None:
    """The pairs of the dropped segments taken out of `matched`, their records put back in the rests."""
    segs = _segments(matched)
    crossing = _crossing_dbs(segs)
    if not crossing:
        return matched, m_rest, s_rest
    by_db = _collected(segs, crossing)
    if by_db is None:
        return None
    dropped = [g for db_segs in by_db.values() for g in dropped_segments(db_segs)]
    cut = matched.sparkSession.createDataFrame(
        [(g.db, g.m_first, g.m_last) for g in dropped], "_db long, _lo long, _hi long"
    )
    in_cut = (F.col("db") == F.col("_db")) & F.col("m_seq").between(F.col("_lo"), F.col("_hi"))
    gone = matched.join(F.broadcast(cut), in_cut, "left_semi")
    freed = {
        p: side.join(gone.select(F.col("db").alias(f"{p}db"), f"{p}seq"), [f"{p}db", f"{p}seq"], "left_semi")
        for p, side in (("m_", m), ("s_", s))
    }
    return (
        stage(matched.join(F.broadcast(cut), in_cut, "left_anti"), "uncrossed"),
        stage(m_rest.unionByName(freed["m_"]), "m_uncrossed_rest"),
        stage(s_rest.unionByName(freed["s_"]), "s_uncrossed_rest"),
    )


def _segments(matched: DataFrame) -> DataFrame:
    """(db, m_first, s_first, n): runs of pairs at consecutive master records and one shift."""
    shift = F.col("s_seq") - F.col("m_seq")
    island = F.col("m_seq") - F.row_number().over(Window.partitionBy("db", "_d").orderBy("m_seq"))
    return (
        matched.select("db", "m_seq", "s_seq", shift.alias("_d"))
        .withColumn("_i", island)
        .groupBy("db", "_d", "_i")
        .agg(F.min("m_seq").alias("m_first"), F.min("s_seq").alias("s_first"), F.count("*").alias("n"))
        .drop("_d", "_i")
    )


def _collected(segs: DataFrame, dbs: list[int]) -> dict[int, list[Segment]] | None:
    """The segments of `dbs`, per db, on the driver; None past MAX_SEGMENTS."""
    rows = segs.where(F.col("db").isin(dbs)).limit(MAX_SEGMENTS + 1).collect()
    if len(rows) > MAX_SEGMENTS:
        return None
    by_db: dict[int, list[Segment]] = {}
    for r in rows:
        by_db.setdefault(r["db"], []).append(Segment(r["db"], r["m_first"], r["s_first"], r["n"]))
    return by_db


def _crossing_dbs(segs: DataFrame) -> list[int]:
    """The dbs where a segment's slave records come before those of a segment earlier on the master."""
    earlier = Window.partitionBy("db").orderBy("m_first").rowsBetween(Window.unboundedPreceding, -1)
    seen = segs.withColumn("_max_s", F.max("s_first").over(earlier))
    return [r["db"] for r in seen.where(F.col("s_first") < F.col("_max_s")).select("db").distinct().collect()]


def around_runs(rest: DataFrame, matched: DataFrame, p: str, q: str) -> DataFrame:
    """Per run of unpaired records on side `p`: (_db, _first, _last, _lo, _hi), where `_lo`/`_hi` are the
    other side's partners of the paired records just before and after it (null where there is none)."""
    seqs = rest.select(F.col(f"{p}db").alias("_db"), F.col(f"{p}seq").alias("_seq"))
    run = F.col("_seq") - F.row_number().over(Window.partitionBy("_db").orderBy("_seq"))
    bounds = F.min("_seq").alias("_first"), F.max("_seq").alias("_last")
    runs = seqs.withColumn("_run", run).groupBy("_db", "_run").agg(*bounds)
    ends = {}
    for name, at in (("_lo", F.col("_first") - 1), ("_hi", F.col("_last") + 1)):
        on = (F.col("db") == F.col("_db")) & (F.col(f"{p}seq") == at)
        ends[name] = matched.join(F.broadcast(runs), on).select("_db", "_run", F.col(f"{q}seq").alias(name))
    return runs.join(ends["_lo"], ["_db", "_run"], "left").join(ends["_hi"], ["_db", "_run"], "left").drop("_run")


def _pair_in_windows(matched: DataFrame, m_rest: DataFrame, s_rest: DataFrame) -> DataFrame | None:
    """Pairs, in the shape of `matched`, of a longest common subsequence of the records left on both sides
    between the same two pairs (a window: a run of unpaired master records, and the slave records between
    the partners of the pairs around it). A window with records on one side only is a gap or a replay."""
    runs = around_runs(m_rest, matched, "m_", "s_").withColumn("_w", F.struct("_db", "_first"))
    inside = (
        (F.col("s_db") == F.col("_db"))
        & (F.col("_lo").isNull() | (F.col("s_seq") > F.col("_lo")))
        & (F.col("_hi").isNull() | (F.col("s_seq") < F.col("_hi")))
    )
    s_rows = s_rest.join(F.broadcast(runs), inside).select("_w", "s_seq", "s_digest")
    s_got = s_rows.limit(MAX_WINDOW_RECORDS + 1).collect()
    if not s_got or len(s_got) > MAX_WINDOW_RECORDS:
        return None
    keys = m_rest.sparkSession.createDataFrame(sorted({tuple(r["_w"]) for r in s_got}), "_db long, _first long")
    wanted = runs.join(F.broadcast(keys), ["_db", "_first"], "left_semi")
    in_run = (F.col("m_db") == F.col("_db")) & F.col("m_seq").between(F.col("_first"), F.col("_last"))
    m_rows = m_rest.join(F.broadcast(wanted), in_run).select("_w", "m_seq", "m_digest")
    if m_rows.count() > MAX_WINDOW_RECORDS:  # counted first, as in _records_in
        return None
    m_got = m_rows.collect()
    sides: dict[tuple[int, int], tuple[list[tuple[int, int]], list[tuple[int, int]]]] = {}
    for r in m_got:
        sides.setdefault(tuple(r["_w"]), ([], []))[0].append((r["m_seq"], r["m_digest"]))
    for r in s_got:
        if tuple(r["_w"]) in sides:
            sides[tuple(r["_w"])][1].append((r["s_seq"], r["s_digest"]))
    pairs = []
    for w, (ms, ss) in sides.items():
        ms.sort()
        ss.sort()
        pairs += [(w[0], ms[i][0], ss[j][0]) for i, j in lcs_pairs([d for _, d in ms], [d for _, d in ss])]
    if not pairs:
        return None
    return _pairs_frame(pairs, m_rest, s_rest)
