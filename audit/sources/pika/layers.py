"""In which layer a Pika key was lost: master binlog -> slave binlog -> slave data.

A write on a Pika master goes to its DB, then to its binlog; the slave writes each record it receives to
its own binlog synchronously and applies it to its DB asynchronously (Pika's src/pika_repl_bgworker.cc; the
formats are in audit/sources/pika/binlog_format.py). So a keyspace finding can be placed by looking up the last
record that wrote its key on each side (a Spark join of the findings with the two scans):

| layer               | the master's last write of the key        | the slave's binlog                         |
|---------------------|-------------------------------------------|--------------------------------------------|
| not_logged          | none, and the master's binlog is complete | (any)                                      |
| older_than_binlog   | none, and older files were purged         | (any)                                      |
| slave_only          | none                                      | has a write of the key the master's lacks  |
| before_slave_binlog | before the slave's first record           | starts later (a full sync brought the key) |
| not_yet_shipped     | after the last one the slave holds        | not there yet: lag, not loss               |
| not_shipped         | in the window both logs cover             | lacks it (or lacks an earlier write)       |
| replayed            | present                                   | has more writes of the key than the master |
| not_applied         | present                                   | same last write: the DB did not apply it   |

"The last one the slave holds" is the frontier: per db, the master position of the last master record the
slave holds, from the binlog diff's alignment (`shipped_frontier`), else found by content
(`frontier_by_content`): in a healthy pair it is the slave's own last position, after a gap or a replay
the slave's offsets are shifted and only content places it. A key whose last write lies after it is lag.

"Complete" means the master's oldest file is write2file0, its first record starts at offset 0 and no
full-sync padding precedes it: the binlog goes back to the log's beginning, so a key it never mentions
was not logged (rather than logged before the horizon).

Keys: the scan's `key` column holds the first 1024 bytes of a record's first key (KEY_PREFIX_MAX). A
finding whose key is 1024 bytes or longer is matched by that prefix and marked `key_match: prefix` (two
long keys sharing it cannot be told apart); the catalog's signatures require `exact`. Pika 4.0 logs
multi-key writes as one record per key (DEL k1 k2 as `del k1` + `del k2`, MSET as one `set` per pair,
Pika's src/pika_kv.cc, DelCmd/MsetCmd::DoBinlog), so the first key is the key. Records that write a key other
than their first argument (RENAME's target, SMOVE's/RPOPLPUSH's destination, an unsplit MSET from an older
version) are counted per db as `other_key_writers`: with any present, a key "never logged" may just have
been written that way, and PIKA_NOT_LOGGED does not fire.

Files older than a side's last full sync (before its padding) belong to another replication life and are
left out, as the binlog diff does.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from audit.sources.pika.binlog_format import KEY_PREFIX_MAX
from audit.sources.pika.record_args import with_expiry

OTHER_KEY_WRITERS = ("rename", "renamenx", "smove", "rpoplpush", "brpoplpush", "lmove", "blmove", "mset", "msetnx")
LAYERS = (
    "not_logged",
    "older_than_binlog",
    "slave_only",
    "before_slave_binlog",
    "not_yet_shipped",
    "not_shipped",
    "replayed",
    "not_applied",
)
_WRITE_FIELDS = ("command", "filenum", "start", "end", "exec_time", "digest", "path")
_JSON = {"ignoreNullFields": "false"}  # a side with no record is an explicit null, not an absent field


def _c(c: Column | str) -> Column:
    return F.col(c) if isinstance(c, str) else c


def pos(filenum: Column | str, offset: Column | str) -> Column:
    """A binlog position as one number, `filenum << 32 | offset` (the findings' start_num/end_num)."""
    return F.shiftleft(_c(filenum).cast("long"), 32) + _c(offset)


def where(filenum: Column | str, offset: Column | str) -> Column:
    """`filenum:offset`, the findings' start/end text; null when the position is."""
    return F.when(_c(filenum).isNotNull(), F.concat_ws(":", _c(filenum).cast("string"), _c(offset).cast("string")))


def key_text(key: Column) -> Column:
    """A key for JSON: UTF-8 as is, anything else as 0x-hex (binary-safe, like the report's display_key)."""
    as_text = key.cast("string")
    return F.when(F.is_valid_utf8(as_text), as_text).otherwise(F.concat(F.lit("0x"), F.lower(F.hex(key))))


def iso_time(seconds: Column) -> Column:
    return F.date_format(F.timestamp_seconds(seconds), "yyyy-MM-dd'T'HH:mm:ss'Z'")


def merge_detail(detail: Column, extra: Column) -> Column:
    """The `detail` JSON object with the fields of the struct `extra` appended (nulls written as null)."""
    add = F.to_json(extra, _JSON)
    base = F.trim(F.coalesce(detail, F.lit("{}")))
    head = F.regexp_replace(base, r"\}$", "")
    return F.when(base == "{}", add).otherwise(F.concat(head, F.lit(","), F.regexp_replace(add, r"^\{", "")))


def _by(records: DataFrame) -> list[str]:
    """Group by db, and by side when both sides come in one DataFrame (`side` column: m or s)."""
    return ["side", "db"] if "side" in records.columns else ["db"]


def padding_files(records: DataFrame) -> DataFrame:
    """Per side and db, the file holding the last full sync's padding (rare rows: Parquet skips the rest)."""
    by = _by(records)
    return records.where(F.col("row_kind") == "padding").groupBy(*by).agg(F.max("filenum").alias("_pad"))


def drop_older_files(records: DataFrame, pads: DataFrame) -> DataFrame:
    return (
        records.join(F.broadcast(pads), _by(records), "left")
        .where(F.col("_pad").isNull() | (F.col("filenum") >= F.col("_pad")))
        .drop("_pad")
    )


def live_files(records: DataFrame) -> DataFrame:
    """Drop a side's files older than its last full sync (the file holding its padding is kept)."""
    return drop_older_files(records, padding_files(records))


def small_local(df: DataFrame) -> DataFrame:
    """A small result (a row per side and db) computed once and held as a local relation, so the plans
    that use it several times do not each scan the logs again."""
    return df.sparkSession.createDataFrame(df.collect(), df.schema)


def real_records(records: DataFrame) -> DataFrame:
    return records.where((F.col("row_kind") == "record") & (F.col("command") != "padding")).withColumn(
        "spos", pos("filenum", "start")
    )


def horizons(records: DataFrame) -> DataFrame:
    """Per db, what one side's kept binlog covers (one aggregation over the side's live files).

    Columns: db; oldest_file; first_file/first_start/first_spos/first_exec_time and last_file/last_end/
    last_epos/last_exec_time/last_digest of its real records; start_spos (where its own history starts:
    the end of its full-sync padding, else its first record); records; complete (see the module
    docstring); other_key_writers. With a `side` column, one row per side and db.
    """
    return _horizons(live_files(records))


def _horizons(live: DataFrame) -> DataFrame:
    # min_by/max_by of plain columns (not of a struct) keep this a hash aggregation: no sort of the log
    real = (F.col("row_kind") == "record") & (F.col("command") != "padding")
    spos = F.when(real, pos("filenum", "start"))
    first = {c: F.min_by(c, spos) for c in ("filenum", "start", "exec_time")}
    last = {c: F.max_by(c, spos) for c in ("filenum", "end", "exec_time", "digest")}
    by = _by(live)
    agg = live.groupBy(*by).agg(
        F.min("filenum").alias("oldest_file"),
        F.max(F.when(F.col("row_kind") == "padding", pos("filenum", "end"))).alias("pad_end"),
        F.min(spos).alias("first_spos"),
        *[c.alias(f"first_{n}") for n, c in first.items()],
        *[c.alias(f"last_{n}") for n, c in last.items()],
        F.count_if(real).alias("records"),
        F.count_if(real & F.col("command").isin(*OTHER_KEY_WRITERS)).alias("other_key_writers"),
    )
    complete = (F.col("oldest_file") == 0) & F.col("pad_end").isNull() & (F.col("first_spos") == 0)
    return agg.select(
        *by,
        "oldest_file",
        F.col("first_filenum").alias("first_file"),
        "first_start",
        "first_spos",
        "first_exec_time",
        F.col("last_filenum").alias("last_file"),
        "last_end",
        pos("last_filenum", "last_end").alias("last_epos"),
        "last_exec_time",
        "last_digest",
        F.coalesce("pad_end", "first_spos").alias("start_spos"),
        "records",
        F.coalesce(complete, F.lit(False)).alias("complete"),
        "other_key_writers",
    )


def last_writes(records: DataFrame, keys: DataFrame | None = None) -> DataFrame:
    """The last record that wrote each (db, key) on one side, by binlog position.

    `keys` (db, key) restricts the work to those keys first (a semi-join: findings are few, logs are not).
    Columns: db, key, command, filenum, start, end, exec_time, digest, path (when the scan has it), spos,
    epos, records. `key` is the scan's key prefix (KEY_PREFIX_MAX bytes).
    """
    good = real_records(live_files(records)).where(F.col("key").isNotNull())
    if keys is not None:
        good = good.join(keys.select("db", "key").distinct(), ["db", "key"], "left_semi")
    fields = [c for c in _WRITE_FIELDS if c in good.columns]
    out = good.groupBy("db", "key").agg(
        F.max_by(F.struct(*fields), "spos").alias("w"), F.max("spos").alias("spos"), F.count("*").alias("records")
    )
    return out.select("db", "key", "w.*", "spos", "records").withColumn("epos", pos("filenum", "end"))


def both_sides(m_records: DataFrame, s_records: DataFrame) -> DataFrame:
    """Both scans in one DataFrame with a `side` column (m, s): each aggregation runs once for both."""
    wanted = ("row_kind", "db", "filenum", "start", "end", "exec_time", "digest", "command", "key", "path")
    cols = [c for c in wanted if c in m_records.columns and c in s_records.columns]
    return m_records.select(F.lit("m").alias("side"), *cols).unionByName(
        s_records.select(F.lit("s").alias("side"), *cols)
    )


def _pair_writes(real: DataFrame, keys: DataFrame, slave_start: DataFrame) -> DataFrame:
    """Per (db, key) of `keys`: each side's last write (m_*, s_* columns), records per side, and the
    master's records from where the slave's history starts (`m_records_from`)."""
    good = real.where(F.col("key").isNotNull()).join(keys, ["db", "key"], "left_semi")
    good = good.join(F.broadcast(slave_start.select("db", "from_spos")), "db", "left")
    fields = [c for c in _WRITE_FIELDS if c in good.columns]
    write = F.struct(*fields, "spos")
    is_m = F.col("side") == "m"
    since = F.col("from_spos").isNull() | (F.col("spos") >= F.col("from_spos"))
    agg = good.groupBy("db", "key").agg(
        F.max_by(F.when(is_m, write), F.when(is_m, F.col("spos"))).alias("mw"),
        F.max_by(F.when(~is_m, write), F.when(~is_m, F.col("spos"))).alias("sw"),
        F.count_if(is_m).alias("m_records"),
        F.count_if(~is_m).alias("s_records"),
        F.count_if(is_m & since).alias("m_records_from"),
    )
    flat = [F.col(f"{w}.{c}").alias(f"{p}{c}") for w, p in (("mw", "m_"), ("sw", "s_")) for c in [*fields, "spos"]]
    return agg.select(
        F.col("db").alias("w_db"), F.col("key").alias("w_key"), *flat, "m_records", "s_records", "m_records_from"
    ).select("*", pos("m_filenum", "m_end").alias("m_epos"), pos("s_filenum", "s_end").alias("s_epos"))


def _prefixed(df: DataFrame, p: str) -> DataFrame:
    return df.select(*[F.col(c).alias(p + c) for c in df.columns])


def _frontier_pos() -> Column:
    """The master position up to which the slave holds the master's records (lag starts after it)."""
    return F.coalesce(F.col("fr_epos"), F.col("sh_last_epos"), F.col("sh_start_spos"), F.lit(0))


def shipped_frontier(matched: DataFrame) -> dict[int, int]:
    """Per db, the end position (filenum << 32 | offset) of the last master record the slave holds, from
    the binlog diff's alignment (`BinlogDiff.matched`: db, m_epos, ...). Master records after it are lag."""
    rows = matched.groupBy("db").agg(F.max("m_epos").alias("f")).collect()
    return {int(r["db"]): int(r["f"]) for r in rows}


def frontier_by_content(m_records: DataFrame, s_records: DataFrame) -> DataFrame:
    """Without the alignment: per db (db, fr_epos), the master record with the content of the slave's last
    record nearest to its position (a gap puts the slave's offsets behind, a replay ahead), else the
    slave's own last position."""
    return _frontier_from(horizons(s_records), real_records(live_files(m_records)))


def _frontier_from(slave_h: DataFrame, m_real: DataFrame) -> DataFrame:
    last = slave_h.select(
        F.col("db").alias("l_db"), F.col("last_digest").alias("l_digest"), F.col("last_epos").alias("l_epos")
    )
    m = m_real.select("db", "digest", pos("filenum", "end").alias("m_epos"))
    same = (F.col("db") == F.col("l_db")) & (F.col("digest") == F.col("l_digest"))
    nearest = (
        m.join(F.broadcast(last), same)
        .groupBy("db")
        .agg(F.min_by("m_epos", F.abs(F.col("m_epos") - F.col("l_epos"))).alias("m_epos"))
    )
    return last.join(nearest, F.col("l_db") == F.col("db"), "left").select(
        F.col("l_db").alias("db"), F.coalesce("m_epos", "l_epos").alias("fr_epos")
    )


def layer_of() -> Column:
    """The layer column over the joined m_* (master's last write), s_* (slave's), mh_*/sh_* (horizons)."""
    m_has, s_has = F.col("m_command").isNotNull(), F.col("s_command").isNotNull()
    same_last = m_has & s_has & (F.col("m_digest") == F.col("s_digest"))
    slave_start = F.col("sh_start_spos")
    return (
        F.when(F.col("mh_db").isNull() | F.col("sh_db").isNull(), F.lit(None))
        .when(~m_has & s_has & (F.col("mh_complete") | (F.col("s_spos") >= F.col("mh_first_spos"))), "slave_only")
        .when(~m_has & F.col("mh_complete"), "not_logged")
        .when(~m_has, "older_than_binlog")
        .when(F.col("m_epos") > _frontier_pos(), "not_yet_shipped")
        .when(same_last & (F.col("m_records_from") > F.col("s_records")), "not_shipped")
        .when(same_last & (F.col("m_records_from") < F.col("s_records")), "replayed")
        .when(same_last, "not_applied")
        .when(slave_start.isNotNull() & (F.col("m_epos") <= slave_start), "before_slave_binlog")
        .otherwise("not_shipped")
    )


def _write(p: str) -> Column:
    """One side's last write of the key, or null."""

    def c(name: str) -> Column:
        return F.col(p + name)

    return F.when(
        c("command").isNotNull(),
        F.struct(
            c("command").alias("command"),
            where(c("filenum"), c("start")).alias("at"),
            where(c("filenum"), c("end")).alias("end"),
            c("exec_time").alias("exec_time"),
            iso_time(c("exec_time")).alias("exec_at"),
            c("records").alias("records"),
            c("expire_at_ms").alias("expire_at_ms"),
            (c("expire_at_ms") - c("exec_time") * 1000).alias("ttl_when_logged_ms"),
            c("args_read").alias("args_read"),
        ),
    )


def _horizon(p: str) -> Column:
    def c(name: str) -> Column:
        return F.col(p + name)

    return F.when(
        c("db").isNotNull(),
        F.struct(
            where(c("first_file"), c("first_start")).alias("first"),
            c("first_exec_time").alias("first_exec_time"),
            where(c("last_file"), c("last_end")).alias("last"),
            c("last_exec_time").alias("last_exec_time"),
            c("oldest_file").alias("oldest_file"),
            c("complete").alias("complete"),
            c("records").alias("records"),
        ),
    )


def _evidence(key_match: Column) -> Column:
    """What the catalog matches (top-level detail fields) and the `binlog` block."""
    same_last = F.col("m_digest") == F.col("s_digest")
    s_expired = F.when(F.col("s_expire_at_ms").isNotNull(), F.col("s_expire_at_ms") <= F.col("s_exec_time") * 1000)
    binlog = F.struct(
        key_match.alias("key_match"),
        _write("m_").alias("master"),
        _write("s_").alias("replica"),
        F.struct(
            _horizon("mh_").alias("master"),
            _horizon("sh_").alias("replica"),
            where(F.shiftright(_frontier_pos(), 32), _frontier_pos().bitwiseAND(0xFFFFFFFF)).alias("shipped_upto"),
        ).alias("horizon"),
    )
    return F.struct(
        F.when(F.col("mh_db").isNotNull() & F.col("sh_db").isNotNull(), binlog).alias("binlog"),
        layer_of().alias("layer"),
        F.coalesce("m_command", "s_command").alias("last_command"),
        key_match.alias("key_match"),
        F.col("mh_other_key_writers").alias("other_key_writers"),
        F.when(same_last, s_expired).alias("expired_when_replica_logged"),
        F.when(same_last, F.col("s_exec_time") - F.col("m_exec_time")).alias("replica_delay_s"),
    )


KEYSPACE = ("missing_on_replica", "extra_on_replica", "type_mismatch", "value_mismatch", "ttl_mismatch")


def annotate_keyspace(
    findings: DataFrame, m_records: DataFrame, s_records: DataFrame, frontier: Mapping[int, int] | None = None
) -> DataFrame:
    """Keyspace findings with `detail.binlog` (each side's last write of the key, both horizons) and the
    layer evidence (`layer`, `last_command`, `key_match`, ...) the catalog matches. Other rows pass as is.

    `findings`: the findings schema (audit/findings.py). `m_records`, `s_records`: each side's binlog scan
    (audit/sources/pika/logfiles.py SCAN_SCHEMA, `snapshots/<pair>/<side>/binlog.parquet`). `frontier`:
    `shipped_frontier(BinlogDiff.matched)` when the binlog diff ran; else it is found by content.
    """
    columns = findings.columns
    is_ks = F.col("category").isin(*KEYSPACE) & F.col("key").isNotNull()
    ks = findings.where(is_ks).withColumn("_mkey", F.substring("key", 1, KEY_PREFIX_MAX))
    keys = ks.select("db", F.col("_mkey").alias("key")).distinct()
    both = both_sides(m_records, s_records)
    live = drop_older_files(both, small_local(padding_files(both)))
    real = real_records(live)
    h = small_local(_horizons(live))
    mh, sh = (h.where(F.col("side") == side).drop("side") for side in ("m", "s"))
    if frontier is None:
        fr = _frontier_from(sh, real.where(F.col("side") == "m"))
    else:
        fr = findings.sparkSession.createDataFrame(list(frontier.items()), "db int, fr_epos long")
    writes = _pair_writes(real, keys, sh.select("db", F.col("start_spos").alias("from_spos")))
    writes = with_expiry(writes, ("m_", "s_"))
    joined = (
        ks.join(writes, (F.col("db") == F.col("w_db")) & (F.col("_mkey") == F.col("w_key")), "left")
        .join(F.broadcast(_prefixed(mh, "mh_")), F.col("db") == F.col("mh_db"), "left")
        .join(F.broadcast(_prefixed(sh, "sh_")), F.col("db") == F.col("sh_db"), "left")
        .join(F.broadcast(fr.withColumnRenamed("db", "fr_db")), F.col("db") == F.col("fr_db"), "left")
    )
    key_match = F.when(F.length("key") >= KEY_PREFIX_MAX, "prefix").otherwise("exact")
    annotated = joined.withColumn("detail", merge_detail(F.col("detail"), _evidence(key_match))).select(*columns)
    return annotated.unionByName(findings.where(~is_ks))
