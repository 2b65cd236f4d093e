"""Read one binlog record's leading arguments back from its file, and the expiry they carry.

The scan (audit/sources/pika/binlog.py) keeps a record's command and key, not its other arguments. To say
whether a write was already expired when a side logged it, the layer diagnosis needs the expiry argument
of the few records that last wrote a diverged key, so it re-reads just those records: from the record's
first header at `start` to `end` in `path`, the fragments are joined (same framing as the module
docstring of binlog.py: 8-byte headers, Full/First/Middle/Last, a block's last < 8 bytes are a trailer)
and the item's RESP content parsed up to its first few arguments.

The file may have changed since the scan (purged, or a slave's file recreated by a full sync): when the
whole content is read its xxh3 is compared with the scan's `digest`, and a mismatch gives no value.
Records over `MAX_VERIFIED` bytes are read only up to their first `HEAD_BYTES` (memory stays bounded) and
are reported unverified.

Commands whose expiry is read (argument index, unit, absolute or relative to the record's exec_time):

| command    | argument      | meaning                                                   |
|------------|---------------|-----------------------------------------------------------|
| pksetexat  | 2 (seconds)   | absolute unix time; Pika logs SETEX / SET EX as this      |
| expireat   | 2 (seconds)   | absolute                                                  |
| pexpireat  | 2 (ms)        | absolute                                                  |
| setex      | 2 (seconds)   | relative to exec_time                                     |
| psetex     | 2 (ms)        | relative                                                  |
| expire     | 2 (seconds)   | relative                                                  |
| pexpire    | 2 (ms)        | relative                                                  |
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from audit.errors import CorruptRecordError
from audit.sources.pika.binlog_format import BLOCK_SIZE, HEADER_SIZE, ITEM_HEADER_SIZE, PHYSICAL_HEADER, content_digest

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

MAX_VERIFIED = 16 << 20  # read and verify whole records up to this size
HEAD_BYTES = 2 * BLOCK_SIZE  # else only this much: the expiry argument comes before the value
_FULL, _LAST = 1, 4


@dataclass(frozen=True, slots=True)
class Expiry:
    arg: int  # index of the RESP argument holding it
    ms_per_unit: int  # 1000 for seconds, 1 for milliseconds
    absolute: bool  # absolute unix time, else relative to the record's exec_time


EXPIRY_COMMANDS: dict[str, Expiry] = {
    "pksetexat": Expiry(2, 1000, True),
    "expireat": Expiry(2, 1000, True),
    "pexpireat": Expiry(2, 1, True),
    "setex": Expiry(2, 1000, False),
    "psetex": Expiry(2, 1, False),
    "expire": Expiry(2, 1000, False),
    "pexpire": Expiry(2, 1, False),
}


def join_fragments(data: bytes, start: int) -> bytes:
    """The item bytes of the record whose first header is at file offset `start`; `data` = file[start:...].

    Stops at the record's Full or Last fragment, or at the end of `data` (a head read of a big record).
    """
    parts: list[bytes] = []
    i = 0
    while i + HEADER_SIZE <= len(data):
        left = BLOCK_SIZE - (start + i) % BLOCK_SIZE
        if left < HEADER_SIZE:  # a trailer: the writer zero-fills it and goes on in the next block
            i += left
            continue
        lo, hi, _, kind = PHYSICAL_HEADER.unpack_from(data, i)
        n = lo | hi << 16
        parts.append(data[i + HEADER_SIZE : i + HEADER_SIZE + n])
        i += HEADER_SIZE + n
        if kind in (_FULL, _LAST):
            return b"".join(parts)
        if n == 0 and kind != 2:  # only a First fragment may be empty (at exactly 8 bytes left)
            raise CorruptRecordError(f"empty fragment of type {kind}", offset=start + i)
    return b"".join(parts)


def resp_args(content: bytes, limit: int) -> list[bytes]:
    """The first `limit` bulk strings of a RESP array (fewer when the content holds fewer or is cut)."""
    if not content.startswith(b"*"):
        raise CorruptRecordError("content is not a RESP array", offset=0)
    out: list[bytes] = []
    p = content.find(b"\r\n") + 2
    while len(out) < limit and p > 1 and content.startswith(b"$", p):
        nl = content.find(b"\r\n", p)
        if nl < 0:
            break
        n = int(content[p + 1 : nl])
        s = nl + 2
        if s + n > len(content):
            break
        out.append(content[s : s + n])
        p = s + n + 2
    return out


def expire_at_ms(command: str, args: list[bytes], exec_time: int) -> int | None:
    """The absolute expiry (unix ms) a record sets, per EXPIRY_COMMANDS; None when it sets none."""
    rule = EXPIRY_COMMANDS.get(command)
    if rule is None or len(args) <= rule.arg or not args[rule.arg].lstrip(b"-").isdigit():
        return None
    value = int(args[rule.arg]) * rule.ms_per_unit
    return value if rule.absolute else exec_time * 1000 + value


def read_expiry(path: str, start: int, end: int, digest: int | None, command: str, exec_time: int) -> dict[str, Any]:
    """`expire_at_ms` and whether the bytes read were verified against the scan's digest."""
    size = end - start
    whole = size <= MAX_VERIFIED
    try:
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(size if whole else HEAD_BYTES)
        item = join_fragments(data, start)
        content = item[ITEM_HEADER_SIZE:]
        verified = whole and digest is not None and content_digest(content) == digest
        if whole and not verified:
            return {"expire_at_ms": None, "args_read": "changed since the scan"}
        rule = EXPIRY_COMMANDS[command]
        value = expire_at_ms(command, resp_args(content, rule.arg + 1), exec_time)
        return {"expire_at_ms": value, "args_read": "verified" if verified else "head only, unverified"}
    except (OSError, CorruptRecordError, ValueError) as e:
        return {"expire_at_ms": None, "args_read": f"unreadable: {e}"}


