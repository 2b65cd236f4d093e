"""Pure reader for Pika's binlog files (`write2file<N>`) and their `manifest`.

Everything below was read from OpenAtomFoundation/pika @ 218b68bb (the format is the same from v3.3
through v4.0.x); reference/pika_redis.md §1 has the notes. "L123" is a line of the file named before it.

Physical framing, LevelDB-style with no checksum anywhere (`EmitPhysicalRecord`, src/pika_binlog.cc
L243-274). A file is a sequence of 64 KiB blocks (`kBlockSize`, include/pika_define.h L337); every
fragment lies inside one block, behind an 8-byte header (`kHeaderSize`, L342; the comment at L340 states
the wrong field order):

| off | size | field                                               |
|-----|------|-----------------------------------------------------|
| 0   | 3    | fragment length n, little-endian, n <= 65528        |
| 3   | 4    | unix seconds of the write (tv_sec & 0xffffffff), LE |
| 7   | 1    | RecordType                                          |
| 8   | n    | payload                                             |

RecordType (include/pika_define.h L322-331):

| value | name      | on disk                                                                 |
|-------|-----------|-------------------------------------------------------------------------|
| 0     | Zero      | an all-zero header: the zero-filled preallocated tail, the end of the log |
| 1     | Full      | a whole item                                                            |
| 2     | First     | first fragment of an item that does not fit in what is left of the block |
| 3     | Middle    | inner fragment (fills a whole block)                                    |
| 4     | Last      | last fragment                                                           |
| 5     | Eof       | reader-internal, never written                                          |
| 6     | BadRecord | padding written by `SetProducerStatus` after a full sync (L320-406)     |
| 7     | OldRecord | reader-internal, never written                                          |

Writer rules (`Produce`, src/pika_binlog.cc L276-318): with fewer than 8 bytes left in a block the
writer zero-fills them (a trailer) and starts the next block; with exactly 8 left it writes a
zero-length First header there (the code would do the same for a Middle, but every fragment but the
last fills its block, so only a record starting there can meet exactly 8 left bytes). Pika's reader
(`ReadPhysicalRecord`, src/pika_binlog_reader.cc L135-178) jumps to the next block whenever
`65536 - pos_in_block <= 8`, so it never reads that header. A record's `start` below is where its first
header is, that zero-length one included; its `end` is the offset just after its last payload byte,
which is what Pika's reader reports and what ACKs, `INFO replication` and the manifest's pro_offset use.

Logical item, `BinlogItem` of type TypeFirst (include/pika_binlog_transverter.h L14-23,
`BinlogEncode` src/pika_binlog_transverter.cc L62-76; fixed-width little-endian):

| off | size | field                                                                          |
|-----|------|--------------------------------------------------------------------------------|
| 0   | u16  | type, always 1; `BinlogDecode` rejects anything else                           |
| 2   | u32  | exec_time: unix seconds on the node that wrote it                              |
| 6   | u32  | term                                                                           |
| 10  | u64  | logic_id: the manifest's logic_id + 1                                          |
| 18  | u32  | filenum: the producer position before this append (and before the rollover check) |
| 22  | u64  | offset: idem, so the first record of write2file<N+1> carries (N, size of N)    |
| 30  | u32  | content_len: must equal the bytes that follow                                  |
| 34  | ...  | content: the command as a RESP array, `*3\r\n$3\r\nset\r\n$1\r\nk\r\n$1\r\nv\r\n` |

Pika's padding command (`ConstructPaddingBinlog`, src/pika_binlog_transverter.cc L119-167) is an ordinary
item with every header field 0 and content `*2\r\n$7\r\npadding\r\n$NNNNN\r\n***...\r\n`; it is read as a
record with command "padding" and no key.

`manifest` (`Version::StableSave`, src/pika_binlog.cc L35-58): 64 KiB, of which the first 24 bytes are
`<IQQI` pro_num, pro_offset, logic_id, term; (pro_num, pro_offset) is the producer position.

While Pika runs a binlog file is longer than its log: the writer mmaps and fallocates it in 4 MiB steps
(src/pstd/src/env.cc L68, L342-420) and trims the zero tail only on Close. The scan stops at the first
all-zero header with only zeros after it, or at `logical_end` (the manifest's pro_offset, for the file
being written). A crash leaves a record cut anywhere with zeros after it: a header whose type byte is
still 0, or a last fragment ending in 0 (RESP ends in LF, padding in '*'), followed by nothing but
zeros, is a torn tail. An all-zero header with data somewhere after it is damage, not the end.

One row per thing found in a file (RECORD_SCHEMA):

| row_kind       | what                                                                          |
|----------------|-------------------------------------------------------------------------------|
| record         | one item                                                                      |
| padding        | one contiguous run of type-6 records                                          |
| corrupt_record | structural damage (see below); `detail` says what                             |
| torn_tail      | a record cut by the end of the data, or cut where only zeros follow           |

Structural damage is an all-zero header before more data, a fragment length over 65528 or past its
block, an unknown record type, a broken fragment sequence (Middle or Last without First, First or Full
while a record is open), or an item whose 34-byte header does not decode (too short, type != 1,
content_len != the bytes left). It becomes one `corrupt_record` row from where the damaged record (or
fragment) begins to where reading resumes: the next 64 KiB block boundary, after any Middle/Last
fragments there that continue the broken record. An item with a sound frame and header whose content is
not RESP (every argument's length and CRLF, and the argument count, are checked) is a `corrupt_record`
row too, but with its header fields and digest filled in, and reading goes on right after it since its
frame is trustworthy.

There is no checksum: a value's bytes, the fragment timestamps and the item's exec_time, term, logic_id
and producer position can change undetected (the row shows what the bytes say; the master/slave diff
compares content digests).
"""

