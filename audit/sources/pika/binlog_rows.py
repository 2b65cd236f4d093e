"""The rows of one Pika binlog file as columns, built while the scanner walks it (audit/sources/pika/binlog.py).

A good record costs the walk a few list appends: its start, end, raw 34-byte item header, digest,
command and key. :meth:`BinlogRows.batch` decodes every item header at once with one numpy pass and
builds the Arrow batch of RECORD_SCHEMA. Rows that are not good records (padding, damage, a torn tail)
are rare, so their kind and detail are kept aside. The layout is in audit/sources/pika/binlog_format.py.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pyarrow as pa
import xxhash

from audit.sources.pika.binlog_format import (
    ITEM_HEADER_SIZE,
    ITEM_TYPE_FIRST,
    KEY_PREFIX_MAX,
    RECORD_SCHEMA,
    ROW_CORRUPT,
    ROW_PADDING,
    ROW_RECORD,
    ROW_TORN,
)
from audit.sources.pika.binlog_resp import BAD_HEAD, PREFIX_PARTS, Head, command_name, last_arg_header, resp_head

h64 = xxhash.xxh3_64_intdigest
KEYLESS = frozenset({"padding"})  # commands whose second argument is not a key
ITEM_CHECK = struct.Struct(
    "<H"  # item type
    "28x"  # exec_time, term, logic_id, filenum, offset: decoded later, in one numpy pass
    "I"  # content_len
)

ITEM_DTYPE = np.dtype(
    [  # ITEM_HEADER as a packed numpy record
        ("type", "<u2"),
        ("exec_time", "<u4"),
        ("term", "<u4"),
        ("logic_id", "<u8"),
        ("prev_filenum", "<u4"),
        ("prev_offset", "<u8"),
        ("content_len", "<u4"),
    ]
)
assert ITEM_DTYPE.itemsize == ITEM_HEADER_SIZE
NO_HEADER = bytes(ITEM_HEADER_SIZE)
KIND_CODE = {ROW_RECORD: 0, ROW_PADDING: 1, ROW_CORRUPT: 2, ROW_TORN: 3}
KIND_NAMES = pa.array(list(KIND_CODE), pa.string())


class BinlogRows:
    """The columns of one file's rows, and the caches that make decoding a repeated command cheap."""

    def __init__(self, db: int, filenum: int) -> None:
        self.db = db
        self.filenum = filenum
        self.start: list[int] = []
        self.end: list[int] = []
        self.headers = bytearray()  # ITEM_HEADER_SIZE bytes per row, zeros for rows without an item
        self.digest: list[int] = []  # unsigned; 0 for rows without an item
        self.command: list[str | None] = []
        self.key: list[bytes | None] = []
        self.special: list[tuple[int, int, str | None, bool]] = []  # (row, kind code, detail, has item fields)
        self.names: dict[bytes, tuple[str, bool]] = {}  # raw command -> (lower-cased name, has a key)
        self.heads: dict[bytes, Head] = {}  # RESP prefix up to the key -> what it says (BAD_HEAD if bad)
        self.value_heads: dict[int, bytes] = {}  # size of a last bulk string -> the `$N\r\n` it starts with

    def _name(self, raw: bytes) -> tuple[str, bool]:
        got = self.names.get(raw)
        if got is None:
            name = command_name(raw)
            got = (name, name not in KEYLESS)
            if len(self.names) < 4096:
                self.names[raw] = got
        return got

    def _last_arg(self, size: int) -> bytes:
        got = self.value_heads[size] = last_arg_header(size)
        return got

    def _head(self, prefix: bytes) -> Head:
        """Decode a `*N\\r\\n$L\\r\\ncommand\\r\\n$K\\r\\n` prefix (N >= 2) once; BAD_HEAD when it is not one."""
        m = PREFIX_PARTS.fullmatch(prefix)
        got = BAD_HEAD
        if m is not None and int(m.group(1)) >= 2 and int(m.group(2)) == len(m.group(3)):
            name, has_key = self._name(m.group(3))
            got = (name, has_key, int(m.group(4)), int(m.group(1)) - 2)
        if len(self.heads) < 65536:
            self.heads[prefix] = got
        return got

    def _row(self, kind: str, start: int, end: int, detail: str | None) -> None:
        """A row with no item fields: padding, damage, torn tail."""
        self.special.append((len(self.start), KIND_CODE[kind], detail, False))
        self.start.append(start)
        self.end.append(end)
        self.headers += NO_HEADER
        self.digest.append(0)
        self.command.append(None)
        self.key.append(None)

    def _item(self, item: bytes, start: int, end: int) -> str | None:
        """Decode one reassembled item and add its row; returns the damage detail when the header fails."""
        n = len(item)
        if n < ITEM_HEADER_SIZE:
            return f"item of {n} bytes is shorter than its {ITEM_HEADER_SIZE}-byte header"
        typ, clen = ITEM_CHECK.unpack_from(item, 0)
        if typ != ITEM_TYPE_FIRST:
            return f"item header type {typ} != {ITEM_TYPE_FIRST}"
        if clen != n - ITEM_HEADER_SIZE:
            return f"content_len {clen} != {n - ITEM_HEADER_SIZE} remaining"
        head = resp_head(item, ITEM_HEADER_SIZE, n)
        if head is None:
            self.special.append((len(self.start), KIND_CODE[ROW_CORRUPT], "RESP content unparseable", True))
            self.command.append(None)
            self.key.append(None)
        else:
            command, has_key = self._name(head[0])
            self.command.append(command)
            self.key.append(
                item[head[1] : head[1] + min(head[2], KEY_PREFIX_MAX)] if has_key and head[1] >= 0 else None
            )
        self.start.append(start)
        self.end.append(end)
        self.headers += item[:ITEM_HEADER_SIZE]
        self.digest.append(h64(memoryview(item)[ITEM_HEADER_SIZE:]))
        return None

    def batch(self) -> pa.RecordBatch:
        n = len(self.start)
        kind = np.zeros(n, dtype=np.int8)  # KIND_CODE[ROW_RECORD] == 0
        has_item = np.ones(n, dtype=bool)
        detail: list[str | None] | None = None
        if self.special:
            detail = [None] * n
            for row, code, why, item in self.special:
                kind[row] = code
                detail[row] = why
                has_item[row] = item
        no_item = None if has_item.all() else ~has_item
        h = np.frombuffer(self.headers, dtype=ITEM_DTYPE, count=n)

        def col(values: np.ndarray[Any, Any]) -> pa.Array:
            return pa.array(values.astype(np.int64, copy=False), mask=no_item)

        return pa.RecordBatch.from_arrays(
            [
                KIND_NAMES.take(pa.array(kind)),
                pa.array(np.full(n, self.db, dtype=np.int32)),
                pa.array(np.full(n, self.filenum, dtype=np.int32)),
                pa.array(np.array(self.start, dtype=np.int64)),
                pa.array(np.array(self.end, dtype=np.int64)),
                col(h["exec_time"]),
                col(h["term"]),
                col(h["logic_id"].view(np.int64)),
                col(h["prev_filenum"]),
                col(h["prev_offset"].view(np.int64)),
                col(h["content_len"]),
                col(np.array(self.digest, dtype=np.uint64).view(np.int64)),
                pa.array(self.command, pa.string()),
                pa.array(self.key, pa.binary()),
                pa.array(detail, pa.string()) if detail is not None else pa.nulls(n, pa.string()),
            ],
            schema=RECORD_SCHEMA,
        )
