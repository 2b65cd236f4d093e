"""Keyspace findings grouped by the layer they were lost in and the command that last wrote them.

When one command explains a set of diverged keys, an operator should see it at once ("900 keys written by
pksetexat are shipped but absent on the slave") instead of 900 rows. The groups come from the `layer` and
`last_command` fields that audit/sources/pika/layers.py writes into each finding's `detail`.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from audit.sources.pika.layers import key_text

SAMPLE_KEYS = 5
_GROUP = ["layer", "command", "category", "diagnosis"]

# (verb for one key, verb for several, the rest of the sentence)
_PHRASE = {
    "not_shipped": ("was", "were", "logged on the master but never reached the slave's binlog"),
    "not_yet_shipped": ("is", "are", "logged on the master and not yet in the slave's binlog (lag, not loss)"),
    "replayed": ("was", "were", "written more times in the slave's binlog than in the master's"),
    "before_slave_binlog": ("was", "were", "last written before the slave's binlog starts (its last full sync)"),
    "slave_only": ("was", "were", "written in the slave's binlog and never in the master's"),
    "not_logged": ("has", "have", "no record in the master's binlog, which is complete: never logged"),
    "older_than_binlog": ("was", "were", "last written before the oldest binlog file the master keeps"),
}
_NOT_APPLIED = {
    "missing_on_replica": "shipped but absent on the slave",
    "extra_on_replica": "shipped but still present on the slave",
}


@dataclass(frozen=True)
class LayerGroup:
    """Keyspace findings with the same layer, last command, category and diagnosis."""

    layer: str
    command: str | None
    category: str
    diagnosis: str | None
    count: int
    per_db: dict[int, int] = field(default_factory=dict)
    sample_keys: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """One line for a summary or report, e.g. `900 keys written by pksetexat are shipped but absent on
        the slave (missing_on_replica; db0: 300, db1: 300, db2: 300)`."""
        if self.layer == "not_applied":
            one, many, rest = "is", "are", _NOT_APPLIED.get(self.category, "shipped but different on the slave")
        else:
            one, many, rest = _PHRASE.get(self.layer, ("is", "are", f"in layer {self.layer}"))
        who = f" written by {self.command}" if self.command else ""
        dbs = ", ".join(f"db{d}: {n}" for d, n in sorted(self.per_db.items()))
        if self.count == 1:
            return f"1 key{who} {one} {rest} ({self.category}; {dbs})"
        return f"{self.count} keys{who} {many} {rest} ({self.category}; {dbs})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "layer": self.layer,
            "command": self.command,
            "category": self.category,
            "diagnosis": self.diagnosis,
            "count": self.count,
            "per_db": {str(d): n for d, n in sorted(self.per_db.items())},
            "sample_keys": self.sample_keys,
            "text": self.text,
        }


def group_by_command(findings: DataFrame, sample: int = SAMPLE_KEYS) -> DataFrame:
    """Findings that carry a layer, counted by (layer, command, category, diagnosis).

    Columns: layer, command, category, diagnosis, count, per_db (map db -> count), sample_keys (the first
    `sample` keys in byte order, as text). Largest groups first.
    """
    rows = findings.select(
        F.get_json_object("detail", "$.layer").alias("layer"),
        F.get_json_object("detail", "$.last_command").alias("command"),
        "category",
        "diagnosis",
        "db",
        "key",
    ).where(F.col("layer").isNotNull())
    nth = F.row_number().over(Window.partitionBy(*_GROUP).orderBy("key"))
    first = F.when(F.col("nth") <= sample, F.struct("nth", key_text(F.col("key")).alias("k")))
    per_db = (
        rows.withColumn("nth", nth)
        .groupBy(*_GROUP, "db")  # group keys may be null (no command, no diagnosis): no join on them
        .agg(F.count("*").alias("n"), F.collect_list(first).alias("s"))
    )
    groups = per_db.groupBy(*_GROUP).agg(
        F.sum("n").alias("count"),
        F.map_from_entries(F.collect_list(F.struct("db", "n"))).alias("per_db"),
        F.array_sort(F.flatten(F.collect_list("s"))).alias("s"),
    )
    sample_keys = F.transform("s", lambda x: x["k"]).alias("sample_keys")
    return groups.select(*_GROUP, "count", "per_db", sample_keys).orderBy(F.desc("count"), *_GROUP)


def collect_groups(groups: DataFrame) -> list[LayerGroup]:
    """The rows of `group_by_command` as LayerGroup values."""
    return [
        LayerGroup(
            layer=r["layer"],
            command=r["command"],
            category=r["category"],
            diagnosis=r["diagnosis"],
            count=int(r["count"]),
            per_db={int(d): int(n) for d, n in (r["per_db"] or {}).items()},
            sample_keys=list(r["sample_keys"] or []),
        )
        for r in groups.collect()
    ]


def display_key(key: bytes) -> str:
    """`key_text` in Python: UTF-8 as is, anything else as 0x-hex."""
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + key.hex()


_Group = tuple[str, str | None, str, str | None]


def layer_groups(findings_path: str | Path, sample: int = SAMPLE_KEYS) -> list[LayerGroup]:
    """The groups of a pair's findings Parquet (`findings.parquet/<pair>.parquet`), without Spark: the file
    is streamed in batches and only counts and the `sample` smallest keys per group are kept. [] when the
    file is absent. Same groups, counts and samples as `group_by_command`."""
    import pyarrow.dataset as ds

    if not Path(findings_path).exists():
        return []
    counts: dict[_Group, dict[int, int]] = {}
    smallest: dict[_Group, list[bytes]] = {}
    columns = ["category", "diagnosis", "db", "key", "detail"]
    for batch in ds.dataset(findings_path, format="parquet").to_batches(columns=columns, batch_size=10_000):
        for row in batch.to_pylist():
            if '"layer"' not in (row["detail"] or ""):
                continue
            detail = json.loads(row["detail"])
            if detail.get("layer") is None:
                continue
            group = (detail["layer"], detail.get("last_command"), row["category"], row["diagnosis"])
            per_db = counts.setdefault(group, {})
            per_db[row["db"]] = per_db.get(row["db"], 0) + 1
            keys = smallest.setdefault(group, [])
            if row["key"] is not None and (len(keys) < sample or row["key"] < keys[-1]):
                bisect.insort(keys, row["key"])
                del keys[sample:]
    groups = [
        LayerGroup(*g, count=sum(d.values()), per_db=d, sample_keys=[display_key(k) for k in smallest[g]])
        for g, d in counts.items()
    ]
    return sorted(groups, key=lambda x: (-x.count, x.layer, x.command or "", x.category, x.diagnosis or ""))


def render_groups(groups: list[LayerGroup]) -> list[str]:
    """The lines a summary or report shows, largest group first."""
    return [g.text for g in groups]
