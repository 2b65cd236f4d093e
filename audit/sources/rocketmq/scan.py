"""The columnar commit-log scanner: one file's bytes in, Arrow batches of RECORD_SCHEMA out. Pure.

Per record, Python does three things: follow TOTALSIZE (_walk), CRC the body and hash the record. Every
field is then read for all records at once with numpy gathers, and strings are Arrow views into the
file's bytes, copied once by a cast. The checks follow the broker's reader: length formula, body CRC,
PHYSICALOFFSET; the byte layout is in audit/sources/rocketmq/format.py.
"""

from __future__ import annotations

import json
import mmap
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from audit.sources.rocketmq.columns import (
    I64Array,
    NotUtf8,
    U8Array,
    _as_text,
    _gather,
    _native,
    _properties,
    _views,
)
from audit.sources.rocketmq.format import (
    BASE_LENGTH,
    BORNHOST_V6_FLAG,
    FRAME,
    HEAD,
    I16,
    MAGIC_V1,
    MAGIC_V2,
    OFF_BORN_HOST,
    RECORD_SCHEMA,
    STOREHOST_V6_FLAG,
    V6_EXTRA,
    format_host,
)
from audit.sources.rocketmq.stops import all_zero, cut_short, damage, special_row, stop_row

DEFAULT_BATCH_BYTES = 8 * 1024 * 1024
"""Bytes of records per Arrow batch when scanning a file: bounds the memory of a 1 GiB file's scan."""
MAX_REREADS = 8
"""Readings of damage in a file being written before it is reported as it was last read (iter_batches)."""


# Per record, Python does three things: follow TOTALSIZE (_walk), CRC the body and hash the record. Every
# field is then read for all records at once with numpy gathers, and strings are Arrow views into the
# file's bytes, copied once by a cast.

_HEAD_DTYPE = np.dtype(
    [
        ("size", ">i4"),
        ("magic", ">i4"),
        ("body_crc", ">i4"),
        ("queue_id", ">i4"),
        ("flag", ">i4"),
        ("queue_offset", ">i8"),
        ("phys", ">i8"),
        ("sys_flag", ">i4"),
        ("born_ts", ">i8"),
    ]
)
"""HEAD as a numpy record (the same 48 bytes)."""


def _middle_dtype(born_v6: bool, store_v6: bool) -> np.dtype[np.void]:
    """BORNHOST .. BODYLEN: the part whose width depends on the two IPv6 bits."""
    return np.dtype(
        [
            ("born_ip", "V16" if born_v6 else ">u4"),
            ("born_port", ">i4"),
            ("store_ts", ">i8"),
            ("store_ip", "V16" if store_v6 else ">u4"),
            ("store_port", ">i4"),
            ("reconsume_times", ">i4"),
            ("prepared_tx_offset", ">i8"),
            ("body_len", ">i4"),
        ]
    )


_MIDDLE = {(b, s): _middle_dtype(b, s) for b in (False, True) for s in (False, True)}
_V4V4 = np.dtype(_HEAD_DTYPE.descr + _MIDDLE[False, False].descr)
assert _HEAD_DTYPE.itemsize == HEAD.size and _V4V4.itemsize == 88


def _walk(mv: memoryview, pos: int, end: int, budget_end: int) -> tuple[list[int], int, bool]:
    """Record starts from `pos` while each frame is a v1/v2 magic with a size that fits; stop past budget_end.

    Also says whether another such frame follows (the walk stopped for the budget, not at the data's end),
    so that the last record of the data is known as such whatever the batch size.
    """
    starts: list[int] = []
    append = starts.append
    unpack = FRAME.unpack_from
    last = end - FRAME.size
    while pos <= last:
        size, magic = unpack(mv, pos)
        if (magic != MAGIC_V1 and magic != MAGIC_V2) or size < BASE_LENGTH or size > end - pos:
            return starts, pos, False
        if pos >= budget_end:
            return starts, pos, True
        append(pos)
        pos += size
    return starts, pos, False


