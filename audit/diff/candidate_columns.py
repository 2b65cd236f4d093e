"""The keyspace diff's second pass in the driver: a few candidates get their full columns with Arrow.

The diff's first pass (audit/diff/keyspace.py) writes each candidate's key, category and the read time
of each side's latest read. The second pass adds every column of those reads. As a Spark job it reads
both snapshots again, and in the fresh JVM of a run that job costs 1-2 s whatever the number of
candidates (bench/e2e_bench.py; docs/performance.md). When the candidates are few and the files are on
this machine, this module does the same in the driver: Arrow reads the snapshots' key columns, keeps the
rows of the candidates' keys, and the rest is a lookup per candidate. The output has the Spark pass's
columns, types and rows (tests/unit/test_keyspace_diff.py and test_candidate_columns.py hold them equal).
"""

from __future__ import annotations

import glob
import shutil
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

MAX_DRIVER_CANDIDATES = 10_000
"""Up to this many candidates the second pass runs in the driver (their rows, not the snapshots, are held)."""

SIDE_PREFIXES = ("m_", "r_")
"""The master's and the replica's column prefixes, in the candidates' column order (both passes use it)."""

_Read = dict[str, object]


_ARROW_TYPES = {"int": pa.int32(), "bigint": pa.int64(), "string": pa.string(), "binary": pa.binary()}


def arrow_schema(ddl: str) -> pa.Schema:
    """The Arrow schema Spark reads a table of `ddl` ("db int, key binary, ...") as (the types above only)."""
    fields = [f.split() for f in ddl.split(",")]
    return pa.schema([pa.field(name, _ARROW_TYPES[type_]) for name, type_ in fields])


def is_local(path: str) -> bool:
    return "://" not in path


def expand_braces(pattern: str) -> list[str]:
    """A Hadoop glob's `{a,b}` alternatives as plain globs (Python's glob has no braces)."""
    start = pattern.find("{")
    if start < 0:
        return [pattern]
    depth, parts, last = 0, [], start + 1
    for i in range(start, len(pattern)):
        ch = pattern[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                parts.append(pattern[last:i])
                head, tail = pattern[:start], pattern[i + 1 :]
                return [e for part in parts for e in expand_braces(head + part + tail)]
        elif ch == "," and depth == 1:
            parts.append(pattern[last:i])
            last = i + 1
    return [pattern]  # no closing brace: a literal "{"


def _dataset(path: str, schema: pa.Schema) -> ds.Dataset:
    """The Parquet files at `path`, a file, a folder or a Hadoop glob as Spark reads it, read as `schema`."""
    if not (glob.has_magic(path) or "{" in path):
        return ds.dataset(path, schema=schema, format="parquet")
    files = sorted({f for p in expand_braces(path) for f in glob.glob(p)})
    return ds.dataset(files, schema=schema, format="parquet")


def _side_reads(
    path: str, schema: pa.Schema, keys: pa.Array, columns: Sequence[str]
) -> dict[tuple[int, bytes, int], _Read]:
    """The reads of `keys` in one side's snapshot, by (db, key, read_at_ms); the first of equal ones."""
    dataset = _dataset(path, schema)
    # one batch at a time: the scan holds a batch of the snapshot, whatever its size (about 30 MB less
    # peak RSS than Arrow's default read-ahead on a 1M-key snapshot, at the same speed)
    scanner = dataset.scanner(
        columns=["db", "key", *columns], filter=pc.field("key").isin(keys), batch_readahead=1, fragment_readahead=1
    )
    table = scanner.to_table()
    reads: dict[tuple[int, bytes, int], _Read] = {}
    for r in table.to_pylist():
        reads.setdefault((r["db"], r["key"], r["read_at_ms"]), r)
    return reads


def output_schema(candidates: pa.Schema, snapshot: pa.Schema, columns: Sequence[str]) -> pa.Schema:
    """db, key, each side's `columns` and read count, then the category: the Spark pass's order."""
    fields = [candidates.field("db"), candidates.field("key")]
    for p in SIDE_PREFIXES:
        fields += [snapshot.field(c).with_name(f"{p}{c}") for c in columns]
        fields.append(candidates.field(f"{p}reads"))
    fields.append(candidates.field("category"))
    return pa.schema([f.with_nullable(True) for f in fields])


def full_columns_in_driver(
    keys_path: str, snapshot_paths: Sequence[str], snapshot_ddl: str, columns: Sequence[str], out_path: str
) -> None:
    """Write the candidates of `keys_path` with `columns` of each side's read into `out_path` (a folder).

    The snapshots are read as `snapshot_ddl`, the schema the Spark pass gives its reader.
    """
    cands = ds.dataset(keys_path, format="parquet").to_table()
    snapshot_schema = arrow_schema(snapshot_ddl)
    schema = output_schema(cands.schema, snapshot_schema, columns)
    keys = pc.unique(cands.column("key"))
    side_reads = [_side_reads(p, snapshot_schema, keys, columns) if cands.num_rows else {} for p in snapshot_paths]
    out: dict[str, list[object]] = {name: [] for name in schema.names}
    seen: set[tuple[int, bytes]] = set()
    for c in cands.to_pylist():
        if (c["db"], c["key"]) in seen:
            continue
        seen.add((c["db"], c["key"]))
        out["db"].append(c["db"])
        out["key"].append(c["key"])
        for p, reads in zip(SIDE_PREFIXES, side_reads, strict=True):
            at = c[f"{p}read_at_ms"]
            read = reads.get((c["db"], c["key"], at)) if at is not None else None
            for col in columns:
                out[f"{p}{col}"].append(None if read is None else read[col])
            out[f"{p}reads"].append(c[f"{p}reads"])
        out["category"].append(c["category"])
    folder = Path(out_path)
    shutil.rmtree(folder, ignore_errors=True)  # overwritten, as Spark's mode("overwrite") does
    folder.mkdir(parents=True)
    pq.write_table(pa.table(out, schema=schema), folder / "part-00000.parquet", compression="zstd")
