"""Generated Pika binlogs for the property and fuzz tests, the rows a correct scan gives, and a slow decoder.

Logs are written with the byte-exact writer (audit/local/pika_binlog.py); what each append put where is
recorded as it is written, which is the oracle for undamaged logs. `slow_item` re-reads one record the
obvious way (fragment by fragment, then a full RESP parse), the oracle for what a scan may accept in
damaged logs.
"""

from __future__ import annotations

import random
import struct
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import xxhash
from hypothesis import strategies as st

from audit.local.pika_binlog import BinlogWriter, padding_item, resp_encode
from audit.sources.pika.binlog import scan_binlog
from audit.sources.pika.binlog_format import (
    BLOCK_SIZE,
    HEADER_SIZE,
    ITEM_HEADER,
    ITEM_HEADER_SIZE,
    KEY_PREFIX_MAX,
    RECORD_SCHEMA,
    RecordType,
    binlog_files,
)

B = BLOCK_SIZE
T0 = 1_700_000_000
KINDS = {"record", "padding", "corrupt_record", "torn_tail"}

# -- what gets written -------------------------------------------------------------------------------------

_commands = st.sampled_from([b"SET", b"HSET", b"LPUSH", b"SADD", b"ZADD", b"INCR", b"DEL", b"pksetexat", b"set"])
_keys = st.binary(max_size=40) | st.binary(min_size=1020, max_size=1100)
_sizes = st.integers(0, 300) | st.sampled_from([B - 200, B - 60, B - 42, B - 8, B, B + 100, 2 * B + 17, 3 * B])


@st.composite
def commands(draw: st.DrawFn) -> list[bytes]:
    """A command whose values are sized to land fragments anywhere; the value bytes come from a seed."""
    cmd = draw(_commands)
    if draw(st.integers(0, 9)) == 0:
        return [cmd]  # no key (FLUSHDB-like)
    args = [cmd, draw(_keys)]
    rnd = random.Random(draw(st.integers(0, 2**32)))
    for _ in range(draw(st.integers(0, 3))):
        args.append(rnd.randbytes(draw(_sizes)))
    return args


ops = st.lists(
    st.tuples(st.just("cmd"), commands())
    | st.tuples(st.just("land"), st.sampled_from([0, 1, 5, 7, 8, 9, 16]))
    | st.tuples(st.just("padding_cmd"), st.integers(61, 3000)),
    min_size=1,
    max_size=20,
)


@dataclass
class Written:
    """One thing the writer put in a file: a record with its expected row, or a full-sync padding run."""

    filenum: int
    start: int
    end: int
    row: dict[str, Any]
    pieces: list[tuple[int, int]] = field(default_factory=list)  # padding: its physical records


@dataclass
class Log:
    root: Path
    written: list[Written]
    files: dict[int, bytes]

    def of(self, filenum: int) -> list[Written]:
        return [w for w in self.written if w.filenum == filenum]


def signed(h: int) -> int:
    return h - (1 << 64) if h >= 1 << 63 else h


def command_name(raw: bytes) -> str:
    """The `command` column for a raw command name (audit/sources/pika/binlog_resp.py: command_name)."""
    from audit.sources.pika.binlog_resp import command_name as name

    return name(raw)


def _record_row(n: int, start: int, end: int, item: bytes) -> dict[str, Any]:
    _, exec_time, term, logic_id, pf, po, clen = ITEM_HEADER.unpack_from(item)
    content = item[ITEM_HEADER_SIZE:]
    args = parse_resp(content)
    assert args is not None
    has_key = len(args) > 1 and args[0].lower() != b"padding"
    return {
        "row_kind": "record",
        "db": 0,
        "filenum": n,
        "start": start,
        "end": end,
        "exec_time": exec_time,
        "term": term,
        "logic_id": signed(logic_id),  # u64 on disk; the int64 columns hold the same 64 bits
        "prev_filenum": pf,
        "prev_offset": signed(po),
        "content_len": clen,
        "digest": signed(xxhash.xxh3_64_intdigest(content)),
        "command": command_name(args[0]),
        "key": args[1][:KEY_PREFIX_MAX] if has_key else None,
        "detail": None,
    }


def _land(w: BinlogWriter, left: int, log: list[Written]) -> None:
    """Append SETs so that exactly `left` bytes remain in the current block (trailers, 8-left Firsts)."""
    while B - w.block_offset - left < 120:
        _append(w, [b"SET", b"filler", b"f" * 40], log)
    need = B - left - w.block_offset
    key = b"land"
    while True:
        for vlen in range(max(0, need - 120), need):
            if 8 + ITEM_HEADER_SIZE + len(resp_encode([b"SET", key, b"v" * vlen])) == need:
                _append(w, [b"SET", key, b"v" * vlen], log)
                return
        key += b"+"  # a digit-count jump skipped `need`; one more key byte shifts it


def _append(w: BinlogWriter, args: list[bytes], log: list[Written]) -> None:
    before = (w.pro_num, w.pro_offset, w.logic_id)
    et = T0 + len(log)
    n, start, end = w.append(args, exec_time=et)
    item = ITEM_HEADER.pack(1, et, w.term, before[2] + 1, before[0], before[1], len(resp_encode(args)))
    log.append(Written(n, start, end, _record_row(n, start, end, item + resp_encode(args))))