def _hosts(
    ip: npt.NDArray[Any], port: npt.NDArray[Any], v6: npt.NDArray[np.bool_], raw6: npt.NDArray[Any] | None
) -> pa.Array:
    """``ip:port`` per row, formatted once per distinct host; IPv6 rows from their 20 raw bytes in `raw6`."""
    key = (ip.astype(np.uint64) << np.uint64(32)) | port.astype(np.uint32).astype(np.uint64)
    enc = pc.dictionary_encode(pa.array(key, pa.uint64()))
    labels = [format_host(int(k).to_bytes(8, "big")) for k in enc.dictionary.to_pylist()]
    hosts = pa.array(labels, pa.string()).take(enc.indices)
    if raw6 is not None and v6.any():
        rows = hosts.to_pylist()
        for i in np.flatnonzero(v6).tolist():
            rows[i] = format_host(bytes(raw6[i]))
        hosts = pa.array(rows, pa.string())
    return hosts


def _repeat(value: str, n: int) -> pa.Array:
    raw = value.encode()
    offsets = np.arange(0, len(raw) * (n + 1), len(raw), dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)])


@dataclass(slots=True)
class _Columns:
    """The records of one walk as numpy columns, and the first one that failed a check."""

    at: I64Array
    a: dict[str, npt.NDArray[Any]]
    first_bad: int | None = None
    bad_detail: dict[str, Any] = field(default_factory=dict)

    def fail(self, i: int, detail: dict[str, Any]) -> None:
        if self.first_bad is None or i < self.first_bad:
            self.first_bad, self.bad_detail = i, detail

    def head(self, n: int) -> _Columns:
        return _Columns(self.at[:n], {k: v[:n] for k, v in self.a.items()})


def _middle(
    buf: U8Array, at: I64Array, born_v6: npt.NDArray[np.bool_], store_v6: npt.NDArray[np.bool_]
) -> dict[str, npt.NDArray[Any]]:
    """BORNHOST .. BODYLEN per row when some host is IPv6.

    An IPv6 host is kept as its 20 raw bytes (address, port) in a ``V20`` column, ``born_raw6`` or
    ``store_raw6``, row-aligned like every other column so that cutting the batch cuts it too.
    """
    mid_at = at + OFF_BORN_HOST
    n = len(at)
    cols: dict[str, npt.NDArray[Any]] = {
        "born_ip": np.zeros(n, np.uint32),
        "born_port": np.zeros(n, np.int32),
        "born_raw6": np.zeros(n, "V20"),
        "store_ts": np.zeros(n, np.int64),
        "store_ip": np.zeros(n, np.uint32),
        "store_port": np.zeros(n, np.int32),
        "store_raw6": np.zeros(n, "V20"),
        "reconsume_times": np.zeros(n, np.int32),
        "prepared_tx_offset": np.zeros(n, np.int64),
        "body_len": np.zeros(n, np.int32),
        "middle_size": np.zeros(n, np.int64),
    }
    for (b6, s6), dtype in _MIDDLE.items():
        rows = np.flatnonzero((born_v6 == b6) & (store_v6 == s6))
        if not len(rows):
            continue
        m = _gather(buf, mid_at[rows], dtype)
        for name in ("born_port", "store_ts", "store_port", "reconsume_times", "prepared_tx_offset", "body_len"):
            cols[name][rows] = _native(m[name])
        cols["middle_size"][rows] = dtype.itemsize
        for side, v6 in (("born", b6), ("store", s6)):
            if v6:  # address then big-endian port: the field's bytes as they are on disk
                ip = np.ascontiguousarray(m[f"{side}_ip"]).view(np.uint8).reshape(-1, 16)
                port = np.ascontiguousarray(m[f"{side}_port"]).view(np.uint8).reshape(-1, 4)
                cols[f"{side}_raw6"][rows] = np.ascontiguousarray(np.hstack((ip, port))).view("V20")[:, 0]
            else:
                cols[f"{side}_ip"][rows] = _native(m[f"{side}_ip"])
    return cols


def _heads(data: pa.Buffer, at: I64Array, stop: int) -> npt.NDArray[Any]:
    """TOTALSIZE .. BODYLEN of every record, read as IPv4/IPv4 (88 bytes; every record is at least 91).

    The records of one walk are contiguous, so they are a zero-copy Arrow binary array, and one
    binary_slice copies all their heads into a single buffer (several times faster than a numpy gather).
    """
    n = len(at)
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[:n] = at
    offsets[n] = stop
    records = pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), data])
    heads = pc.binary_slice(records, 0, _V4V4.itemsize)
    start = int(np.frombuffer(heads.buffers()[1], dtype=np.int64, count=1, offset=heads.offset * 8)[0])
    return np.frombuffer(heads.buffers()[2], dtype=_V4V4, count=n, offset=start)


