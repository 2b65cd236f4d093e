"""Spark diff of a Pika master's and slave's binlogs, per database (docs/formats/pika-binlog.md).

In a healthy pair the slave appends each master record at the same (filenum, end offset), with the same
content (bytes 34.. of the item). audit/sources/pika/binlog_align.py pairs the records: by position and
content, then the same content at another position (the slave's offsets shifted by a gap or a replay),
then same place and other content (`divergent_entry`). This module numbers the records and turns what
is left unpaired into findings.

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
from audit.sources.pika.binlog_align import Alignment, align, no_stage

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


def padding_ends(records: DataFrame) -> DataFrame:
    """(db, pad_end): where each db's padding ends, the position a slave's full sync left its log at."""
    padding = (F.col("row_kind") == "padding") | (F.col("command") == "padding")
    return records.where(padding).groupBy("db").agg(F.max(_pos("filenum", "end")).alias("pad_end"))


def common_window(m: DataFrame, s: DataFrame, s_pads: DataFrame) -> tuple[DataFrame, DataFrame]:
    """Both sides from max(first master record, first slave record) on: earlier records are not comparable.

    The master may have purged old files; the slave's history starts at its full sync. A db the slave holds
    no record of (nothing since its full sync, or an empty log) starts where its padding ends, else where
    the master's log does: every master record from there on is lag. Compared from the slave's first
    record only, such a db dropped out of the diff and its lag counted 0.
    """
    s_lo = s.groupBy("db").agg(F.min("spos").alias("s_lo"))
    lo = (
        m.groupBy("db")
        .agg(F.min("spos").alias("m_lo"))
        .join(s_lo, "db", "left")
        .join(s_pads, "db", "left")
        .select("db", F.greatest("m_lo", F.coalesce("s_lo", "pad_end")).alias("lo"))
    )
    lo = F.broadcast(lo)
    return (
        m.join(lo, "db").where(F.col("spos") >= F.col("lo")).drop("lo"),
        s.join(lo, "db").where(F.col("spos") >= F.col("lo")).drop("lo"),
    )


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


def held_from(al: Alignment, m_good: DataFrame) -> DataFrame:
    """(db, held_from): where the records the slave holds end, for telling loss from lag: the first record of
    the run of identical master records (an INCR loop) that the last one it holds is in. Which copies of
    that run it holds is ambiguous by content, and its unpaired copies are lag: a slave shifted by a
    replay of the same INCRs holds its copy of record k where the master's k + 10 is, so the first pass
    paired them, and the lag in the loop once came out as a missing_range."""
    last = (
        m_good.join(F.broadcast(al.horizon), "db")
        .where(F.col("seq") == F.col("horizon"))
        .select("db", "horizon", F.col("digest").alias("_last"))
    )
    other = m_good.join(F.broadcast(last), "db").where(
        (F.col("seq") < F.col("horizon")) & (F.col("digest") != F.col("_last"))
    )
    start = other.groupBy("db").agg((F.max("seq") + 1).alias("_start"))
    return last.join(start, "db", "left").select("db", F.coalesce("_start", F.lit(0)).alias("held_from"))


def _at_horizon(al: Alignment) -> DataFrame:
    """held_from as the last record held itself: enough where no master record is left unpaired."""
    return al.horizon.select("db", F.col("horizon").alias("held_from"))


def missing_runs(al: Alignment, held: DataFrame, bases: FileBases) -> DataFrame:
    """Master runs absent on the slave, before the records it holds end (`held_from`)."""
    missing = al.m_rest.join(F.broadcast(held), "db").where(F.col("m_seq") < F.col("held_from"))
    runs = islands(missing, "m_")
    runs = _shift_at(runs, al.matched, "m_", F.col("last_seq") + 1, "behind_after", bases)
    return _shift_at(runs, al.matched, "m_", F.col("first_seq") - 1, "behind_before", bases)


def unreplicated(al: Alignment, held: DataFrame) -> DataFrame:
    """Master records after the slave's last one (from `held_from` on), per db: lag, in records and bytes."""
    return (
        al.m_rest.join(F.broadcast(held), "db", "left")
        .where(F.col("held_from").isNull() | (F.col("m_seq") >= F.col("held_from")))
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
    stage: Stage = no_stage,
) -> BinlogDiff:
    """Align both logs and turn what is left into coalesced findings. Detectors whose input is empty
    (the common case: a healthy pair) are skipped without running a job."""
    m_good = stage(with_seq(good_records(m_records)), "m_good")
    s_live = live_slave_files(s_records)
    s_good = stage(with_seq(good_records(s_live)), "s_good")
    m_win, s_win = common_window(m_good, s_good, padding_ends(s_live))
    al = align(m_win, s_win, stage)
    parts: list[DataFrame] = []
    held = _at_horizon(al)
    if not al.m_rest.join(held, "db").where(F.col("m_seq") < F.col("held_from")).isEmpty():  # not all lag
        held = stage(held_from(al, m_good), "held_from")
        parts.append(_gap_findings(al, held, binlog_dbs, bases))
    if not al.s_rest.isEmpty():
        parts += _slave_only_findings(al, m_good, s_good, binlog_dbs, bases)
    if not al.divergent.isEmpty():
        parts.append(_divergent_findings(al))
    findings = parts[0] if parts else _empty_findings(m_good)
    for more in parts[1:]:
        findings = findings.unionByName(more)
    return BinlogDiff(findings, al.matched, unreplicated(al, held))


def _empty_findings(any_df: DataFrame) -> DataFrame:
    return to_findings(any_df.limit(0), check="binlog", category="missing_range")


def _gap_findings(al: Alignment, held: DataFrame, binlog_dbs: int, bases: FileBases) -> DataFrame:
    missing = missing_runs(al, held, bases)
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