def write_log(root: Path, spec: tuple[Any, ...]) -> Log:
    sync, steps, file_size, preallocate, trim = spec
    log: list[Written] = []
    w = BinlogWriter(
        root, file_size=file_size, preallocate=preallocate, prealloc_step=64 << 10, term=3, clock=lambda: T0
    )
    if sync is not None:
        w.set_producer_status(*sync)
        if w.size:  # an offset under 8 writes no padding (and leaves pro_offset past the file's end, as Pika)
            ends = [*range(B, w.size, B), w.size]
            pieces = list(zip([0, *ends[:-1]], ends, strict=True))
            row = {"row_kind": "padding", "filenum": w.pro_num, "start": 0, "end": w.size, "detail": None}
            log.append(Written(w.pro_num, 0, w.size, row, pieces))
    for kind, arg in steps:
        if kind == "cmd":
            _append(w, arg, log)
        elif kind == "land":
            _land(w, arg, log)
        else:
            n, start, end = w.append_padding_command(arg)
            log.append(Written(n, start, end, _record_row(n, start, end, padding_item(arg))))
    w.close(trim=trim)
    files = {n: p.read_bytes() for n, p in binlog_files(root)}
    return Log(root, log, files)


log_specs = st.tuples(
    st.none() | st.tuples(st.integers(0, 3), st.integers(0, 3 * B)),
    ops,
    st.sampled_from([64 << 10, 200 << 10, 1 << 20]),
    st.booleans(),
    st.booleans(),
)


@contextmanager
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="pika-fuzz-") as d:
        yield Path(d)


def check_rows(rows: list[dict[str, Any]], size: int) -> None:
    """What holds for any scan of any bytes: known kinds, ordered non-overlapping rows inside the data."""
    prev_end = 0
    for r in rows:
        assert r["row_kind"] in KINDS
        assert prev_end <= r["start"] < r["end"] <= size, r
        assert (r["detail"] is None) == (r["row_kind"] in ("record", "padding")), r
        prev_end = r["end"]


def scan(data: bytes, **kw: Any) -> list[dict[str, Any]]:
    batch = scan_binlog(data, db=0, filenum=kw.pop("filenum", 0), **kw)
    assert batch.schema.equals(RECORD_SCHEMA)
    return list(batch.to_pylist())


# -- the slow decoder ----------------------------------------------------------------------------------------


def parse_resp(content: bytes) -> list[bytes] | None:
    """A full RESP array of bulk strings, every argument checked; None if `content` is anything else."""
    if not content.startswith(b"*"):
        return None
    x = content.find(b"\r\n")
    if x < 2 or not content[1:x].isdigit() or x > 11:
        return None
    argc, p, args = int(content[1:x]), x + 2, []
    if argc < 1:
        return None
    for _ in range(argc):
        if content[p : p + 1] != b"$":
            return None
        x = content.find(b"\r\n", p)
        if x < p + 2 or not content[p + 1 : x].isdigit() or x - p > 11:
            return None
        n = int(content[p + 1 : x])
        s = x + 2
        if content[s + n : s + n + 2] != b"\r\n":
            return None
        args.append(content[s : s + n])
        p = s + n + 2
    return args if p == len(content) else None


_HDR = struct.Struct("<HBIB")


def item_at(data: bytes, start: int, index: int) -> int:
    """The file offset of byte `index` of the (sound) item whose record starts at `start`."""
    for lo, hi in fragments(data, start):
        if index < hi - lo:
            return lo + index
        index -= hi - lo
    raise IndexError(index)


def fragments(data: bytes, start: int) -> list[tuple[int, int]]:
    """The payload ranges of the record whose first header is at `start` ([] when it is not sound)."""
    out: list[tuple[int, int]] = []
    i, first = start, True
    while True:
        if B - i % B <= HEADER_SIZE and not (first and B - i % B == HEADER_SIZE):
            i += B - i % B
        if i + HEADER_SIZE > len(data):
            return []
        lo, hi, _, t = _HDR.unpack_from(data, i)
        n = lo | hi << 16
        if n > B - HEADER_SIZE or i % B + HEADER_SIZE + n > B or i + HEADER_SIZE + n > len(data):
            return []
        want = (RecordType.FULL, RecordType.FIRST) if first else (RecordType.MIDDLE, RecordType.LAST)
        if t not in want:
            return []
        out.append((i + HEADER_SIZE, i + HEADER_SIZE + n))
        i += HEADER_SIZE + n
        first = False
        if t in (RecordType.FULL, RecordType.LAST):
            return out


def slow_item(data: bytes, start: int) -> tuple[int, bytes] | None:
    """The record whose first header is at `start`, fragment by fragment: (end, item bytes), or None."""
    pieces = fragments(data, start)
    if not pieces:
        return None
    return pieces[-1][1], b"".join(data[lo:hi] for lo, hi in pieces)


def slow_row(data: bytes, start: int, filenum: int = 0) -> dict[str, Any] | None:
    """The row a record at `start` must have, or None if the slow reading finds it unsound."""
    got = slow_item(data, start)
    if got is None:
        return None
    end, item = got
    if len(item) < ITEM_HEADER_SIZE:
        return None
    typ, *_, clen = ITEM_HEADER.unpack_from(item)
    if typ != 1 or clen != len(item) - ITEM_HEADER_SIZE or parse_resp(item[ITEM_HEADER_SIZE:]) is None:
        return None
    return _record_row(filenum, start, end, item)
