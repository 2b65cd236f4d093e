"""The alignment of a Pika master's binlog records with its slave's, per database (docs/formats/pika-binlog.md,
"What the comparison reports"): which slave record holds each master record, and what is left on each
side. audit/sources/pika/binlog_diff.py numbers the records and turns what is left into findings.

The passes, each over what the previous one left unmatched:

1. by position and content: (db, end position, digest of the record and of the one before, unless
   either is its log's first record) equal: healthy;
2. by content alone, the k-th unmatched occurrence of a content key on one side with the k-th on the
   other (within the stretch after the same pair by content, when the key repeats), the key being the
   record with both neighbours, then with one; then the record alone, at a shift the matched records
   near it show: the same record at another position, i.e. the slave's offsets are shifted by a gap or
   a replay;
3. then, where pairs off their position cross, order over the whole db (audit/sources/pika/binlog_order.py);
4. by position alone: same place, different content (`divergent_entry`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from audit.diff.materialize import Stage
from audit.sources.pika.binlog_order import around_runs, keep_order


@dataclass(frozen=True)
class Alignment:
    matched: DataFrame  # db, m_seq, s_seq, m_epos, s_epos, how
    m_rest: DataFrame  # master records matched by nothing
    s_rest: DataFrame  # slave records matched by nothing
    divergent: DataFrame  # db, m_*, s_* at the same position with different content

    @property
    def horizon(self) -> DataFrame:
        """Per db, the last master record the slave holds: master records after it are lag, not loss."""
        return horizon_of(self.matched)


def horizon_of(matched: DataFrame) -> DataFrame:
    """(db, horizon): per db, the last master record paired with a slave record."""
    return matched.groupBy("db").agg(F.max("m_seq").alias("horizon"))


def _side(df: DataFrame, p: str) -> DataFrame:
    """Every column prefixed by side, `db` too: the two sides share lineage, so bare names would be ambiguous."""
    cols = ["db", "seq", "spos", "epos", "digest", "exec_time", "command", "key", "filenum", "start", "end"]
    # A log's last record has no "both neighbours" (null, never equal in a join): a slave behind has just
    # not written its next record yet, so it pairs by its left neighbour before it pairs, by its right one,
    # as last with the master's last record (right after a gap, the slave's last record is the master's).
    right = F.col("next_digest").isNotNull()
    ctx = {
        "ctx3": F.when(right, F.xxhash64(F.col("prev_digest"), F.col("digest"), F.col("next_digest"))),
        "ctxl": F.xxhash64(F.col("prev_digest"), F.col("digest")),
        "ctxr": F.xxhash64(F.col("digest"), F.col("next_digest")),
    }
    first = F.col("prev_digest").isNull().alias(p + "first")  # nothing before it in its log
    return df.select(*[F.col(c).alias(p + c) for c in cols], *[e.alias(p + n) for n, e in ctx.items()], first)


def _paired(joined: DataFrame, how: str, *extra: Column) -> DataFrame:
    return joined.select(
        F.col("m_db").alias("db"),
        *["m_seq", "s_seq", "m_epos", "s_epos", "m_spos", "s_spos"],
        F.lit(how).alias("how"),
        *extra,
    )


SHIFT_BUCKET = 4096
"""Records per bucket of the master's sequence: a record that matched by nothing but its own content pairs
only at a shift (slave seq - master seq) that matched records in its bucket or the two next to it show."""


def _near_shifts(matched: DataFrame) -> DataFrame:
    """(_db, _b, _d): the shifts matched records show around each bucket of master sequence numbers."""
    bucket = F.floor(F.col("m_seq") / SHIFT_BUCKET)
    seen = matched.select(F.col("db").alias("_db"), bucket.alias("b"), (F.col("s_seq") - F.col("m_seq")).alias("_d"))
    near = F.explode(F.array(F.col("b") - 1, F.col("b"), F.col("b") + 1)).alias("_b")
    return seen.distinct().select("_db", near, "_d").distinct()


def _pairs_at_known_shifts(m: DataFrame, s: DataFrame, matched: DataFrame) -> DataFrame:
    """The last content pass: a record alone (no neighbour in common) pairs with the slave record of the same
    content exactly one nearby shift away. Pairing the k-th occurrence anywhere in the db, as the passes
    with context do, paired a record lost in a gap with a copy replayed thousands of records later: each
    pair hid one lost and one replayed record, and cut both findings into pieces. Each record keeps one
    partner: the smallest shift first."""
    near = _near_shifts(matched)
    at = m.join(near, (F.col("m_db") == F.col("_db")) & (F.floor(F.col("m_seq") / SHIFT_BUCKET) == F.col("_b")))
    cond = (
        (F.col("m_db") == F.col("s_db"))
        & (F.col("m_seq") + F.col("_d") == F.col("s_seq"))
        & (F.col("m_digest") == F.col("s_digest"))
    )
    candidates = at.join(s, cond)
    first = {
        p: Window.partitionBy(f"{p}db", f"{p}seq").orderBy(F.abs(F.col("_d")), f"{q}seq")
        for p, q in (("m_", "s_"), ("s_", "m_"))
    }
    one_each = (
        candidates.withColumn("_m1", F.row_number().over(first["m_"]))
        .where(F.col("_m1") == 1)
        .withColumn("_s1", F.row_number().over(first["s_"]))
        .where(F.col("_s1") == 1)
    )
    return _in_order(_paired(one_each, "content"), m, s, matched)


def _in_order(pairs: DataFrame, m: DataFrame, s: DataFrame, matched: DataFrame) -> DataFrame:
    """The pairs that keep the order of the records paired around them: a record lies in a run of unpaired
    records on its side, and its partner must lie between the partners of the paired records just before
    and just after that run. A record lost in a gap and an identical copy replayed just after the gap are
    one shift apart that the records before the gap show; paired, they crossed the records paired in
    between and hid one lost and one replayed record."""
    for p, q, rest in (("m_", "s_", m), ("s_", "m_", s)):
        around = around_runs(rest, matched, p, q)
        inside = (F.col("db") == F.col("_db")) & F.col(f"{p}seq").between(F.col("_first"), F.col("_last"))
        keeps = (F.col("_lo").isNull() | (F.col(f"{q}seq") > F.col("_lo"))) & (
            F.col("_hi").isNull() | (F.col(f"{q}seq") < F.col("_hi"))
        )
        pairs = pairs.join(F.broadcast(around), inside).where(keeps).drop(*around.columns)
    return pairs


def _by_context(m: DataFrame, s: DataFrame, ctx: str, earlier: list[DataFrame], stage: Stage, name: str) -> DataFrame:
    """A content pass: the k-th record of a context key on one side pairs with the k-th on the other. A key
    found once on each side pairs as it is. A key found more than once on either side (a loop of INCR x
    with its own neighbours) pairs only within a stretch: after the same pair by content on both sides.
    Counted over the whole db, the copies a gap left in one loop shifted every later pairing of that key:
    the gap split in two, part of it placed in another loop the slave held whole."""
    found = stage(_kth_pairs(m, s, ctx, None), name)
    repeated = found.where(~F.col("_once"))
    if repeated.isEmpty():
        return found.drop("_once", "_key")
    once = found.where(F.col("_once"))
    anchors = _union([part.select("db", "m_seq", "s_seq") for part in [*earlier, once]])
    keys = repeated.select(F.col("db").alias("_kdb"), "_key").distinct()
    m_rep, s_rep = (_stretch(_of_keys(df, keys, p, ctx), anchors, p) for df, p in ((m, "m_"), (s, "s_")))
    again = _kth_pairs(m_rep, s_rep, ctx, "stretch")
    return stage(once.unionByName(again).drop("_once", "_key"), f"{name}_stretch")


def _kth_pairs(m: DataFrame, s: DataFrame, ctx: str, within: str | None) -> DataFrame:
    """Pairs of the k-th record of each context key (and `within` column) on each side, by sequence, with
    `_once`: the key is found once on each side; `_key`: the key."""
    ranked = {}
    for p, df in (("m_", m), ("s_", s)):
        w = Window.partitionBy(f"{p}db", f"{p}{ctx}", *([f"{p}{within}"] if within else []))
        ranked[p] = df.withColumn(f"{p}occ", F.row_number().over(w.orderBy(f"{p}seq"))).withColumn(
            f"{p}n", F.count("*").over(w)
        )
    on = [(f"m_{ctx}", f"s_{ctx}"), ("m_occ", "s_occ"), *([(f"m_{within}", f"s_{within}")] if within else [])]
    cond = [F.col("m_db") == F.col("s_db")] + [F.col(a) == F.col(b) for a, b in on]
    joined = ranked["m_"].join(ranked["s_"], cond)
    once = ((F.col("m_n") == 1) & (F.col("s_n") == 1)).alias("_once")
    return _paired(joined, "content", once, F.col(f"m_{ctx}").alias("_key"))


def _of_keys(df: DataFrame, keys: DataFrame, p: str, ctx: str) -> DataFrame:
    return df.join(keys, (F.col(f"{p}db") == F.col("_kdb")) & (F.col(f"{p}{ctx}") == F.col("_key")), "left_semi")


def _stretch(rows: DataFrame, anchors: DataFrame, p: str) -> DataFrame:
    """`{p}stretch`: the master seq of the last pair by content before each record on its side, -1 before
    the first. Both sides' records after the same pair get the same stretch. Pairs by position do not cut
    stretches: inside a loop, position pairs identical records a few copies apart, by chance."""
    marks = anchors.select(F.col("db").alias(f"{p}db"), F.col(f"{p}seq"), F.col("m_seq").alias(f"{p}stretch"))
    both = rows.withColumn(f"{p}stretch", F.lit(None).cast("long")).unionByName(marks, allowMissingColumns=True)
    before = Window.partitionBy(f"{p}db").orderBy(f"{p}seq").rowsBetween(Window.unboundedPreceding, 0)
    last = F.coalesce(F.last(f"{p}stretch", ignorenulls=True).over(before), F.lit(-1))
    return (
        both.withColumn("_mark", F.col(f"{p}stretch").isNotNull())
        .withColumn(f"{p}stretch", last)
        .where(~F.col("_mark"))
        .drop("_mark")
    )


def _anti(df: DataFrame, matched: DataFrame, p: str) -> DataFrame:
    return df.join(matched.select(F.col("db").alias(f"{p}db"), f"{p}seq"), [f"{p}db", f"{p}seq"], "left_anti")


def no_stage(df: DataFrame, name: str) -> DataFrame:
    """Identity, fine for small data. Without staging (audit/diff/materialize.py) every action would
    recompute the whole alignment from the raw scans."""
    return df


def _by_position(m: DataFrame, s: DataFrame, stage: Stage) -> tuple[DataFrame, DataFrame, DataFrame]:
    """The first pass: same place, same content, same content before it (repetitive logs, a gap of whole
    INCR/SET cycles, put identical records at identical offsets by chance, and only the neighbour tells
    them apart). A log's first record has no neighbour before it to compare: a slave's first record since
    its full sync pairs by content alone; with no record after it either, no later pass paired it, and
    the record was a `divergent_entry` against the same record. One full outer join, staged once, gives the pairs
    and both sides' rests: a position is unique on its side, so the pairing is one to one."""
    first = (F.col("m_first") | F.col("s_first")) & (F.col("m_digest") == F.col("s_digest"))
    same = (F.col("m_ctxl") == F.col("s_ctxl")) | first
    on = (F.col("m_db") == F.col("s_db")) & (F.col("m_epos") == F.col("s_epos")) & same
    outer = stage(m.join(s, on, "full_outer"), "by_position")
    paired = _paired(outer.where(F.col("m_seq").isNotNull() & F.col("s_seq").isNotNull()), "position")
    m_rest = outer.where(F.col("s_seq").isNull()).select(*m.columns)
    s_rest = outer.where(F.col("m_seq").isNull()).select(*s.columns)
    return paired, m_rest, s_rest


