"""Pika's binlog format: the byte layout of `write2file<N>` files and their `manifest`, and its constants.

Everything below was read from OpenAtomFoundation/pika @ 218b68bb (the format is the same from v3.3
through v4.0.x); docs/formats/pika-binlog.md has the notes. "L123" is a line of the file named before it.

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
| torn_tail      | a record cut by the end of the data, or cut where only zeros follow, in the   |
|                | last file (in any other: a corrupt_record, "record cut in a file that is not the last") |

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
import stat
import struct
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

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

_FILE_RE = re.compile(rf"{FILE_PREFIX}(0|[1-9][0-9]*)")
_h64 = xxhash.xxh3_64_intdigest


@dataclass(frozen=True, slots=True)
class Manifest:
    """The producer position of one DB's binlog (the first 24 bytes of `manifest`)."""

    pro_num: int
    pro_offset: int
    logic_id: int
    term: int


MAX_FILENUM = (1 << 31) - 1  # the scan's `filenum` column is an int32 (Pika's u32 never gets near it)
MAX_OFFSET = (1 << 63) - 1  # offsets are int64 columns


def parse_manifest(data: bytes | memoryview) -> Manifest:
    """Decode a `manifest` file's content; CorruptRecordError when it is shorter than 24 bytes or its
    producer position is out of any file's range (the error names the field)."""
    if len(data) < MANIFEST.size:
        raise CorruptRecordError(f"manifest is {len(data)} bytes, needs {MANIFEST.size}", offset=0)
    m = Manifest(*MANIFEST.unpack_from(data, 0))
    if m.pro_num > MAX_FILENUM:
        raise CorruptRecordError(f"manifest field pro_num {m.pro_num} is over {MAX_FILENUM}", offset=0)
    if m.pro_offset > MAX_OFFSET:
        raise CorruptRecordError(f"manifest field pro_offset {m.pro_offset} is over {MAX_OFFSET}", offset=4)
    return m


def read_manifest(log_dir: Path) -> Manifest:
    """Read `<log_dir>/manifest`."""
    with open(log_dir / MANIFEST_NAME, "rb") as f:
        return parse_manifest(f.read(MANIFEST.size))


def file_number(name: str) -> int | None:
    """N for a file named `write2file<N>`, else None."""
    m = _FILE_RE.fullmatch(name)
    return int(m.group(1)) if m else None


def binlog_entries(log_dir: Path) -> list[tuple[int, Path, str | None]]:
    """The `write2file<N>` entries of one DB's log directory, sorted by N, each with why it cannot be read
    as a binlog file (None for a regular file): a dangling or looping symlink, a directory, a number past
    MAX_FILENUM. Listing errors (OSError) are the caller's to report."""
    found = []
    with os.scandir(log_dir) as it:
        for entry in it:
            n = file_number(entry.name)
            if n is not None:
                found.append((n, Path(entry.path), _unusable(entry, n)))
    return sorted(found)


def binlog_files(log_dir: Path) -> list[tuple[int, Path]]:
    """The `write2file<N>` regular files of one DB's log directory, sorted by N (what the writer and the
    bench read; the audit uses `binlog_entries`, which also says which entries cannot be read)."""
    return [(n, p) for n, p, why in binlog_entries(log_dir) if why is None]


def _unusable(entry: os.DirEntry[str], n: int) -> str | None:
    if n > MAX_FILENUM:
        return f"file number over {MAX_FILENUM}"
    try:
        st = os.stat(entry.path)  # follows symlinks
    except OSError as e:
        return f"cannot stat: {e.strerror}"
    return None if stat.S_ISREG(st.st_mode) else "not a regular file"


def signed64(value: int) -> int:
    """An unsigned 64-bit hash as the signed int64 the `digest` column holds."""
    return value - (1 << 64) if value >= 1 << 63 else value


def content_digest(content: bytes) -> int:
    """The `digest` column's value for these content bytes (item bytes 34..)."""
    return signed64(_h64(content))