def _fields(data: pa.Buffer, buf: U8Array, starts: list[int], stop: int, file_start: int) -> _Columns:
    """Every field of the walked records (which are contiguous and end at `stop`), and the checks."""
    at = np.asarray(starts, dtype=np.int64)
    h = _heads(data, at, stop) if len(at) else np.zeros(0, dtype=_V4V4)
    a: dict[str, npt.NDArray[Any]] = {name: _native(h[name]) for name in _HEAD_DTYPE.names or ()}
    born_v6 = (a["sys_flag"] & BORNHOST_V6_FLAG) != 0
    store_v6 = (a["sys_flag"] & STOREHOST_V6_FLAG) != 0
    if born_v6.any() or store_v6.any():
        mid = _middle(buf, at, born_v6, store_v6)
    else:
        mid = {name: _native(h[name]) for name in _MIDDLE[False, False].names or ()}
        mid["middle_size"] = np.full(len(at), _MIDDLE[False, False].itemsize, dtype=np.int64)
    a.update(mid)
    body_len = a["body_len"].astype(np.int64)
    body_at = at + OFF_BORN_HOST + a["middle_size"]
    v2 = a["magic"] == MAGIC_V2
    topic_len_at = body_at + np.maximum(body_len, 0)
    two = _native(_gather(buf, topic_len_at, np.dtype(">i2")))
    topic_len = np.where(v2, two, two >> 8).astype(np.int64)  # v1: the first byte alone, signed
    topic_at = topic_len_at + 1 + v2
    prop_len_at = topic_at + np.maximum(topic_len, 0)
    prop_len = _native(_gather(buf, prop_len_at, np.dtype(">i2"))).astype(np.int64)
    want = BASE_LENGTH + V6_EXTRA * born_v6 + V6_EXTRA * store_v6 + v2 + body_len + topic_len + prop_len
    a.update(
        body_len=body_len,
        body_at=body_at,
        born_v6=born_v6,
        store_v6=store_v6,
        topic_at=topic_at,
        topic_len=topic_len,
        props_at=prop_len_at + I16.size,
        prop_len=prop_len,
        version=np.where(v2, 2, 1).astype(np.int8),
    )
    cols = _Columns(at=at, a=a)
    ok_len = (want == a["size"]) & (body_len >= 0) & (topic_len >= 0) & (prop_len >= 0)
    ok_phy = a["phys"] == file_start + at
    if not ok_len.all():
        i = int(np.argmin(ok_len))
        cols.fail(i, {"reason": "length_mismatch", "declared": int(a["size"][i]), "computed": int(want[i])})
    if not ok_phy.all():
        i = int(np.argmin(ok_phy))
        expected = file_start + int(at[i])
        cols.fail(i, {"reason": "phys_offset_mismatch", "stored": int(a["phys"][i]), "expected": expected})
    return cols


def _crc_and_digest(piece: Callable[[slice], Any], cols: _Columns) -> I64Array:
    """Check each body CRC (a mismatch fails that record) and hash each record before the first failure.

    `piece` slices the file's bytes (bytes and mmap slices are copies, which small records make cheaper
    than memoryview slices); the map chains keep the per-record loop in C.
    """
    a = cols.a
    n = len(cols.at) if cols.first_bad is None else cols.first_bad
    body_at = a["body_at"][:n]
    bodies = map(piece, map(slice, body_at.tolist(), (body_at + a["body_len"][:n]).tolist()))
    # crc32(b"") is 0, which is what an empty body stores.
    computed = np.fromiter(map(zlib.crc32, bodies), dtype=np.int64, count=n) & 0x7FFFFFFF
    mismatch = computed != a["body_crc"][:n]
    if mismatch.any():
        i = int(np.argmax(mismatch))
        cols.fail(i, {"reason": "body_crc", "stored": int(a["body_crc"][i]), "computed": int(computed[i])})
        n = i
    starts = cols.at[:n]
    records = map(piece, map(slice, starts.tolist(), (starts + a["size"][:n]).tolist()))
    return np.fromiter(map(xxhash.xxh3_64_intdigest, records), dtype=np.uint64, count=n).view(np.int64)