def align(m_good: DataFrame, s_good: DataFrame, stage: Stage = no_stage) -> Alignment:
    m, s = _side(m_good, "m_"), _side(s_good, "s_")
    exact, m1, s1 = _by_position(m, s, stage)
    both_left = not (s1.isEmpty() or m1.isEmpty())  # the common case: a healthy pair is aligned by position
    # Content passes, most specific first: a record with its two neighbours, with its left one, with its
    # right one, alone. Repeated commands (INCR x) only pair up once their context has; records at the edge
    # of a gap or a replay keep one neighbour and match in the one-sided passes.
    shifted_parts: list[DataFrame] = []
    for n, ctx in enumerate(("ctx3", "ctxl", "ctxr", "digest")):
        if not both_left:
            break
        if ctx == "digest":
            matched_so_far = exact.unionByName(_union(shifted_parts)) if shifted_parts else exact
            found = stage(_pairs_at_known_shifts(m1, s1, matched_so_far), f"shifted{n}")
        else:
            found = _by_context(m1, s1, ctx, shifted_parts, stage, f"shifted{n}")
        shifted_parts.append(found)
        m1, s1 = stage(_anti(m1, found, "m_"), f"m_rest{n + 2}"), stage(_anti(s1, found, "s_"), f"s_rest{n + 2}")
        both_left = not (s1.isEmpty() or m1.isEmpty())
    matched = exact.unionByName(_union(shifted_parts)) if shifted_parts else exact
    if shifted_parts:  # pairs off their position: they may cross
        matched, m1, s1 = keep_order(matched, m1, s1, m, s, stage)
        both_left = not (s1.isEmpty() or m1.isEmpty())
    m2, s2 = m1, s1
    at_same_place = m2.join(s2, (F.col("m_db") == F.col("s_db")) & (F.col("m_epos") == F.col("s_epos")))
    if not both_left:  # one side fully matched: nothing diverges in place, and the rests stand as they are
        return Alignment(
            matched=matched,
            m_rest=m2.withColumnRenamed("m_db", "db"),
            s_rest=s2.withColumnRenamed("s_db", "db"),
            divergent=at_same_place.limit(0).withColumnRenamed("m_db", "db").drop("s_db"),
        )
    divergent = stage(_not_past_the_slave(at_same_place, matched, m), "divergent")
    div_keys = divergent.select(F.col("m_db").alias("db"), "m_seq", "s_seq")
    return Alignment(
        matched=matched,
        m_rest=stage(_anti(m2, div_keys, "m_").withColumnRenamed("m_db", "db"), "m_rest"),
        s_rest=stage(_anti(s2, div_keys, "s_").withColumnRenamed("s_db", "db"), "s_rest"),
        divergent=divergent.withColumnRenamed("m_db", "db").drop("s_db"),
    )


def _not_past_the_slave(at_same_place: DataFrame, matched: DataFrame, m: DataFrame) -> DataFrame:
    """Same place, other content, less the pairs of a master record past the last one the slave holds with
    a slave record that is a copy of some master record: a batch replayed near a lagging slave's end puts
    its copies at the places of records it has not reached, which are lag, and the copies duplicates."""
    horizon = horizon_of(matched).select(F.col("db").alias("_hdb"), F.col("horizon").alias("_h"))
    copies = m.select(F.col("m_db").alias("_cdb"), F.col("m_digest").alias("_cd"))
    is_copy = (F.col("s_db") == F.col("_cdb")) & (F.col("s_digest") == F.col("_cd"))
    past = at_same_place.join(F.broadcast(horizon), F.col("m_db") == F.col("_hdb")).where(F.col("m_seq") > F.col("_h"))
    lag_beside_copy = past.join(copies, is_copy, "left_semi").select("m_db", "m_seq")
    return at_same_place.join(lag_beside_copy, ["m_db", "m_seq"], "left_anti")


def _union(parts: list[DataFrame]) -> DataFrame:
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part)
    return out