EXPIRY_FIELDS = (("expire_at_ms", pa.int64()), ("args_read", pa.string()))
_READ = ("path", "start", "end", "digest", "command", "exec_time")


def _expiry_partition(prefixes: tuple[str, ...], batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Each row as is plus, per prefix, its record's expiry; only records whose command sets one are read."""
    for batch in batches:
        cols = {f"{p}{c}": batch.column(f"{p}{c}").to_pylist() for p in prefixes for c in _READ}
        reads = [
            (cols[f"{p}path"][k], cols[f"{p}start"][k], p, k)
            for p in prefixes
            for k in range(batch.num_rows)
            if cols[f"{p}command"][k] in EXPIRY_COMMANDS and cols[f"{p}path"][k] is not None
        ]
        found: dict[tuple[str, int], dict[str, Any]] = {}
        for path, start, p, k in sorted(reads):  # one forward pass over each file
            args = (cols[f"{p}end"][k], cols[f"{p}digest"][k], cols[f"{p}command"][k], cols[f"{p}exec_time"][k])
            found[p, k] = read_expiry(path, start, *args)
        arrays, schema = list(batch.columns), batch.schema
        for p in prefixes:
            for name, kind in EXPIRY_FIELDS:
                arrays.append(pa.array([found.get((p, k), {}).get(name) for k in range(batch.num_rows)], kind))
                schema = schema.append(pa.field(f"{p}{name}", kind))
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def with_expiry(writes: DataFrame, prefixes: tuple[str, ...] = ("",)) -> DataFrame:
    """Add `<p>expire_at_ms` and `<p>args_read` for each prefix p to rows holding a record's `<p>path`,
    `<p>start`, `<p>end`, `<p>digest`, `<p>command`, `<p>exec_time` (one pass; nulls where the command sets
    no expiry). Only those records' bytes are read."""
    import functools

    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    if any(f"{p}path" not in writes.columns for p in prefixes):
        for p in prefixes:
            writes = writes.withColumn(f"{p}expire_at_ms", F.lit(None).cast("long")).withColumn(
                f"{p}args_read", F.lit("no file path in the scan")
            )
        return writes
    out = to_arrow_schema(writes.schema)
    for p in prefixes:
        for name, kind in EXPIRY_FIELDS:
            out = out.append(pa.field(f"{p}{name}", kind))
    return writes.mapInArrow(functools.partial(_expiry_partition, prefixes), from_arrow_schema(out))