def _record_batch(data: pa.Buffer, buf: U8Array, cols: _Columns, digests: I64Array, file_start: int) -> pa.RecordBatch:
    a, n = cols.a, len(cols.at)
    base = int(cols.at[0]) if n else 0
    not_utf8: NotUtf8 = {}
    topic = _as_text(_views(data, buf, a["topic_at"], a["topic_len"], base=base), "topic", not_utf8)
    props = _properties(data, buf, a["props_at"], a["prop_len"], base, not_utf8)
    columns: dict[str, Any] = {
        "row_kind": _repeat("record", n),
        "phys_offset": pa.array(cols.at + file_start, pa.int64()),
        "size": pa.array(a["size"], pa.int64()),
        "magic": pa.array(a["magic"], pa.int32()),
        "version": pa.array(a["version"], pa.int8()),
        "body_crc": pa.array(a["body_crc"], pa.int32()),
        "queue_id": pa.array(a["queue_id"], pa.int32()),
        "flag": pa.array(a["flag"], pa.int32()),
        "queue_offset": pa.array(a["queue_offset"], pa.int64()),
        "sys_flag": pa.array(a["sys_flag"], pa.int32()),
        "born_ts": pa.array(a["born_ts"], pa.int64()),
        "born_host": _hosts(a["born_ip"], a["born_port"], a["born_v6"], a.get("born_raw6")),
        "store_ts": pa.array(a["store_ts"], pa.int64()),
        "store_host": _hosts(a["store_ip"], a["store_port"], a["store_v6"], a.get("store_raw6")),
        "reconsume_times": pa.array(a["reconsume_times"], pa.int32()),
        "prepared_tx_offset": pa.array(a["prepared_tx_offset"], pa.int64()),
        "body_len": pa.array(a["body_len"], pa.int32()),
        "crc_ok": pa.array(np.ones(n, dtype=bool), pa.bool_()),
        "topic": topic,
        **props,
        "digest": pa.array(digests, pa.int64()),
        "detail": _not_utf8_detail(not_utf8, n),
    }
    return pa.RecordBatch.from_pydict(columns, schema=RECORD_SCHEMA)


def _not_utf8_detail(not_utf8: NotUtf8, n: int) -> pa.Array:
    """A record's detail is null, unless a text field is not UTF-8: ``{"not_utf8": {column: hex}}``, so
    the row is still a record and the exact bytes are not lost to the replacement characters."""
    if not not_utf8:
        return pa.nulls(n, pa.string())
    return pa.array(
        [json.dumps({"not_utf8": not_utf8[i]}, sort_keys=True) if i in not_utf8 else None for i in range(n)],
        pa.string(),
    )


def _check_last_record(buf: U8Array, cols: _Columns, stop: int) -> None:
    """Fail the last record if its last written byte should not be zero and only zeros follow: a cut record.

    In a preallocated file the unwritten end of a record reads as zeros, and a cut inside the topic or
    the properties passes every check the broker makes (they are not under the body CRC). The encoder
    ends every property with 0x02; without properties the record ends with the topic (then PROPLEN 0),
    and a topic is never empty and never holds a NUL (the broker's TopicValidator). So a zero there,
    with nothing written after, is a record still in flight.
    """
    i = len(cols.at) - 1
    a = cols.a
    if a["prop_len"][i] > 0:
        last, reason = stop - 1, "properties_not_terminated"
    elif a["topic_len"][i] > 0:
        last, reason = int(a["topic_at"][i] + a["topic_len"][i]) - 1, "topic_cut"
    else:
        return
    if buf[last] == 0 and all_zero(buf, last, len(buf)):
        cols.fail(i, {"reason": reason})


def _bad_row(buf: U8Array, cols: _Columns, at: int, file_start: int, last_file: bool) -> pa.RecordBatch:
    """The row for the first record of a walk that failed a check (at `at`): cut short, or damaged."""
    bad = cols.first_bad
    assert bad is not None
    size, magic = int(cols.a["size"][bad]), int(cols.a["magic"][bad])
    if cut_short(buf, at, size, bool(cols.a["prop_len"][bad] > 0)):
        return damage(file_start + at, size, magic, {"reason": "cut", "check": cols.bad_detail}, last_file)
    crc_ok = False if cols.bad_detail.get("reason") == "body_crc" else None
    return special_row("corrupt_record", file_start + at, size, magic, cols.bad_detail, crc_ok)