from __future__ import annotations

import os
import re
import struct
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import xxhash

from audit.errors import CorruptRecordError

BLOCK_SIZE = 64 * 1024  # kBlockSize
HEADER_SIZE = 8  # kHeaderSize
MAX_FRAGMENT = BLOCK_SIZE - HEADER_SIZE  # a larger length is BadRecord in ReadPhysicalRecord
ITEM_HEADER_SIZE = 34  # BINLOG_ITEM_HEADER_SIZE
MANIFEST_SIZE = 64 * 1024  # Roundup(65536, page)
KEY_PREFIX_MAX = 1024  # the `key` column keeps this many bytes of the key
FILE_PREFIX = "write2file"  # kBinlogPrefix; files are write2file0, write2file1, ... (no zero padding)
MANIFEST_NAME = "manifest"  # kManifest
ITEM_TYPE_FIRST = 1  # BinlogType::TypeFirst


class RecordType(IntEnum):
    """Physical record types (include/pika_define.h L322-331)."""

    ZERO = 0
    FULL = 1
    FIRST = 2
    MIDDLE = 3
    LAST = 4
    EOF = 5
    BAD_RECORD = 6
    OLD_RECORD = 7


PHYSICAL_HEADER = struct.Struct(
    "<H"  # fragment length, low 16 bits
    "B"  # fragment length, high 8 bits
    "I"  # unix seconds of the write
    "B"  # RecordType
)
# The same 8 bytes as one little-endian word, for the hot loop:
# length = w & 0xFFFFFF, seconds = (w >> 24) & 0xFFFFFFFF, type = w >> 56; an all-zero header is w == 0.
_HEADER_WORD = struct.Struct("<Q")
_LENGTH_MASK = 0xFFFFFF
_TYPE_SHIFT = 56

ITEM_HEADER = struct.Struct(
    "<H"  # type: 1 (TypeFirst)
    "I"  # exec_time: unix seconds on the writing node
    "I"  # term (server_id in v3.0)
    "Q"  # logic_id
    "I"  # filenum: producer pro_num before this append
    "Q"  # offset: producer pro_offset before this append
    "I"  # content_len: bytes that follow
)
assert ITEM_HEADER.size == ITEM_HEADER_SIZE

MANIFEST = struct.Struct(
    "<I"  # pro_num: number N of write2file<N> being written
    "Q"  # pro_offset: end offset of the last record in it
    "Q"  # logic_id: last logic id
    "I"  # term
)

ROW_RECORD = "record"
ROW_PADDING = "padding"
ROW_CORRUPT = "corrupt_record"
ROW_TORN = "torn_tail"

RECORD_SCHEMA = pa.schema(
    [
        pa.field("row_kind", pa.string(), nullable=False),  # record | padding | corrupt_record | torn_tail
        pa.field("db", pa.int32(), nullable=False),
        pa.field("filenum", pa.int32(), nullable=False),  # N of write2file<N>
        pa.field("start", pa.int64(), nullable=False),  # offset of the record's first physical header
        pa.field("end", pa.int64(), nullable=False),  # offset after its last payload byte (Pika's reader offset)
        pa.field("exec_time", pa.int64()),
        pa.field("term", pa.int64()),
        pa.field("logic_id", pa.int64()),
        pa.field("prev_filenum", pa.int64()),  # embedded producer position before the append
        pa.field("prev_offset", pa.int64()),
        pa.field("content_len", pa.int64()),
        pa.field("digest", pa.int64()),  # xxh3_64 of the content (item bytes 34..), as a signed int64
        pa.field("command", pa.string()),  # lower-cased first RESP argument
        pa.field("key", pa.binary()),  # second RESP argument, first KEY_PREFIX_MAX bytes; null when keyless
        pa.field("detail", pa.string()),  # why a row is not a good record; null for records
    ]
)

