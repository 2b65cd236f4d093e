"""The store diff's third pass as small DataFrame transforms: kept records compared, classified, coalesced.

See audit/sources/rocketmq/diff.py for the whole diff and its categories.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from audit.diff.findings import to_findings


def identity() -> Column:
    """A message's identity across replicas: UNIQ_KEY, else what the producer and the queue fixed."""
    fallback = F.concat_ws("|", "topic", "queue_id", "queue_offset", "born_ts", "born_host")
    return F.coalesce(F.col("uniq_key"), fallback)


def records(rows: DataFrame) -> DataFrame:
    return rows.where(F.col("row_kind") == "record").withColumn("ident", identity())


def _compared(lo: int, hi: int, other_not_read: Sequence[tuple[int, int]]) -> Column:
    """In a differing chunk, starting in [lo, hi), and not where the other side could not be read."""
    cond = F.col("in_ranges") & (F.col("phys_offset") >= lo) & (F.col("phys_offset") < hi)
    end = F.col("phys_offset") + F.col("size")
    for a, b in other_not_read:
        cond = cond & ~((F.col("phys_offset") < b) & (end > a))
    return cond


_CANDIDATE_COLUMNS = (
    "side",
    "compared",
    "in_ranges",
    "phys_offset",
    "size",
    "digest",
    "ident",
    "uniq_key",
    "store_host",
    "store_ts",
    "topic",
)


def candidates(
    master_rows: DataFrame,
    replica_rows: DataFrame,
    lo: int,
    hi: int,
    master_not_read: Sequence[tuple[int, int]],
    replica_not_read: Sequence[tuple[int, int]],
) -> DataFrame:
    """The kept records of both sides, `side` master|replica, `compared` for those compared one by one.

    The master's rows include records outside the differing chunks kept for their UNIQ_KEY (not compared).
    """
    m = records(master_rows).withColumns({"side": F.lit("master"), "compared": _compared(lo, hi, replica_not_read)})
    r = (
        records(replica_rows)
        .where(F.col("in_ranges"))
        .withColumns({"side": F.lit("replica"), "compared": _compared(lo, hi, master_not_read)})
    )
    return m.select(*_CANDIDATE_COLUMNS).unionByName(r.select(*_CANDIDATE_COLUMNS))


def at_same_offset(cands: DataFrame) -> DataFrame:
    """Add what the other side's compared record at the same offset holds: other_digest, `same` (byte-equal)
    and `same_message` (same identity, other bytes)."""
    w = Window.partitionBy("phys_offset")
    mine = F.col("side")

    def other(col: str) -> Column:
        return F.max(F.when(F.col("compared") & (mine != F.lit("master")), F.col(col))).over(w)

    def master(col: str) -> Column:
        return F.max(F.when(F.col("compared") & (mine == F.lit("master")), F.col(col))).over(w)

    def pick(col: str) -> Column:
        return F.when(mine == "master", other(col)).otherwise(master(col))

    with_other = cands.withColumns(
        {"other_digest": pick("digest"), "other_size": pick("size"), "other_ident": pick("ident")}
    )
    same = F.col("compared") & (F.col("digest") == F.col("other_digest")) & (F.col("size") == F.col("other_size"))
    same_message = F.col("compared") & ~same & (F.col("ident") == F.col("other_ident"))
    return with_other.withColumns(
        {"same": F.coalesce(same, F.lit(False)), "same_message": F.coalesce(same_message, F.lit(False))}
    )


def by_message(aligned: DataFrame, *, replica_lo: int, replica_hi: int) -> DataFrame:
    """Add, per record, what the other side holds of the same message anywhere:

    - `replica_has`: the slave holds the message in its differing chunks (a master record that is not at
      its offset there is then shifted, not missing);
    - `in_master`: the master holds it at another offset y; `duplicate`: and the slave holds it at y too
      (y in an equal chunk inside the slave's range, or a byte-equal record there); `original_offset`.
    """
    peers = F.collect_list(F.struct("side", "phys_offset", "in_ranges", "same")).over(Window.partitionBy("ident"))
    x = F.col("phys_offset")

    def held(y: Column) -> Column:
        in_equal_chunk = ~y["in_ranges"] & (y["phys_offset"] >= replica_lo) & (y["phys_offset"] < replica_hi)

        def equal_record(q: Column) -> Column:
            return (q["side"] == "replica") & (q["phys_offset"] == y["phys_offset"]) & q["same"]

        equal_there = F.exists(F.col("peers"), equal_record)
        return in_equal_chunk | equal_there

    elsewhere = F.filter(F.col("peers"), lambda p: (p["side"] == "master") & (p["phys_offset"] != x))
    held_at = F.transform(F.filter(F.col("elsewhere"), held), lambda y: y["phys_offset"])
    return (
        aligned.withColumn("peers", peers)
        .withColumn("elsewhere", elsewhere)
        .withColumns(
            {
                "replica_has": F.exists(F.col("peers"), lambda p: p["side"] == "replica"),
                "in_master": F.size(F.col("elsewhere")) > 0,
                "original_offset": F.array_min(held_at),
            }
        )
        .withColumn("duplicate", F.size(held_at) > 0)
        .drop("peers", "elsewhere")
    )


