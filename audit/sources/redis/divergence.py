"""What a redis keyspace audit adds to its findings and leaves for people, whatever the topology.

- **Fields** (`detail.fields`): for the first keys still differing after the recheck (a hash, set, zset,
  list or string present on both sides with one type), which fields, members, indexes or byte offset
  differ, read in pages on both sides (audit/sources/redis/fields.py); short values shown unless the
  pair sets `show_values: false`.
- **The repair plan** `repair/<pair>.txt` (audit/sources/redis/repair.py), never executed, linked from
  the summary as an artifact.
- **Notes** for the summary: the compare mode, and what the key filter left out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import redis
from hiredis import ReplyError

from audit.kernel.context import StageContext
from audit.sources.redis.fields import field_diff
from audit.sources.redis.resp import RespPipe

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

PipesFor = Callable[[int, bytes], tuple[RespPipe, RespPipe]]
"""(db, key) -> the master's and the replica's pipe, connected to the nodes holding the key, db selected."""

COMPARE_MEANING = {
    "full": "types, values (digests), element counts and TTLs",
    "length": "types, element counts and TTLs; values of equal length are not compared",
    "keys": "presence only; types, values and TTLs are not compared",
}


def selecting(master: RespPipe, replica: RespPipe) -> PipesFor:
    """Two single-server pipes: SELECT the key's db on both."""

    def pipes(db: int, _key: bytes) -> tuple[RespPipe, RespPipe]:
        for p in (master, replica):
            p.select(db)
        return master, replica

    return pipes


def field_evidence(
    rows: Iterable[Any], pipes_for: PipesFor, *, show_values: bool, page: int
) -> list[tuple[int, bytes, str]]:
    """(db, key, `detail.fields` JSON) for the value mismatches among `rows` (survivor rows: db, key,
    category, m_type, r_type). A key that cannot be read now gets the error instead of fields."""
    out = []
    for row in rows:
        if row["category"] != "value_mismatch" or row["m_type"] != row["r_type"] or row["m_type"] is None:
            continue
        db, key = int(row["db"]), bytes(row["key"])
        try:
            found = field_diff(*pipes_for(db, key), key, row["m_type"], show_values=show_values, page=page)
        except (ReplyError, redis.RedisError, OSError, ValueError) as e:
            out.append((db, key, json.dumps({"error": str(e)[:200]})))
            continue
        if found is not None:
            out.append((db, key, json.dumps(found.as_evidence())))
    return out


def first_value_mismatches(survivors: DataFrame, limit: int) -> list[Any]:
    """The rows :func:`field_evidence` looks at: the first `limit` value mismatches."""
    if limit <= 0:
        return []
    cols = ["db", "key", "category", "m_type", "r_type"]
    return survivors.where("category = 'value_mismatch'").select(*cols).limit(limit).collect()


def spliced(detail: str | None, fields: str) -> str | None:
    """`fields` added to a finding's detail JSON object as `"fields"`: its closing brace is replaced."""
    return None if detail is None else detail[:-1] + ',"fields":' + fields + "}"


def with_fields_table(findings: pa.Table, evidence: list[tuple[int, bytes, str]]) -> pa.Table:
    """:func:`with_fields` on findings already in the driver (an Arrow table): no Spark join for a few rows."""
    if not evidence:
        return findings
    by_key = {(db, key): fields for db, key, fields in evidence}
    rows = zip(findings["db"].to_pylist(), findings["key"].to_pylist(), findings["detail"].to_pylist(), strict=True)
    details = [d if (f := by_key.get((db, key))) is None else spliced(d, f) for db, key, d in rows]
    at = findings.schema.get_field_index("detail")
    return findings.set_column(at, findings.schema.field(at), pa.array(details, findings.schema.field(at).type))


def with_fields(findings: DataFrame, evidence: list[tuple[int, bytes, str]]) -> DataFrame:
    """`detail.fields` spliced into the findings' detail JSON (an object: its closing brace is replaced, as
    :func:`spliced` does)."""
    if not evidence:
        return findings
    from pyspark.sql import functions as F

    ev = findings.sparkSession.createDataFrame(evidence, "db int, key binary, fields string")
    detail = F.when(F.col("fields").isNull(), F.col("detail")).otherwise(
        F.concat(F.expr("substring(detail, 1, length(detail) - 1)"), F.lit(',"fields":'), F.col("fields"), F.lit("}"))
    )
    joined = findings.join(ev, on=["db", "key"], how="left")
    return joined.withColumn("detail", detail).select(*findings.columns)


def write_repair(ctx: StageContext, findings: DataFrame | pa.Table, extra: Mapping[str, Any] | None = None) -> None:
    """repair/<pair>.txt from the keyspace findings (a Spark frame, or an Arrow table already in the
    driver); linked as an artifact when it lists any key."""
    from audit.sources.redis.repair import FLEET_REPLICAS, write_plan

    columns = ["category", "db", "key"]
    replica = ctx.pair.display_endpoint("replica")
    if isinstance(findings, pa.Table):
        rows: Iterable[Any] = findings.select(columns).to_pylist()
    elif replica:
        rows = findings.select(*columns).toLocalIterator()
    else:  # a fleet: each line under the replica (and shard) it was compared on, in that order
        rows = _with_target(findings).select(*columns, "target").orderBy("target").toLocalIterator()
    counts = write_plan(
        rows,
        ctx.run.root,
        pair=ctx.pair.name,
        run_id=ctx.run.run_id,
        master=ctx.pair.display_endpoint("master"),
        replica=replica or FLEET_REPLICAS,
        extra=extra,
    )
    ctx.metrics.update(repair_resync=counts.resync, repair_delete=counts.delete)
    if counts.resync or counts.delete:
        ctx.state.artifacts["repair plan"] = str(counts.path.relative_to(ctx.run.root))
    else:
        counts.path.unlink()


def _with_target(findings: DataFrame) -> DataFrame:
    """A fleet's findings with `target`: "HOST:PORT (shard NAME)" from their detail's replica_node and shard."""
    from pyspark.sql import functions as F

    replica, shard = (F.get_json_object("detail", f"$.{k}") for k in ("replica_node", "shard"))
    target = F.when(shard.isNull(), replica).otherwise(F.concat(replica, F.lit(" (shard "), shard, F.lit(")")))
    return findings.withColumn("target", target)


def compare_note(mode: str) -> str:
    return f"compare: {mode} ({COMPARE_MEANING.get(mode, mode)})"


def compare_limit(mode: str) -> str | None:
    """What a compare mode leaves out, for the pair's limits; None for `full`."""
    return None if mode == "full" else f"values not compared: {compare_note(mode)}"


def filter_note(spec: Mapping[str, Any], filtered: Mapping[str, int], match: str | None) -> str:
    """One sentence: the key filter and how many keys each side left out."""
    parts = [f"include {spec.get('include') or ['*']}"]
    if spec.get("exclude"):
        parts.append(f"exclude {spec['exclude']}")
    counts = ", ".join(f"{n} on the {side}" for side, n in filtered.items())
    how = f" (SCAN MATCH {match!r}: the server's key count minus the keys scanned, an estimate)" if match else ""
    return f"keys filter {' '.join(parts)}: {counts} left out{how}"


def filtered_out(meta: Mapping[str, Any]) -> int:
    """Keys a snapshot's key filter left out (snapshot.json of a server, or a fleet side's)."""
    kf = meta.get("key_filter")
    if isinstance(kf, dict):
        return int(kf.get("filtered_out") or 0)
    return int((meta.get("stats") or {}).get("filtered_out") or 0)