_KEYLESS = frozenset({"padding"})  # commands whose second argument is not a key
_FILE_RE = re.compile(rf"{FILE_PREFIX}(0|[1-9][0-9]*)")
_CRLF = b"\r\n"
_B = BLOCK_SIZE
_MASK = BLOCK_SIZE - 1
_LAST_HEADER_AT = BLOCK_SIZE - HEADER_SIZE  # a header at or past this block offset is skipped by Pika's reader
_h64 = xxhash.xxh3_64_intdigest
_ITEM_CHECK = struct.Struct(
    "<H"  # item type
    "28x"  # exec_time, term, logic_id, filenum, offset: decoded later, in one numpy pass
    "I"  # content_len
)
_ITEM_DTYPE = np.dtype(
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
assert _ITEM_DTYPE.itemsize == ITEM_HEADER_SIZE
_NO_HEADER = bytes(ITEM_HEADER_SIZE)
# The hot loop's RESP check: an array of N >= 2 bulk strings, matched up to the key's bytes. The prefix
# (argument count, command, key length) repeats across a file, so what it says is decoded once per
# distinct prefix. Anything else (one argument, a CR in the command, ...) goes to `_resp_head`.
_PREFIX = re.compile(rb"\*[0-9]{1,10}\r\n\$[0-9]{1,10}\r\n[^\r]*\r\n\$[0-9]{1,10}\r\n")
_PREFIX_PARTS = re.compile(rb"\*([0-9]{1,10})\r\n\$([0-9]{1,10})\r\n([^\r]*)\r\n\$([0-9]{1,10})\r\n")
_Head = tuple[str, bool, int, int]  # command name, has a key, key length, arguments after the key
_BAD_HEAD: _Head = ("", False, 0, 0)
_ARG = re.compile(rb"\$([0-9]{1,10})\r\n")
_KIND_CODE = {ROW_RECORD: 0, ROW_PADDING: 1, ROW_CORRUPT: 2, ROW_TORN: 3}
_KIND_NAMES = pa.array(list(_KIND_CODE), pa.string())
_CUT_BY_ZEROS = "record cut where the zero-filled tail starts"
_ZERO_GAP = "zero-filled gap before more data"
_NONZERO = re.compile(rb"[^\x00]")


@dataclass(frozen=True, slots=True)
class Manifest:
    """The producer position of one DB's binlog (the first 24 bytes of `manifest`)."""

    pro_num: int
    pro_offset: int
    logic_id: int
    term: int


def parse_manifest(data: bytes | memoryview) -> Manifest:
    """Decode a `manifest` file's content; CorruptRecordError when it is shorter than 24 bytes."""
    if len(data) < MANIFEST.size:
        raise CorruptRecordError(f"manifest is {len(data)} bytes, needs {MANIFEST.size}", offset=0)
    return Manifest(*MANIFEST.unpack_from(data, 0))


def read_manifest(log_dir: Path) -> Manifest:
    """Read `<log_dir>/manifest`."""
    with open(log_dir / MANIFEST_NAME, "rb") as f:
        return parse_manifest(f.read(MANIFEST.size))


def file_number(name: str) -> int | None:
    """N for a file named `write2file<N>`, else None."""
    m = _FILE_RE.fullmatch(name)
    return int(m.group(1)) if m else None


def binlog_files(log_dir: Path) -> list[tuple[int, Path]]:
    """The `write2file<N>` files of one DB's log directory, sorted by N (manifest and context are skipped)."""
    found = []
    for p in log_dir.iterdir():
        n = file_number(p.name)
        if n is not None and p.is_file():
            found.append((n, p))
    return sorted(found)


@dataclass(frozen=True, slots=True)
class BinlogRecord:
    """One row of RECORD_SCHEMA, for convenient single-record use (the columnar scan is the fast path)."""

    row_kind: str
    db: int
    filenum: int
    start: int
    end: int
    exec_time: int | None
    term: int | None
    logic_id: int | None
    prev_filenum: int | None
    prev_offset: int | None
    content_len: int | None
    digest: int | None
    command: str | None
    key: bytes | None
    detail: str | None


_PLAIN_NAME = re.compile(rb"[\x20-\x5b\x5d-\x7e]*")  # printable ASCII but the backslash


def command_name(raw: bytes) -> str:
    """The `command` column for a command's raw bytes: lower-cased, and reversible when it is not plain text.

    Command names are ASCII and case-insensitive, so a real one reads as itself in lower case. Any other
    byte (NUL, control, non-ASCII, invalid UTF-8) is written as a backslash, ``x`` and two hex digits, and
    a backslash as two, so ``codecs.escape_decode(name.encode())[0]`` gives back the lower-cased bytes.
    """
    low = raw.lower()
    if _PLAIN_NAME.fullmatch(low):
        return low.decode("ascii")
    return "".join(chr(b) if 0x20 <= b <= 0x7E and b != 0x5C else "\\\\" if b == 0x5C else f"\\x{b:02x}" for b in low)


def _resp_head(buf: bytes, c: int, e: int) -> tuple[bytes, int, int] | None:
    """Locate the first two arguments of the RESP array in buf[c:e].

    Returns (command bytes, key start, key length), key start -1 when there is one argument, or None
    when the content is not a RESP array of bulk strings: the argument count, every length and every
    CRLF must agree with the content's end (arguments after the second are checked, not kept: the digest
    covers them). Lengths are at most 10 digits (Pika's padding command writes 5, zero-padded).
    """
    if c >= e or buf[c] != 42:  # '*'
        return None
    x = buf.find(_CRLF, c + 1, e)
    d = buf[c + 1 : x]
    if x < 0 or x - c > 11 or not d.isdigit():
        return None
    argc = int(d)
    p = x + 2
    if argc < 1 or p >= e or buf[p] != 36:  # '$'
        return None
    x = buf.find(_CRLF, p + 1, e)
    d = buf[p + 1 : x]
    if x < 0 or x - p > 11 or not d.isdigit():
        return None
    s = x + 2
    t = s + int(d)
    if t + 2 > e or not buf.startswith(_CRLF, t):
        return None
    if argc == 1:
        return (buf[s:t], -1, 0) if t + 2 == e else None
    p = t + 2
    if p >= e or buf[p] != 36:
        return None
    x = buf.find(_CRLF, p + 1, e)
    d = buf[p + 1 : x]
    if x < 0 or x - p > 11 or not d.isdigit():
        return None
    ks = x + 2
    kn = int(d)
    p = ks + kn + 2
    if p > e or not buf.startswith(_CRLF, p - 2):
        return None
    return (buf[s:t], ks, kn) if _args_end(buf, p, e, argc - 2) == e else None


_DIGIT_EDGES = [10**d + d + 5 for d in range(1, 10)]  # `$N\r\n...\r\n` of d-digit N is N + d + 5 bytes
_LEAST = [0, 0, *(10**d for d in range(1, 10))]  # the least N of d digits, by d


def _last_arg_header(size: int) -> bytes:
    """The `$N\r\n` a last bulk string of `size` bytes in all must begin with (the hot loop's check of
    the value of a three-argument command: cheaper than parsing its header)."""
    digits = bisect_right(_DIGIT_EDGES, size) + 1
    n = size - digits - 5
    return b"$%d\r\n" % n if n >= _LEAST[digits] else b"$" * (size + 1)  # else no bulk string has that size


def _args_end(buf: bytes, p: int, e: int, count: int) -> int:
    """Where `count` RESP bulk strings starting at buf[p] end (-1 if they are not well-formed by buf[e])."""
    arg = _ARG.match
    for _ in range(count):
        m = arg(buf, p, e)
        if m is None:
            return -1
        p = m.end() + int(m.group(1))
        if p + 2 > e or buf[p] != 13 or buf[p + 1] != 10:
            return -1
        p += 2
    return p


class _Scan:
    """Columns for one file and the little state that crosses chunk boundaries.

    `run` scans one buffer whose first byte is at file offset `base` (a block boundary, so `i & _MASK`
    is the offset inside the block). Good Full records are handled inline by the hot loop; everything
    else (block ends, fragments, padding, damage, the end of data) goes through `_step`.

    Per row the hot loop appends only start, end, the raw 34-byte item header (decoded in one numpy
    pass by `batch`), digest, command and key. Rows that are not good records are rare, so their kind,
    detail and null item fields are kept aside in `special`.
    """

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
        self.heads: dict[bytes, _Head] = {}  # RESP prefix up to the key -> what it says (_BAD_HEAD if bad)
        self.value_heads: dict[int, bytes] = {}  # size of a last bulk string -> the `$N\r\n` it starts with
        self.pad_start = -1  # file offset of an open padding run, carried across chunks
        self.bad_start = -1  # file offset of an open corrupt region (skipping continuations), carried
        self.bad_detail = ""
        self.done = False  # the log ended (zero header, or the end of final data)
        self.resume = 0  # file offset to continue from when a run stopped for want of data

    # -- rows -------------------------------------------------------------------------------------------

    def _name(self, raw: bytes) -> tuple[str, bool]:
        got = self.names.get(raw)
        if got is None:
            name = command_name(raw)
            got = (name, name not in _KEYLESS)
            if len(self.names) < 4096:
                self.names[raw] = got
        return got

    def _last_arg(self, size: int) -> bytes:
        got = self.value_heads[size] = _last_arg_header(size)
        return got

    def _head(self, prefix: bytes) -> _Head:
        """Decode a `*N\\r\\n$L\\r\\ncommand\\r\\n$K\\r\\n` prefix (N >= 2) once; _BAD_HEAD when it is not one."""
        m = _PREFIX_PARTS.fullmatch(prefix)
        got = _BAD_HEAD
        if m is not None and int(m.group(1)) >= 2 and int(m.group(2)) == len(m.group(3)):
            name, has_key = self._name(m.group(3))
            got = (name, has_key, int(m.group(4)), int(m.group(1)) - 2)
        if len(self.heads) < 65536:
            self.heads[prefix] = got
        return got

    def _row(self, kind: str, start: int, end: int, detail: str | None) -> None:
        """A row with no item fields: padding, damage, torn tail."""
        self.special.append((len(self.start), _KIND_CODE[kind], detail, False))
        self.start.append(start)
        self.end.append(end)
        self.headers += _NO_HEADER
        self.digest.append(0)
        self.command.append(None)
        self.key.append(None)

    def _item(self, item: bytes, start: int, end: int) -> str | None:
        """Decode one reassembled item and add its row; returns the damage detail when the header fails."""
        n = len(item)
        if n < ITEM_HEADER_SIZE:
            return f"item of {n} bytes is shorter than its {ITEM_HEADER_SIZE}-byte header"
        typ, clen = _ITEM_CHECK.unpack_from(item, 0)
        if typ != ITEM_TYPE_FIRST:
            return f"item header type {typ} != {ITEM_TYPE_FIRST}"
        if clen != n - ITEM_HEADER_SIZE:
            return f"content_len {clen} != {n - ITEM_HEADER_SIZE} remaining"
        head = _resp_head(item, ITEM_HEADER_SIZE, n)
        if head is None:
            self.special.append((len(self.start), _KIND_CODE[ROW_CORRUPT], "RESP content unparseable", True))
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
        self.digest.append(_h64(memoryview(item)[ITEM_HEADER_SIZE:]))
        return None

    def batch(self) -> pa.RecordBatch:
        n = len(self.start)
        kind = np.zeros(n, dtype=np.int8)  # _KIND_CODE[ROW_RECORD] == 0
        has_item = np.ones(n, dtype=bool)
        detail: list[str | None] | None = None
        if self.special:
            detail = [None] * n
            for row, code, why, item in self.special:
                kind[row] = code
                detail[row] = why
                has_item[row] = item
        no_item = None if has_item.all() else ~has_item
        h = np.frombuffer(self.headers, dtype=_ITEM_DTYPE, count=n)

        def col(values: np.ndarray[Any, Any]) -> pa.Array:
            return pa.array(values.astype(np.int64, copy=False), mask=no_item)

        return pa.RecordBatch.from_arrays(
            [
                _KIND_NAMES.take(pa.array(kind)),
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

    # -- scanning ---------------------------------------------------------------------------------------

    def run(self, buf: bytes, base: int, i: int, limit: int, final: bool) -> None:
        """Scan buf[i:limit]; sets `done`, or `resume` when the rest needs bytes past `limit`.

        `final` says that `limit` is the end of the data (end of file or logical_end), so a record
        crossing it is a torn tail rather than a reason to read more.
        """
        assert base % _B == 0
        if self.pad_start >= 0:
            i = self._padding(buf, base, i, limit, final)
        elif self.bad_start >= 0:
            i = self._resync(buf, base, i, limit, final)
        if i < 0:
            return
        mv = memoryview(buf)
        word = _HEADER_WORD.unpack_from
        check = _ITEM_CHECK.unpack_from
        h64 = _h64
        prefix = _PREFIX.match
        heads = self.heads
        value_head, last_arg = self.value_heads.get, self._last_arg
        head = self._head
        bad = _BAD_HEAD
        step = self._step
        headers = self.headers
        start, end, digest = self.start.append, self.end.append, self.digest.append
        command, key = self.command.append, self.key.append
        while True:
            bo = i & _MASK
            j = i + HEADER_SIZE
            if bo < _LAST_HEADER_AT and j <= limit:
                w = word(buf, i)[0]
                n = w & _LENGTH_MASK
                e = j + n
                # a Full fragment that holds at least an item header, inside its block and the data
                if w >> _TYPE_SHIFT == 1 and ITEM_HEADER_SIZE <= n <= _LAST_HEADER_AT - bo and e <= limit:
                    typ, clen = check(buf, j)
                    c = j + ITEM_HEADER_SIZE
                    if typ == 1 and clen == e - c:
                        m = prefix(buf, c, e)
                        if m is not None:
                            got = heads.get(m.group()) or head(m.group())
                            ks = m.end()
                            q = ks + got[2]  # the key's end
                            if (
                                got is not bad
                                and buf.startswith(_CRLF, q)
                                and (
                                    q + 2 == e
                                    if not got[3]
                                    # the arguments after the key, all checked; the last by its size alone
                                    else (v := q + 2 if got[3] == 1 else _args_end(buf, q + 2, e, got[3] - 1)) >= 0
                                    and buf.startswith(value_head(e - v) or last_arg(e - v), v, e)
                                    and buf.endswith(_CRLF, e - 2, e)
                                )
                            ):
                                start(base + i)
                                end(base + e)
                                headers += buf[j:c]
                                digest(h64(mv[c:e]))
                                command(got[0])
                                key(
                                    buf[ks : ks + (got[2] if got[2] < KEY_PREFIX_MAX else KEY_PREFIX_MAX)]
                                    if got[1]
                                    else None
                                )
                                i = e
                                continue
            i = step(buf, base, i, limit, final)
            if i < 0:
                return

    def _need(self, base: int, i: int) -> int:
        """Stop this run; the next one starts at file offset base + i."""
        self.resume = base + i
        return -1

    def _finish(self) -> int:
        self.done = True
        return -1

    def _step(self, buf: bytes, base: int, i: int, limit: int, final: bool) -> int:
        """Handle whatever starts at buf[i] that the hot loop did not; returns where to go on, or -1."""
        if i >= limit:
            return self._finish() if final else self._need(base, i)
        bo = i & _MASK
        left = _B - bo
        if left <= HEADER_SIZE:
            # Pika's reader jumps to the next block here. Its writer puts a zero-length First header in
            # exactly 8 left bytes: that is where such a record starts. (A Middle cannot end up there:
            # only a record's last fragment ends inside a block.)
            if left == HEADER_SIZE:
                if i + HEADER_SIZE > limit:
                    return self._end_cut(buf, base, i, limit, final)
                w: int = _HEADER_WORD.unpack_from(buf, i)[0]
                if w & _LENGTH_MASK == 0 and w >> _TYPE_SHIFT == RecordType.FIRST:
                    return self._fragmented(buf, base, i, i + HEADER_SIZE, limit, final)
                if w & _LENGTH_MASK == 0 and w >> _TYPE_SHIFT == RecordType.MIDDLE:
                    return self._corrupt(base + i, "Middle fragment without First", base, i + left, buf, limit, final)
            return i + left
        if i + HEADER_SIZE > limit:
            return self._end_cut(buf, base, i, limit, final)
        w = _HEADER_WORD.unpack_from(buf, i)[0]
        if w == 0:
            return self._zero_header(buf, base, i, limit, final)
        n = w & _LENGTH_MASK
        t = w >> _TYPE_SHIFT
        bad = self._bad_header(n, t, bo, base + i)
        if bad is not None:
            if t == RecordType.ZERO and _zeros(buf, i + 7, limit):  # a header cut before its type byte
                return self._torn_at_zeros(buf, base, i, limit, final, _CUT_BY_ZEROS)
            return self._corrupt(base + i, bad, base, i + left, buf, limit, final)
        j = i + HEADER_SIZE
        e = j + n
        if t == RecordType.FULL:
            if e > limit:
                return self._torn_or_need(base, i, i, limit, final, "fragment payload cut by the end of data")
            if _cut_by_zeros(buf, e, limit):
                return self._torn_at_zeros(buf, base, i, limit, final, _CUT_BY_ZEROS)
            miss = self._item(buf[j:e], base + i, base + e)
            if miss is not None:
                return self._corrupt(base + i, miss, base, -(-e // _B) * _B, buf, limit, final)
            return e
        if t == RecordType.FIRST:
            if e > limit:
                return self._torn_or_need(base, i, i, limit, final, "fragment payload cut by the end of data")
            return self._fragmented(buf, base, i, e, limit, final)
        if t == RecordType.BAD_RECORD:
            self.pad_start = base + i
            return self._padding(buf, base, i, limit, final)
        which = "Middle" if t == RecordType.MIDDLE else "Last"
        return self._corrupt(base + i, f"{which} fragment without First", base, i + left, buf, limit, final)

    @staticmethod
    def _bad_header(n: int, t: int, bo: int, at: int) -> str | None:
        if n > MAX_FRAGMENT:
            return f"fragment length {n} > {MAX_FRAGMENT} at block {at // _B}"
        if not RecordType.FULL <= t <= RecordType.LAST and t != RecordType.BAD_RECORD:
            return f"unknown record type {t}"
        if bo + HEADER_SIZE + n > _B:
            return f"fragment length {n} crosses the end of block {at // _B}"
        return None

    def _end_cut(self, buf: bytes, base: int, i: int, limit: int, final: bool) -> int:
        """Fewer than 8 bytes before `limit`: zeros are the end of the log, anything else a torn header."""
        if not final:
            return self._need(base, i)
        if buf.count(0, i, limit) != limit - i:
            self._row(ROW_TORN, base + i, base + limit, "record header cut by the end of data")
        return self._finish()

    def _zero_header(self, buf: bytes, base: int, i: int, limit: int, final: bool) -> int:
        """An all-zero header: the end of the log, unless data follows (then a damaged, zeroed region).

        In a chunk whose rest is zeros, what follows is not known yet: it is read again with more data.
        """
        more = _NONZERO.search(buf, i, limit)
        if more is None:
            return self._finish() if final else self._need(base, i)
        at = more.start()
        self.bad_start, self.bad_detail = base + i, _ZERO_GAP
        return self._resync(buf, base, max(i + _B - (i & _MASK), at - (at & _MASK)), limit, final)

    def _torn_at_zeros(self, buf: bytes, base: int, start: int, limit: int, final: bool, why: str) -> int:
        """The record at buf[start] is cut and only zeros follow: torn up to where the zeros begin."""
        if not final:
            return self._need(base, start)  # the zeros may end in the next chunk: read on
        self._row(ROW_TORN, base + start, base + start + max(1, len(buf[start:limit].rstrip(b"\0"))), why)
        return self._finish()

    def _torn_or_need(self, base: int, start: int, i: int, limit: int, final: bool, why: str) -> int:
        if not final:
            return self._need(base, start)
        self._row(ROW_TORN, base + start, base + limit, why)
        return self._finish()

    def _fragmented(self, buf: bytes, base: int, first: int, i: int, limit: int, final: bool) -> int:
        """Reassemble the record whose First fragment starts at buf[first] and ends at buf[i]."""
        pieces = [(first + HEADER_SIZE, i)]
        while True:
            bo = i & _MASK
            left = _B - bo
            if left <= HEADER_SIZE:
                if left == HEADER_SIZE and i + HEADER_SIZE <= limit:
                    w: int = _HEADER_WORD.unpack_from(buf, i)[0]
                    if w & _LENGTH_MASK == 0 and w >> _TYPE_SHIFT == RecordType.FIRST:
                        return self._corrupt(
                            base + first, "First fragment while a record is open", base, i + left, buf, limit, final
                        )
                if i + left > limit:  # the block end lies past the data: the record is cut there
                    return self._torn_or_need(
                        base, first, i, limit, final, "record open at the end of data (no Last fragment)"
                    )
                i += left
                continue
            if i + HEADER_SIZE > limit:
                return self._torn_or_need(
                    base, first, i, limit, final, "record open at the end of data (no Last fragment)"
                )
            w = _HEADER_WORD.unpack_from(buf, i)[0]
            n = w & _LENGTH_MASK
            t = w >> _TYPE_SHIFT
            if t == RecordType.ZERO and _zeros(buf, i + 7, limit):
                return self._torn_at_zeros(
                    buf, base, first, limit, final, "record open where the zero-filled tail starts"
                )
            if w == 0:
                return self._corrupt(base + first, _ZERO_GAP, base, i + left, buf, limit, final)
            bad = self._bad_header(n, t, bo, base + i)
            if bad is None and t not in (RecordType.MIDDLE, RecordType.LAST):
                bad = f"{RecordType(t).name.title().replace('_', '')} fragment while a record is open"
            if bad is not None:
                return self._corrupt(base + first, bad, base, i + left, buf, limit, final)
            j = i + HEADER_SIZE
            e = j + n
            if e > limit:
                return self._torn_or_need(
                    base, first, i, limit, final, "record open at the end of data (no Last fragment)"
                )
            if t == RecordType.LAST and _cut_by_zeros(buf, e, limit):
                return self._torn_at_zeros(buf, base, first, limit, final, _CUT_BY_ZEROS)
            pieces.append((j, e))
            i = e
            if t == RecordType.LAST:
                item = b"".join([buf[a:b] for a, b in pieces])
                miss = self._item(item, base + first, base + e)
                if miss is not None:
                    return self._corrupt(base + first, miss, base, -(-e // _B) * _B, buf, limit, final)
                return e

    def _padding(self, buf: bytes, base: int, i: int, limit: int, final: bool) -> int:
        """Consume a run of type-6 records from buf[i]; its start is in `pad_start`."""
        while True:
            bo = i & _MASK
            if i + HEADER_SIZE > limit or bo >= _LAST_HEADER_AT:
                if i + HEADER_SIZE > limit and not final:
                    return self._need(base, i)
                break
            w: int = _HEADER_WORD.unpack_from(buf, i)[0]
            n = w & _LENGTH_MASK
            if w >> _TYPE_SHIFT != RecordType.BAD_RECORD or n > _LAST_HEADER_AT - bo:
                break
            e = i + HEADER_SIZE + n
            if e > limit or _cut_by_zeros(buf, e, limit):  # padding is all '*'
                if not final:
                    return self._need(base, i)
                self._end_padding(base + i)
                self._row(ROW_TORN, base + i, base + limit, "padding record cut by the end of data")
                return self._finish()
            i = e
        self._end_padding(base + i)
        return i

    def _end_padding(self, end: int) -> None:
        if end > self.pad_start:
            self._row(ROW_PADDING, self.pad_start, end, None)
        self.pad_start = -1

    def _corrupt(self, start: int, why: str, base: int, i: int, buf: bytes, limit: int, final: bool) -> int:
        """Open a corrupt region at file offset `start`; reading resumes at buf[i], a block boundary."""
        self.bad_start = start
        self.bad_detail = why
        return self._resync(buf, base, i, limit, final)

    def _resync(self, buf: bytes, base: int, i: int, limit: int, final: bool) -> int:
        """Skip the Middle/Last fragments that continue a broken record, from the block boundary buf[i]."""
        while True:
            if i + HEADER_SIZE > limit:
                if not final:
                    return self._need(base, i)
                self._row(ROW_CORRUPT, self.bad_start, base + min(i, limit), self.bad_detail)
                self.bad_start = -1
                return self._finish() if i >= limit else i
            bo = i & _MASK
            w: int = _HEADER_WORD.unpack_from(buf, i)[0]
            n = w & _LENGTH_MASK
            t = w >> _TYPE_SHIFT
            if w != 0 and self._bad_header(n, t, bo, base + i) is not None:
                i += _B - bo  # more damage: the region grows to the next block
                continue
            if w != 0 and t in (RecordType.MIDDLE, RecordType.LAST):
                e = i + HEADER_SIZE + n
                if e > limit:
                    if not final:
                        return self._need(base, i)
                    self._row(ROW_CORRUPT, self.bad_start, base + limit, self.bad_detail)
                    self.bad_start = -1
                    return self._finish()
                i = e
                if t == RecordType.MIDDLE:
                    left = _B - (i & _MASK)
                    if left <= HEADER_SIZE:
                        i += left
                    continue
            self._row(ROW_CORRUPT, self.bad_start, base + i, self.bad_detail)
            self.bad_start = -1
            return i


def _zeros(buf: bytes, i: int, limit: int) -> bool:
    """Only zeros in buf[i:limit]."""
    return _NONZERO.search(buf, i, limit) is None


def _cut_by_zeros(buf: bytes, e: int, limit: int) -> bool:
    """A fragment ending at buf[e] ends in a zero where it cannot (an item's RESP ends in LF, padding in
    '*') and only zeros follow: it was cut, the rest of a preallocated file left zero-filled. (In a chunk
    the zeros may go on: `_torn_at_zeros` reads on before calling it torn.)"""
    return e > 0 and buf[e - 1] == 0 and _zeros(buf, e - 1, limit)


def scan_binlog(
    data: bytes | bytearray | memoryview, *, db: int, filenum: int, logical_end: int | None = None
) -> pa.RecordBatch:
    """Every record, padding run and damaged region of one binlog file's bytes, as RECORD_SCHEMA rows.

    Reading stops at the first all-zero header or at `logical_end` (the manifest's pro_offset when this
    is the file being written). Damage becomes rows, never an exception.
    """
    buf = data if isinstance(data, bytes) else bytes(data)
    limit = len(buf) if logical_end is None else max(0, min(len(buf), logical_end))
    scan = _Scan(db, filenum)
    scan.run(buf, 0, 0, limit, True)
    return scan.batch()


def parse_file(
    path: Path | str, *, db: int, filenum: int, logical_end: int | None = None, chunk_size: int = 8 << 20
) -> pa.RecordBatch:
    """`scan_binlog` over a file read in block-aligned chunks, so memory stays near `chunk_size`.

    A record larger than a chunk makes the next read as large as needed; one still open at a chunk's
    end is read again from its start with the next chunk.
    """
    chunk = max(_B, chunk_size - chunk_size % _B)
    scan = _Scan(db, filenum)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        stop = size if logical_end is None else max(0, min(size, logical_end))
        pos, want = 0, chunk
        while True:
            base = pos - pos % _B
            f.seek(base)
            buf = f.read(min(want, stop - base))
            final = base + len(buf) >= stop or len(buf) < min(want, stop - base)  # the file may shrink under us
            scan.run(buf, base, pos - base, len(buf), final)
            if scan.done:
                break
            want = chunk if scan.resume - scan.resume % _B > base else want * 2  # no progress: grow
            pos = scan.resume
    return scan.batch()


def iter_records(
    data: bytes | bytearray | memoryview, *, db: int, filenum: int, logical_end: int | None = None
) -> Iterator[BinlogRecord]:
    """The rows of `scan_binlog` as BinlogRecord objects."""
    for row in scan_binlog(data, db=db, filenum=filenum, logical_end=logical_end).to_pylist():
        yield BinlogRecord(**row)


def signed64(value: int) -> int:
    """An unsigned 64-bit hash as the signed int64 the `digest` column holds."""
    return value - (1 << 64) if value >= 1 << 63 else value


def content_digest(content: bytes) -> int:
    """The `digest` column's value for these content bytes (item bytes 34..)."""
    return signed64(_h64(content))


def summarize(batch: pa.RecordBatch, *, file_size: int | None = None) -> dict[str, Any]:
    """Counts and positions of one file's scan: what a per-file line of a report needs."""
    rows = batch.to_pydict()
    kinds: list[str] = rows["row_kind"]
    starts: list[int] = rows["start"]
    ends: list[int] = rows["end"]
    records = [k for k, kind in enumerate(kinds) if kind == ROW_RECORD]
    good = [k for k, kind in enumerate(kinds) if kind in (ROW_RECORD, ROW_PADDING)]
    logical_end = ends[good[-1]] if good else 0
    out: dict[str, Any] = {
        "records": len(records),
        "first_record_start": starts[records[0]] if records else None,
        "logical_end": logical_end,
        "padding_bytes": sum(ends[k] - starts[k] for k, kind in enumerate(kinds) if kind == ROW_PADDING),
        "corrupt_records": kinds.count(ROW_CORRUPT),
        "torn_tail": kinds.count(ROW_TORN) > 0,
    }
    if file_size is not None:
        out["zero_tail_bytes"] = max(0, file_size - max([logical_end, *ends]))
    return out
