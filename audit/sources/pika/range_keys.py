"""The keys a binlog range finding touches, and whether the slave's data shows its effect.

A `missing_range` (master coordinates: records the slave's binlog lacks) or a `duplicate_range` (slave
coordinates: records written twice) says where and how many records, not which keys. This joins each
range with the records of the side whose coordinates it uses (start_num <= record start, record end <=
end_num, same db) and adds to its `detail`:

- `keys`: the distinct keys the range writes, first `limit` by position as text (UTF-8 or 0x-hex), their
  total, and how many of them have their side's last write inside the range (a key written again after
  the range may have been repaired by that later write);
- `slave_data`, when the pair's keyspace was audited: how many of those keys differ on the slave (the
  keyspace findings for them, by category) and the first `limit` of them; null when it was not audited;
- top-level `keys_total`, `keys_differing_on_slave` (null when not audited) and, for replays,
  `non_idempotent_records`: records whose second application changes the value (INCR, LPUSH, APPEND...).

Keys are the scan's 1024-byte prefixes; a keyspace finding matches by the same prefix.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from audit.sources.pika.binlog_format import KEY_PREFIX_MAX
from audit.sources.pika.layers import (
    KEYSPACE,
    both_sides,
    drop_older_files,
    key_text,
    merge_detail,
    padding_files,
    pos,
    real_records,
    small_local,
)

KEYS_LIMIT = 100
RANGE_CATEGORIES = ("missing_range", "duplicate_range")
NON_IDEMPOTENT = (
    "incr",
    "incrby",
    "incrbyfloat",
    "decr",
    "decrby",
    "append",
    "setrange",
    "lpush",
    "rpush",
    "lpushx",
    "rpushx",
    "linsert",
    "lpop",
    "rpop",
    "rpoplpush",
    "hincrby",
    "hincrbyfloat",
    "zincrby",
    "spop",
)
_RANGE = ["db", "category", "start_num", "end_num"]


def _touched(ranges: DataFrame, real: DataFrame) -> DataFrame:
    """One row per (range, key): the key's first position in the range, its records there, and whether
    the side's last write of the key (`last_spos`, over the whole log) lies inside the range."""
    inside = (
        (F.col("side") == F.col("r_side"))
        & (F.col("r_db") == F.col("db"))
        & (F.col("spos") >= F.col("start_num"))
        & (pos("filenum", "end") <= F.col("end_num"))
    )
    recs = real.select("side", F.col("db").alias("r_db"), "key", "command", "filenum", "end", "spos")
    touched = (
        recs.join(F.broadcast(ranges), inside)
        .groupBy(*_RANGE, "r_side", "key")
        .agg(
            F.min("spos").alias("first_spos"),
            F.count("*").alias("writes"),
            F.count_if(F.col("command").isin(*NON_IDEMPOTENT)).alias("non_idempotent"),
        )
    )
    keys = touched.select(F.col("r_side").alias("side"), "db", "key").distinct()
    lasts = (
        real.join(keys, ["side", "db", "key"], "left_semi")
        .groupBy("side", "db", "key")
        .agg(F.max("spos").alias("last_spos"))
        .select(F.col("side").alias("l_side"), F.col("db").alias("l_db"), F.col("key").alias("l_key"), "last_spos")
    )
    on = (F.col("r_side") == F.col("l_side")) & (F.col("db") == F.col("l_db")) & (F.col("key") == F.col("l_key"))
    inside_range = F.col("last_spos").between(F.col("start_num"), F.col("end_num"))
    return touched.join(lasts, on, "left").withColumn("last_inside", F.coalesce(inside_range, F.lit(False)))


def _with_slave_data(touched: DataFrame, keyspace: DataFrame) -> DataFrame:
    """`ks_category`: the keyspace finding of the key (null when its data agrees on both sides)."""
    ks = (
        keyspace.where(F.col("category").isin(*KEYSPACE) & F.col("key").isNotNull())
        .select(
            F.col("db").alias("k_db"),
            F.substring("key", 1, KEY_PREFIX_MAX).alias("k_key"),
            F.col("category").alias("ks_category"),
        )
        .groupBy("k_db", "k_key")
        .agg(F.min("ks_category").alias("ks_category"))
    )
    on = (F.col("db") == F.col("k_db")) & (F.col("key") == F.col("k_key"))
    return touched.join(ks, on, "left").drop("k_db", "k_key")