@dataclass(frozen=True)
class Newest:
    """The newest STORETIMESTAMP read on each side and the oldest (null: no record read)."""

    master_first_ts: int | None
    master_last_ts: int | None
    replica_last_ts: int | None
    replica_first_ts: int | None = None
    """The slave's oldest record, given only when its log starts the common range and not at offset 0."""
    replica_reach: int | None = None
    """The master's offset of the furthest message the slave holds (see received_upto); null: not known."""

    def master_lag(self) -> Column:
        """A master record the slave has not received yet: past the master's copy of every message the slave
        holds (HA sends the log in order), or stored no earlier than the slave's newest record (a broker
        stores in STORETIMESTAMP order, unless its clock steps back), where the slave's newest is not older
        than the master's log (else it holds another master's data and nothing is lag)."""
        r, first = self.replica_last_ts, self.master_first_ts
        by_offset = F.lit(False) if self.replica_reach is None else F.col("phys_offset") > F.lit(self.replica_reach)
        if r is None or (first is not None and r < first):
            return by_offset
        return by_offset | (F.col("store_ts") >= F.lit(r))

    def before_replica_log(self) -> Column:
        """A master record stored no later than the slave's oldest record: where the slave's log is shifted,
        its copy lay before the slave's first file, which retention may have deleted. Not judged."""
        r = self.replica_first_ts
        return F.lit(False) if r is None else F.col("store_ts") <= F.lit(r)

    def past_master_read(self) -> Column:
        """A slave record stored no earlier than the newest record read on the master: the master may hold
        it past the files the snapshot listed."""
        m = self.master_last_ts
        return F.lit(False) if m is None else F.col("store_ts") >= F.lit(m)


def received_upto(cands: DataFrame, equal_upto: int | None) -> int | None:
    """The master's offset of the furthest message the slave holds: the furthest master copy of a message
    the slave holds in its differing chunks, or the start of the last chunk equal on both sides
    (`equal_upto`), whichever is further. A message the master holds twice (a producer's retry, a delayed
    message put again into its topic) counts at its first copy. Null when no slave record of the differing
    chunks is a master's message (a slave holding only other data: its end tells nothing). One small job
    over the kept records."""
    is_master = (F.col("side") == "master").cast("int")
    per_message = cands.groupBy("ident").agg(
        F.min(F.when(is_master == 1, F.col("phys_offset"))).alias("master_at"), F.min(is_master).alias("in_replica")
    )
    found = per_message.where(F.col("in_replica") == 0).agg(F.max("master_at")).collect()[0][0]
    return None if found is None else max(int(found), equal_upto or 0)


def replica_copy_at(cands: DataFrame, master_offset: int | None) -> int | None:
    """Where the slave holds (first) the message of the master's record at `master_offset`, when both are
    among the kept records; two small jobs over them."""
    if master_offset is None:
        return None
    is_master = F.col("side") == "master"
    found = cands.where(is_master & (F.col("phys_offset") == master_offset)).select("ident").limit(1).collect()
    if not found:
        return None
    copies = cands.where(~is_master & (F.col("ident") == found[0].ident)).agg(F.min("phys_offset")).collect()
    at: int | None = copies[0][0]
    return at


def classify(
    df: DataFrame, *, master_hosts: Sequence[str], newest: Newest, master_head_in_replica: int | None = None
) -> DataFrame:
    """The category of each compared record that is not byte-equal at its offset (null: no finding).

    Master records: divergent_entry (the slave has the same message there with other bytes), missing_range
    (the slave holds the message nowhere, it is not lag and not older than the slave's log: see Newest), or
    nothing (shifted, or lag).
    Slave records that are not the master's message there: duplicate_range, nothing (shifted: held by the
    master elsewhere), stale_replica_data (another store host than any of the master's, or older than the
    master's first record), nothing (older than it, but before the slave's copy of the master's first
    record, `master_head_in_replica`: the master's retention deleted it), nothing (newer than anything read
    on the master), else divergent_entry.

    Offsets cannot tell lag where the slave's log is shifted (a message missing or repeated): its copy of
    a message is not at the master's offset, so the records near its end are compared by time instead.
    """
    master_first_ts = newest.master_first_ts
    hosts = F.array(*[F.lit(h) for h in master_hosts]) if master_hosts else F.array().cast("array<string>")
    foreign_host = F.lit(bool(master_hosts)) & ~F.array_contains(hosts, F.col("store_host"))
    older = F.lit(master_first_ts is not None) & (F.col("store_ts") < F.lit(master_first_ts or 0))
    head = master_head_in_replica
    before_head = F.lit(head is not None) & (F.col("phys_offset") < F.lit(head or 0))
    is_master = F.col("side") == "master"
    missing = ~F.col("replica_has") & ~newest.master_lag() & ~newest.before_replica_log()
    category = (
        F.when(~F.col("compared") | F.col("same"), F.lit(None))
        .when(F.col("same_message"), F.when(is_master, F.lit("divergent_entry")))  # reported once, by the master
        .when(is_master, F.when(missing, F.lit("missing_range")))
        .when(F.col("duplicate"), F.lit("duplicate_range"))
        .when(F.col("in_master"), F.lit(None))
        .when(foreign_host | (older & ~before_head), F.lit("stale_replica_data"))
        .when(older, F.lit(None))  # the master held it before its first record, in a file retention deleted
        .when(newest.past_master_read(), F.lit(None))
        .otherwise(F.lit("divergent_entry"))
    )
    return df.withColumns(
        {
            "category": category,
            "foreign_host": F.when(~is_master, foreign_host),
            "older_than_master": F.when(~is_master, older),
        }
    ).where(F.col("category").isNotNull())