def _seen(row: pa.RecordBatch) -> tuple[Any, ...]:
    return tuple(row.column(c)[0].as_py() for c in ("row_kind", "phys_offset", "size", "magic", "detail"))


def iter_batches(
    data: bytes | bytearray | memoryview | mmap.mmap,
    *,
    file_start: int,
    last_file: bool = True,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
) -> Iterator[pa.RecordBatch]:
    """Scan one commit-log file (its bytes from position 0) as RECORD_SCHEMA batches of about batch_bytes.

    Ends with at most one row that is not a record: the BLANK, or the damaged record (corrupt_record, or
    torn_tail when `last_file` and the record was cut with only zeros after it). Zeros where a record
    should start end the data silently (the preallocated tail).

    The last file may be written while it is read (a live broker's mmap): a walk that finds zeros and a
    check that looks again later see two moments, and the record that arrived in between reads as
    damage. So damage in the last file is read again from its offset, and reported only once two
    readings agree; until then what is there now is read on.
    """
    mv = memoryview(data).cast("B")
    buf: U8Array = np.frombuffer(mv, dtype=np.uint8)
    whole = pa.py_buffer(mv)
    # Slices of bytes and mmap are copies, cheaper than memoryview slices for small records.
    piece: Callable[[slice], Any] = data.__getitem__ if isinstance(data, bytes | mmap.mmap) else mv.__getitem__
    end = len(buf)
    pos = 0
    batch_bytes = max(1, batch_bytes)
    seen: tuple[Any, ...] | None = None
    rereads = 0
    while True:
        starts, stop, more = _walk(mv, pos, end, pos + batch_bytes)
        cols = _fields(whole, buf, starts, stop, file_start)
        if not more and starts and cols.first_bad is None:
            _check_last_record(buf, cols, stop)
        digests = _crc_and_digest(piece, cols)
        if len(digests):
            yield _record_batch(whole, buf, cols.head(len(digests)), digests, file_start)
        if cols.first_bad is None and more:
            pos = stop
            continue
        if cols.first_bad is not None:
            row: pa.RecordBatch | None = _bad_row(buf, cols, starts[cols.first_bad], file_start, last_file)
        else:
            row = stop_row(mv, buf, stop, file_start, last_file)
        if row is None:
            return
        kind, at = row.column("row_kind")[0].as_py(), row.column("phys_offset")[0].as_py()
        if last_file and kind == "corrupt_record" and _seen(row) != seen and rereads < MAX_REREADS:
            seen, rereads, pos = _seen(row), rereads + 1, at - file_start
            continue
        yield row
        return


def scan_commitlog(
    data: bytes | bytearray | memoryview | mmap.mmap, *, file_start: int, last_file: bool = True
) -> pa.RecordBatch:
    """The whole file as one RECORD_SCHEMA batch (see iter_batches); for files that fit in memory."""
    batches = list(iter_batches(data, file_start=file_start, last_file=last_file, batch_bytes=len(data) + 1))
    if not batches:
        return pa.RecordBatch.from_pylist([], schema=RECORD_SCHEMA)
    return batches[0] if len(batches) == 1 else pa.concat_batches(batches)


def data_end(batches: list[pa.RecordBatch] | pa.RecordBatch, file_start: int) -> int:
    """Where the valid data of a scanned file ends: what the broker reports as its max offset for that file.

    After a BLANK that is the end of the file; a damaged or torn record's bytes do not count (a slave's
    broker counts the bytes of a partial record it received, which an offline scan cannot tell from the
    preallocated zeros).
    """
    end = file_start
    for batch in [batches] if isinstance(batches, pa.RecordBatch) else batches:
        if not batch.num_rows:
            continue
        kind = batch.column("row_kind")
        off = batch.column("phys_offset")
        size = pc.fill_null(batch.column("size"), 0)
        counted = pc.is_in(kind, pa.array(["record", "blank"]))
        ends = pc.if_else(counted, pc.add(off, size), off)
        end = max(end, pc.max(ends).as_py())
    return end
