"""Spark diff of a Pika master's and slave's binlogs, per database (docs/formats/pika-binlog.md).

In a healthy pair the slave appends each master record at the same (filenum, end offset), with the same
content (bytes 34.. of the item). So records are aligned in three passes, each over what the previous
one left unmatched:

1. by position and content: (db, end position, digest of the record and of the one before) equal: healthy;
2. by content alone, the k-th unmatched occurrence of a content key on one side with the k-th on the
   other, the key being the record with both neighbours, then with one; then the record alone, at a
   shift the matched records near it show: the same record at another position, i.e. the slave's
   offsets are shifted by a gap or a replay;
3. by position alone: same place, different content (`divergent_entry`).

What remains on the master is missing on the slave (`missing_range`), unless it lies after the last
master record the slave holds: that is replication lag, not loss. What remains on the slave is a
replay (`duplicate_range`) when the master holds that content, else content the master never wrote.
Contiguous runs (by record sequence number, across file boundaries) become one finding each.

Positions are numbers `filenum << 32 | offset` (the findings' start_num/end_num for Pika).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from audit.diff.findings import to_findings
from audit.diff.materialize import Stage

_KEYS = ["db", "seq"]


def _pos(filenum: str, offset: str) -> Column:
    return F.shiftleft(F.col(filenum).cast("long"), 32) + F.col(offset)


def _where(filenum: str, offset: str) -> Column:
    return F.concat_ws(":", F.col(filenum).cast("string"), F.col(offset).cast("string"))


def good_records(records: DataFrame) -> DataFrame:
    """Real log records (no padding, no damage rows) with their position numbers."""
    return (
        records.where((F.col("row_kind") == "record") & (F.col("command") != "padding"))
        .withColumn("spos", _pos("filenum", "start"))
        .withColumn("epos", _pos("filenum", "end"))
    )


def live_slave_files(records: DataFrame) -> DataFrame:
    """Drop a slave's files older than its last full sync: they belong to a previous replication life.

    After a full sync the slave recreates write2file<N> padded up to the sync point; files below N that
    survive (only file 0 is deleted) hold another incarnation's records (docs/formats/pika-binlog.md).
    """
    pad = records.where(F.col("row_kind") == "padding").groupBy("db").agg(F.max("filenum").alias("pad_file"))
    return (
        records.join(F.broadcast(pad), "db", "left")
        .where(F.col("pad_file").isNull() | (F.col("filenum") >= F.col("pad_file")))
        .drop("pad_file")
    )


def with_seq(good: DataFrame) -> DataFrame:
    """A sequence number per db, contiguous across files (the file's base, the records before it, plus the
    record's index in its file), and `prev_digest`/`next_digest`, the content around each record.

    Neighbours come from a window within each file (one file's records in one task, never a whole db's
    log) and, at a file's edges, from the files before and after it: one small row per file carries its
    record count and its first and last content."""
    per_file = good.groupBy("db", "filenum").agg(
        F.count("*").alias("n"),
        F.min_by("digest", "idx").alias("first_digest"),
        F.max_by("digest", "idx").alias("last_digest"),
    )
    files = Window.partitionBy("db").orderBy("filenum")
    before = files.rowsBetween(Window.unboundedPreceding, -1)
    edges = per_file.select(
        "db",
        "filenum",
        F.coalesce(F.sum("n").over(before), F.lit(0)).alias("_base"),
        F.lag("last_digest").over(files).alias("_prev_file_last"),
        F.lead("first_digest").over(files).alias("_next_file_first"),
    )
    in_file = Window.partitionBy("db", "filenum").orderBy("idx")
    return (
        good.join(F.broadcast(edges), ["db", "filenum"])
        .withColumn("seq", F.col("_base") + F.col("idx"))
        .withColumn("prev_digest", F.coalesce(F.lag("digest").over(in_file), F.col("_prev_file_last")))
        .withColumn("next_digest", F.coalesce(F.lead("digest").over(in_file), F.col("_next_file_first")))
        .drop("_base", "_prev_file_last", "_next_file_first")
    )


def common_window(m: DataFrame, s: DataFrame) -> tuple[DataFrame, DataFrame]:
    """Both sides from max(first master record, first slave record) on: earlier records are not comparable.

    The master may have purged old files; the slave's history starts at its full sync.
    """
    lo = (
        m.groupBy("db")
        .agg(F.min("spos").alias("m_lo"))
        .join(s.groupBy("db").agg(F.min("spos").alias("s_lo")), "db")
        .select("db", F.greatest("m_lo", "s_lo").alias("lo"))
    )
    lo = F.broadcast(lo)
    return (
        m.join(lo, "db").where(F.col("spos") >= F.col("lo")).drop("lo"),
        s.join(lo, "db").where(F.col("spos") >= F.col("lo")).drop("lo"),
    )


@dataclass(frozen=True)
class Alignment:
    matched: DataFrame  # db, m_seq, s_seq, m_epos, s_epos, how
    m_rest: DataFrame  # master records matched by nothing
    s_rest: DataFrame  # slave records matched by nothing
    divergent: DataFrame  # db, m_*, s_* at the same position with different content

    @property
    def horizon(self) -> DataFrame:
        """Per db, the last master record the slave holds: master records after it are lag, not loss."""
        return self.matched.groupBy("db").agg(F.max("m_seq").alias("horizon"))


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
    return df.select(*[F.col(c).alias(p + c) for c in cols], *[e.alias(p + n) for n, e in ctx.items()])


def _pairs(m: DataFrame, s: DataFrame, on: list[tuple[str, str]], how: str) -> DataFrame:
    cond = [F.col("m_db") == F.col("s_db")] + [F.col(a) == F.col(b) for a, b in on]
    return _paired(m.join(s, cond), how)


def _paired(joined: DataFrame, how: str) -> DataFrame:
    return joined.select(
        F.col("m_db").alias("db"), "m_seq", "s_seq", "m_epos", "s_epos", "m_spos", "s_spos", F.lit(how).alias("how")
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
    return _paired(one_each, "content")


def _anti(df: DataFrame, matched: DataFrame, p: str) -> DataFrame:
    return df.join(matched.select(F.col("db").alias(f"{p}db"), f"{p}seq"), [f"{p}db", f"{p}seq"], "left_anti")


def _no_stage(df: DataFrame, name: str) -> DataFrame:
    """Identity, fine for small data. Without staging (audit/diff/materialize.py) every action would
    recompute the whole alignment from the raw scans."""
    return df


def _by_position(m: DataFrame, s: DataFrame, stage: Stage) -> tuple[DataFrame, DataFrame, DataFrame]:
    """The first pass: same place, same content, same content before it (repetitive logs, a gap of whole
    INCR/SET cycles, put identical records at identical offsets by chance, and only the neighbour tells
    them apart). One full outer join, staged once, gives the pairs and both sides' rests: a position is
    unique on its side, so the pairing is one to one."""
    on = (F.col("m_db") == F.col("s_db")) & (F.col("m_epos") == F.col("s_epos")) & (F.col("m_ctxl") == F.col("s_ctxl"))
    outer = stage(m.join(s, on, "full_outer"), "by_position")
    paired = _paired(outer.where(F.col("m_seq").isNotNull() & F.col("s_seq").isNotNull()), "position")
    m_rest = outer.where(F.col("s_seq").isNull()).select(*m.columns)
    s_rest = outer.where(F.col("m_seq").isNull()).select(*s.columns)
    return paired, m_rest, s_rest


def align(m_good: DataFrame, s_good: DataFrame, stage: Stage = _no_stage) -> Alignment:
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
            occ = {p: Window.partitionBy(f"{p}db", f"{p}{ctx}").orderBy(f"{p}seq") for p in ("m_", "s_")}
            m1o = m1.withColumn("m_occ", F.row_number().over(occ["m_"]))
            s1o = s1.withColumn("s_occ", F.row_number().over(occ["s_"]))
            on = [(f"m_{ctx}", f"s_{ctx}"), ("m_occ", "s_occ")]
            found = stage(_pairs(m1o, s1o, on, "content"), f"shifted{n}")
        shifted_parts.append(found)
        m1, s1 = stage(_anti(m1, found, "m_"), f"m_rest{n + 2}"), stage(_anti(s1, found, "s_"), f"s_rest{n + 2}")
        both_left = not (s1.isEmpty() or m1.isEmpty())
    shifted = _union(shifted_parts) if shifted_parts else exact.limit(0)
    m2, s2 = m1, s1
    at_same_place = m2.join(s2, (F.col("m_db") == F.col("s_db")) & (F.col("m_epos") == F.col("s_epos")))
    if not both_left:  # one side fully matched: nothing diverges in place, and the rests stand as they are
        return Alignment(
            matched=exact.unionByName(shifted),
            m_rest=m2.withColumnRenamed("m_db", "db"),
            s_rest=s2.withColumnRenamed("s_db", "db"),
            divergent=at_same_place.limit(0).withColumnRenamed("m_db", "db").drop("s_db"),
        )
    divergent = stage(at_same_place, "divergent")
    div_keys = divergent.select(F.col("m_db").alias("db"), "m_seq", "s_seq")
    return Alignment(
        matched=exact.unionByName(shifted),
        m_rest=stage(_anti(m2, div_keys, "m_").withColumnRenamed("m_db", "db"), "m_rest"),
        s_rest=stage(_anti(s2, div_keys, "s_").withColumnRenamed("s_db", "db"), "s_rest"),
        divergent=divergent.withColumnRenamed("m_db", "db").drop("s_db"),
    )


def _union(parts: list[DataFrame]) -> DataFrame:
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part)
    return out


def islands(df: DataFrame, p: str) -> DataFrame:
    """Contiguous runs of `{p}seq` per db -> one row per run, with an order-sensitive content hash."""
    w = Window.partitionBy("db").orderBy(f"{p}seq")
    grouped = df.withColumn("run", F.col(f"{p}seq") - F.row_number().over(w))
    first = F.min_by
    return (
        grouped.groupBy("db", "run")
        .agg(
            F.min(f"{p}seq").alias("first_seq"),
            F.max(f"{p}seq").alias("last_seq"),
            F.min(f"{p}spos").alias("spos"),
            F.max(f"{p}epos").alias("epos"),
            first(f"{p}filenum", f"{p}seq").alias("first_file"),
            first(f"{p}start", f"{p}seq").alias("first_start"),
            F.max_by(f"{p}filenum", f"{p}seq").alias("last_file"),
            F.max_by(f"{p}end", f"{p}seq").alias("last_end"),
            F.count("*").alias("count"),
            F.sum(F.col(f"{p}end") - F.col(f"{p}start")).alias("bytes"),
            first(f"{p}key", f"{p}seq").alias("first_key"),
            first(f"{p}command", f"{p}seq").alias("first_command"),
            F.bit_xor(F.xxhash64(f"{p}digest", F.col(f"{p}seq"))).alias("content_hash_abs"),
        )
        .drop("run")
    )


@dataclass(frozen=True)
class FileBases:
    """Per side, where each binlog file starts in bytes of that side's log: the sum of the lengths of
    the files before it (from the first file both sides hold). Rolled files are trimmed to their log
    when Pika closes them, so their sizes are exact, and so are distances across files; Pika's own
    `filenum x binlog-file-size + offset` is off by what each file ran past the size."""

    master: dict[int, int]  # (db << 32 | filenum) -> bytes before the file
    replica: dict[int, int]

    @staticmethod
    def key(db: int, filenum: int) -> int:
        return db << 32 | filenum


def _byte_position(epos: Column, bases: dict[int, int]) -> Column:
    low = F.lit(0xFFFFFFFF)
    key = F.shiftleft(F.col("db").cast("long"), 32).bitwiseOR(F.shiftright(epos, 32))
    table = F.create_map(*[F.lit(x) for kv in sorted(bases.items()) for x in kv]) if bases else None
    base = table[key] if table is not None else F.lit(None).cast("long")
    return base + epos.bitwiseAND(low)


def _distance(a: Column, b: Column, bases: FileBases) -> Column:
    """Bytes from the slave's position b to the master's position a of the same record (db in scope)."""
    return _byte_position(a, bases.master) - _byte_position(b, bases.replica)


def _shift_at(runs: DataFrame, matched: DataFrame, p: str, seq_expr: Column, name: str, bases: FileBases) -> DataFrame:
    """Join each run with the matched record at `seq_expr`: how far behind the slave's offsets are there."""
    look = matched.select(
        F.col("db").alias("_db"),
        F.col(f"{p}seq").alias("_seq"),
        _distance(F.col("m_epos"), F.col("s_epos"), bases).alias(name),
    )
    return runs.join(look, (F.col("db") == F.col("_db")) & (seq_expr == F.col("_seq")), "left").drop("_db", "_seq")


def missing_runs(al: Alignment, bases: FileBases) -> DataFrame:
    """Master runs absent on the slave, before the last master record the slave holds."""
    missing = al.m_rest.join(F.broadcast(al.horizon), "db").where(F.col("m_seq") < F.col("horizon"))
    runs = islands(missing, "m_")
    runs = _shift_at(runs, al.matched, "m_", F.col("last_seq") + 1, "behind_after", bases)
    return _shift_at(runs, al.matched, "m_", F.col("first_seq") - 1, "behind_before", bases)


def unreplicated(al: Alignment) -> DataFrame:
    """Master records after the slave's last one, per db: lag, counted in records and bytes."""
    return (
        al.m_rest.join(F.broadcast(al.horizon), "db", "left")
        .where(F.col("horizon").isNull() | (F.col("m_seq") > F.col("horizon")))
        .groupBy("db")
        .agg(F.count("*").alias("records"), F.sum(F.col("m_end") - F.col("m_start")).alias("bytes"))
    )


def replay_runs(al: Alignment, m_good: DataFrame, s_good: DataFrame, bases: FileBases) -> DataFrame:
    """Slave runs whose content the master holds: replays. Evidence: is the run a copy of what precedes it,
    the slave's write-time pauses around it, and how far ahead the slave's offsets are after it."""
    on_master = m_good.select("db", F.col("digest").alias("s_digest")).distinct()
    dup = al.s_rest.join(on_master, ["db", "s_digest"], "left_semi")
    runs = islands(dup, "s_")
    n = F.col("count")
    # order-sensitive hashes, relative to the run's first record, of the run and of the n records before it
    rel = s_good.select("db", "seq", "digest", "exec_time")
    body = (
        runs.alias("r")
        .join(
            rel.alias("x"),
            (F.col("r.db") == F.col("x.db")) & F.col("x.seq").between(F.col("r.first_seq") - n, F.col("r.last_seq")),
        )
        .groupBy("r.db", "r.first_seq")
        .agg(
            F.bit_xor(
                F.when(
                    F.col("x.seq") >= F.col("r.first_seq"),
                    F.xxhash64("x.digest", F.col("x.seq") - F.col("r.first_seq")),
                )
            ).alias("h_run"),
            F.bit_xor(
                F.when(
                    F.col("x.seq") < F.col("r.first_seq"),
                    F.xxhash64("x.digest", F.col("x.seq") - F.col("r.first_seq") + n),
                )
            ).alias("h_before"),
            F.max(F.when(F.col("x.seq") == F.col("r.first_seq"), F.col("x.exec_time"))).alias("t_first"),
            F.max(F.when(F.col("x.seq") == F.col("r.first_seq") - 1, F.col("x.exec_time"))).alias("t_prev"),
            F.max(F.when(F.col("x.seq") == F.col("r.first_seq") - n, F.col("x.exec_time"))).alias("t_copy"),
            F.count(F.when(F.col("x.seq") < F.col("r.first_seq"), 1)).alias("n_before"),
        )
        .withColumnRenamed("db", "_db")
        .withColumnRenamed("first_seq", "_first")
    )
    before_copy = rel.select(F.col("db").alias("_db2"), F.col("seq").alias("_seq2"), F.col("exec_time").alias("t_pre"))
    runs = runs.join(body, (F.col("db") == F.col("_db")) & (F.col("first_seq") == F.col("_first")), "left").drop(
        "_db", "_first"
    )
    runs = runs.join(
        before_copy,
        (F.col("db") == F.col("_db2")) & (F.col("first_seq") - F.col("count") - 1 == F.col("_seq2")),
        "left",
    ).drop("_db2", "_seq2")
    return _shift_at(runs, al.matched, "s_", F.col("last_seq") + 1, "behind_after", bases)


def _finding(
    df: DataFrame,
    category: str,
    detail: Column,
    *,
    master_digest: Column | None = None,
    replica_digest: Column | None = None,
    key: Column | None = None,
) -> DataFrame:
    """Coalesced run rows (first/last file and offset, spos/epos, count, bytes) as binlog findings."""
    return to_findings(
        df,
        check="binlog",
        category=category,
        key=key if key is not None else F.lit(None),
        start=_where("first_file", "first_start"),
        end=_where("last_file", "last_end"),
        start_num=F.col("spos"),
        end_num=F.col("epos"),
        master_digest=master_digest if master_digest is not None else F.lit(None),
        replica_digest=replica_digest if replica_digest is not None else F.lit(None),
        detail=F.to_json(detail),
    )


def _hex(c: Column) -> Column:
    return F.lower(F.hex(c))


@dataclass(frozen=True)
class BinlogDiff:
    findings: DataFrame  # the findings schema's columns; `detail` holds what the signature catalog matches
    matched: DataFrame  # db, m_seq, s_seq, m_epos, s_epos, how (position | content)
    lag: DataFrame  # db, records, bytes: master records after the slave's last one


def binlog_findings(
    m_records: DataFrame,
    s_records: DataFrame,
    binlog_dbs: int,
    bases: FileBases,
    stage: Stage = _no_stage,
) -> BinlogDiff:
    """Align both logs and turn what is left into coalesced findings. Detectors whose input is empty
    (the common case: a healthy pair) are skipped without running a job."""
    m_good = stage(with_seq(good_records(m_records)), "m_good")
    s_good = stage(with_seq(good_records(live_slave_files(s_records))), "s_good")
    m_win, s_win = common_window(m_good, s_good)
    al = align(m_win, s_win, stage)
    parts: list[DataFrame] = []
    if not al.m_rest.isEmpty():
        parts.append(_gap_findings(al, binlog_dbs, bases))
    if not al.s_rest.isEmpty():
        parts += _slave_only_findings(al, m_good, s_good, binlog_dbs, bases)
    if not al.divergent.isEmpty():
        parts.append(_divergent_findings(al))
    findings = parts[0] if parts else _empty_findings(m_good)
    for more in parts[1:]:
        findings = findings.unionByName(more)
    return BinlogDiff(findings, al.matched, unreplicated(al))


def _empty_findings(any_df: DataFrame) -> DataFrame:
    return to_findings(any_df.limit(0), check="binlog", category="missing_range")


def _gap_findings(al: Alignment, binlog_dbs: int, bases: FileBases) -> DataFrame:
    missing = missing_runs(al, bases)
    gap = _finding(
        missing,
        "missing_range",
        F.struct(
            F.lit("master").alias("coordinates"),
            F.col("first_command").alias("first_command"),
            F.col("behind_after").alias("slave_behind_bytes"),
            F.coalesce(F.col("behind_before"), F.lit(0)).alias("slave_behind_bytes_before"),
            F.col("behind_after").isNotNull().alias("records_after_present"),
            F.lit(binlog_dbs).alias("binlog_dbs"),
        ),
        master_digest=_hex(F.col("content_hash_abs")),
        key=F.when(F.col("count") == 1, F.col("first_key")),
    )
    return gap


def _slave_only_findings(
    al: Alignment, m_good: DataFrame, s_good: DataFrame, binlog_dbs: int, bases: FileBases
) -> list[DataFrame]:
    replays = replay_runs(al, m_good, s_good, bases)
    ahead = -F.col("behind_after")
    dup = _finding(
        replays,
        "duplicate_range",
        F.struct(
            F.lit("slave").alias("coordinates"),
            F.col("first_command").alias("first_command"),
            ((F.col("h_run") == F.col("h_before")) & (F.col("n_before") == F.col("count"))).alias("adjacent_copy"),
            (F.col("t_first") - F.col("t_prev")).alias("pause_between_copies_s"),
            (F.col("t_copy") - F.col("t_pre")).alias("pause_before_copy_s"),
            ahead.alias("slave_ahead_bytes"),
            (ahead == F.col("bytes")).alias("slave_ahead_matches_span"),
            F.lit(binlog_dbs).alias("binlog_dbs"),
        ),
        replica_digest=_hex(F.col("h_run")),
        key=F.when(F.col("count") == 1, F.col("first_key")),
    )
    foreign = al.s_rest.join(
        m_good.select("db", F.col("digest").alias("s_digest")).distinct(), ["db", "s_digest"], "left_anti"
    )
    foreign_runs = islands(foreign, "s_")
    alien = _finding(
        foreign_runs,
        "divergent_entry",
        F.struct(
            F.lit("slave").alias("coordinates"),
            F.col("first_command").alias("slave_command"),
            F.lit("not_on_master").alias("reason"),
        ),
        replica_digest=_hex(F.col("content_hash_abs")),
        key=F.when(F.col("count") == 1, F.col("first_key")),
    )
    return [dup, alien]


def _divergent_findings(al: Alignment) -> DataFrame:
    div_rows = al.divergent.select(
        "db",
        F.col("m_seq").alias("seq"),
        F.col("m_spos").alias("spos"),
        F.col("m_epos").alias("epos"),
        F.col("m_filenum").alias("first_file"),
        F.col("m_start").alias("first_start"),
        F.col("m_filenum").alias("last_file"),
        F.col("m_end").alias("last_end"),
        F.lit(1).alias("count"),
        (F.col("m_end") - F.col("m_start")).alias("bytes"),
        "m_key",
        "s_key",
        "m_command",
        "s_command",
        "m_digest",
        "s_digest",
    )
    divergent = _finding(
        div_rows,
        "divergent_entry",
        F.struct(
            F.col("m_command").alias("master_command"),
            F.col("s_command").alias("slave_command"),
            F.lit("same_position").alias("reason"),
        ),
        master_digest=_hex(F.col("m_digest")),
        replica_digest=_hex(F.col("s_digest")),
        key=F.col("m_key"),
    )
    return divergent


def damage_findings(records: DataFrame, side: str) -> DataFrame:
    """corrupt_record / torn_tail rows of a side's scan, as findings at their file:offset."""
    dmg = records.where(F.col("row_kind").isin("corrupt_record", "torn_tail")).select(
        "db",
        "row_kind",
        "detail",
        "path",
        F.col("filenum").alias("first_file"),
        F.col("start").alias("first_start"),
        F.col("filenum").alias("last_file"),
        F.col("end").alias("last_end"),
        _pos("filenum", "start").alias("spos"),
        _pos("filenum", "end").alias("epos"),
        F.lit(1).alias("count"),
        (F.col("end") - F.col("start")).alias("bytes"),
    )
    parts = []
    for category in ("corrupt_record", "torn_tail"):
        parts.append(
            _finding(
                dmg.where(F.col("row_kind") == category),
                category,
                F.struct(F.lit(side).alias("side"), F.col("path").alias("file"), F.col("detail").alias("reason")),
            )
        )
    return parts[0].unionByName(parts[1])