def bridged_end(classified: DataFrame, blanks: dict[str, dict[int, int]]) -> DataFrame:
    """Add `next_start`: where the next record of the same side starts, past a BLANK at a file's end."""
    end = F.col("phys_offset") + F.col("size")
    after = F.lit(None).cast("long")
    for side, where in blanks.items():
        if where:
            lookup = F.create_map(*[F.lit(v) for kv in sorted(where.items()) for v in kv])
            after = F.when(F.col("side") == side, lookup[end]).otherwise(after)
    return classified.withColumn("next_start", F.coalesce(after, end))


def runs(classified: DataFrame) -> DataFrame:
    """Contiguous records of one category and side become one run: gaps and islands over the offsets."""
    order = Window.partitionBy("side", "category").orderBy("phys_offset")
    new_run = F.coalesce(F.lag("next_start").over(order) != F.col("phys_offset"), F.lit(True))
    return classified.withColumn("run", F.sum(new_run.cast("long")).over(order))


def _hex(col: Column) -> Column:
    return F.lower(F.lpad(F.hex(col), 16, "0"))


def ranges(runs_df: DataFrame, master_hosts: Sequence[str], master_first_ts: int | None) -> DataFrame:
    """One row per run: [start, end), count, bytes, what each side holds, and the evidence."""
    grouped = runs_df.groupBy("side", "category", "run").agg(
        F.min("phys_offset").alias("start_num"),
        F.max(F.col("phys_offset") + F.col("size")).alias("end_num"),
        F.count(F.lit(1)).alias("count"),
        F.sum("size").alias("bytes"),
        F.expr("bit_xor(digest)").alias("own_digest"),
        F.expr("bit_xor(other_digest)").alias("other_xor"),
        F.count("other_digest").alias("other_count"),
        F.min_by("uniq_key", "phys_offset").alias("first_uniq_key"),
        F.max_by("uniq_key", "phys_offset").alias("last_uniq_key"),
        F.min("store_ts").alias("store_ts_min"),
        F.max("store_ts").alias("store_ts_max"),
        F.sort_array(F.collect_set("store_host")).alias("store_hosts"),
        F.sort_array(F.collect_set("topic")).alias("topics"),
        F.max("foreign_host").alias("foreign_host"),
        F.max("older_than_master").alias("older_than_master"),
        F.min("original_offset").alias("original_offset"),
    )
    other = F.when(F.col("other_count") > 0, _hex(F.col("other_xor")))
    own = _hex(F.col("own_digest"))
    is_master = F.col("side") == "master"
    stale = F.col("category") == "stale_replica_data"
    hosts = F.array(*[F.lit(h) for h in master_hosts]) if master_hosts else F.array().cast("array<string>")
    evidence = F.struct(
        F.col("side"),
        F.col("first_uniq_key"),
        F.col("last_uniq_key"),
        F.col("store_ts_min"),
        F.col("store_ts_max"),
        F.col("store_hosts"),
        F.col("topics"),
        F.when(stale, F.lit(True)).alias("other_master"),
        F.when(stale, F.col("foreign_host")).alias("foreign_store_host"),
        F.when(stale, F.col("older_than_master")).alias("older_than_master"),
        F.when(stale, hosts).alias("master_store_hosts"),
        F.when(stale, F.lit(master_first_ts)).alias("master_first_store_ts"),
        F.when(F.col("category") == "duplicate_range", F.col("original_offset")).alias("first_original_offset"),
    )
    return grouped.select(
        "category",
        "start_num",
        "end_num",
        "count",
        "bytes",
        F.when(is_master, own).otherwise(other).alias("master_digest"),
        F.when(is_master, other).otherwise(own).alias("replica_digest"),
        F.to_json(evidence).alias("detail"),
    )


def findings_frame(ranges_df: DataFrame) -> DataFrame:
    """Range rows as rows of the findings schema (check `commitlog`): offsets as the locations."""
    return to_findings(
        ranges_df,
        check="commitlog",
        category=F.col("category"),
        start=F.col("start_num").cast("string"),
        end=F.col("end_num").cast("string"),
    )