def _first(n: int, cond: Column | None = None) -> Column:
    """The first n keys (by first position) as text; `cond` keeps only some."""
    entry = F.struct("first_spos", key_text(F.col("key")).alias("k"))
    kept = F.when(cond, entry) if cond is not None else entry
    return F.transform(F.slice(F.array_sort(F.collect_list(kept)), 1, n), lambda x: x["k"])


def _or_empty(c: Column) -> Column:
    return F.coalesce(c, F.array().cast("array<string>"))


def _per_range(touched: DataFrame, audited: bool, limit: int) -> DataFrame:
    differs = F.col("ks_category").isNotNull()
    by_category = F.struct(*[F.count_if(F.col("ks_category") == c).alias(c) for c in KEYSPACE])
    aggs = [
        F.count("*").alias("keys_total"),
        _first(limit).alias("keys_sample"),
        F.count_if("last_inside").alias("keys_last_written_in_range"),
        F.sum("non_idempotent").alias("non_idempotent_records"),
    ]
    if audited:
        aggs += [
            F.count_if(differs).alias("keys_differing"),
            by_category.alias("by_category"),
            _first(limit, differs).alias("differing_sample"),
        ]
    return touched.groupBy(*_RANGE).agg(*aggs)


def _evidence(audited: bool, limit: int) -> Column:
    keys = F.struct(
        F.col("keys_total").alias("total"),
        _or_empty(F.col("keys_sample")).alias("first"),
        F.lit(limit).alias("first_limit"),
        F.col("keys_last_written_in_range").alias("last_written_in_range"),
    )
    slave = (
        F.struct(
            F.col("keys_differing").alias("keys_differing"),
            F.col("by_category").alias("by_category"),
            _or_empty(F.col("differing_sample")).alias("first_differing"),
        )
        if audited
        else F.lit(None).cast("struct<keys_differing:long>")
    )
    return F.struct(
        keys.alias("keys"),
        slave.alias("slave_data"),
        F.col("keys_total").alias("keys_total"),
        (F.col("keys_differing") if audited else F.lit(None).cast("long")).alias("keys_differing_on_slave"),
        F.col("non_idempotent_records").alias("non_idempotent_records"),
    )


def keys_of_ranges(
    binlog_findings: DataFrame,
    m_records: DataFrame,
    s_records: DataFrame,
    keyspace_findings: DataFrame | None = None,
    limit: int = KEYS_LIMIT,
) -> DataFrame:
    """Binlog findings with the keys of each missing/duplicate range and the slave's data for them.

    `binlog_findings`: the binlog check's findings (findings schema). `m_records`, `s_records`: each
    side's scan (SCAN_SCHEMA). `keyspace_findings`: the pair's keyspace findings when its keyspace was
    audited (None: `slave_data` is null). Other findings pass through unchanged.
    """
    columns = binlog_findings.columns
    is_range = F.col("category").isin(*RANGE_CATEGORIES)
    ranges = (
        binlog_findings.where(is_range)
        .select(*_RANGE)
        .distinct()
        .withColumn("r_side", F.when(F.col("category") == "missing_range", "m").otherwise("s"))
    )
    both = both_sides(m_records, s_records)
    real = real_records(drop_older_files(both, small_local(padding_files(both)))).where(F.col("key").isNotNull())
    touched = _touched(ranges, real)
    audited = keyspace_findings is not None
    if keyspace_findings is not None:
        touched = _with_slave_data(touched, keyspace_findings)
    per_range = _per_range(touched, audited, limit)
    joined = (
        binlog_findings.where(is_range)
        .join(per_range, _RANGE, "left")
        .fillna(0, ["keys_total", "keys_last_written_in_range", "non_idempotent_records"])
    )
    if audited:
        joined = joined.fillna(0, ["keys_differing"])
    out = joined.withColumn("detail", merge_detail(F.col("detail"), _evidence(audited, limit))).select(*columns)
    return out.unionByName(binlog_findings.where(~is_range))
