"""RocketMQ commit log: record layout, a columnar scanner (Arrow) and a per-record decoder. Pure: bytes in.

A store's ``commitlog/`` holds files named by their absolute start offset (20 zero-padded digits), 1 GiB
each by default, preallocated and zero-filled. Records follow each other; a record that does not fit in
what is left of a file (with 8 spare bytes) is replaced by a BLANK record and goes to the next file.
Reference: shared/reference/rocketmq.md §1 and §2 (MessageExtEncoder, CommitLog.checkMessageAndReturnSize).

Record layout. Every integer is big-endian and signed. Offsets are for IPv4 born and store hosts; an
IPv6 host (SYSFLAG bit 0x10 for the born host, 0x20 for the store host) is 16+4 bytes instead of 4+4
and shifts what follows by 12.

====  ==================  ===========  ======  =================================================
 #    field               size         offset  notes
====  ==================  ===========  ======  =================================================
 1    TOTALSIZE           i32          0       whole record, these 4 bytes included
 2    MAGICCODE           i32          4       v1 0xDAA320A7, v2 0xDAA320AB, BLANK 0xCBD43194
 3    BODYCRC             i32          8       zlib.crc32(stored body) & 0x7FFFFFFF
 4    QUEUEID             i32          12
 5    FLAG                i32          16      user flag
 6    QUEUEOFFSET         i64          20      index in the consume queue
 7    PHYSICALOFFSET      i64          28      absolute offset = file start + position
 8    SYSFLAG             i32          36      0x1 compressed, 0x10/0x20 IPv6 born/store host
 9    BORNTIMESTAMP       i64          40      epoch ms
10    BORNHOST            4+4 | 16+4   48      IP bytes, then port i32
11    STORETIMESTAMP      i64          56      epoch ms
12    STOREHOST           4+4 | 16+4   64
13    RECONSUMETIMES      i32          72
14    PREPARED_TX_OFFSET  i64          76
15    BODYLEN + BODY      i32 + n      84      stored as sent (compressed stays compressed)
16    TOPICLEN + TOPIC    v1 i8 | v2 i16 + n   UTF-8; v2 when the topic is longer than 127 bytes
17    PROPLEN + PROPS     i16 + n              UTF-8 ``key 0x01 value 0x02`` repeated
====  ==================  ===========  ======  =================================================

``TOTALSIZE == 91 + 12*bornV6 + 12*storeV6 + v2 + bodyLen + topicLen + propLen`` (calMsgLength). A BLANK
record is only ``[i32 bytes left in the file][i32 0xCBD43194]``; the rest of the file after it may be
anything. Zeros where a TOTALSIZE should be mean the end of the data (the preallocated tail).

The scanner follows the broker's reader (§1.6) and checks each record: length formula, body CRC,
PHYSICALOFFSET. A damaged record ends the reading of its file (the broker's recovery stops there too);
the next file is read normally. A record cut short with nothing but zeros after it is a ``torn_tail``:
a slave receives 32 KiB HA chunks with no regard to record boundaries, so its last record may be partial.
"""

from __future__ import annotations

import ipaddress
import json
import mmap
import re
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from audit.errors import CorruptRecordError

MAGIC_V1 = -626843481  # 0xDAA320A7, MessageDecoder.MESSAGE_MAGIC_CODE
MAGIC_V2 = -626843477  # 0xDAA320AB, MESSAGE_MAGIC_CODE_V2 (5.1.0+, topics longer than 127 bytes)
MAGIC_BLANK = -875286124  # 0xCBD43194, CommitLog.BLANK_MAGIC_CODE
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
BORNHOST_V6_FLAG = 0x10
STOREHOST_V6_FLAG = 0x20
BASE_LENGTH = 91
"""calMsgLength of a v1 record with IPv4 hosts and empty body, topic and properties."""
V6_EXTRA = 12
END_FILE_MIN_BLANK_LENGTH = 8
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
DEFAULT_FILE_SIZE = 1024 * 1024 * 1024

FRAME = struct.Struct(
    ">i"  # TOTALSIZE
    "i"  # MAGICCODE
)
HEAD = struct.Struct(
    ">i"  # TOTALSIZE
    "i"  # MAGICCODE
    "i"  # BODYCRC
    "i"  # QUEUEID
    "i"  # FLAG
    "q"  # QUEUEOFFSET
    "q"  # PHYSICALOFFSET
    "i"  # SYSFLAG
    "q"  # BORNTIMESTAMP
)
"""The fixed head of a record; BORNHOST starts right after it."""
HOST_V4 = struct.Struct(">4si")  # IPv4 address, port
HOST_V6 = struct.Struct(">16si")  # IPv6 address, port
AFTER_STORE_HOST = struct.Struct(
    ">i"  # RECONSUMETIMES
    "q"  # PREPARED_TX_OFFSET
    "i"  # BODYLEN
)
I64 = struct.Struct(">q")  # STORETIMESTAMP
I16 = struct.Struct(">h")  # v2 TOPICLEN, PROPLEN
I8 = struct.Struct(">b")  # v1 TOPICLEN

OFF_BORN_HOST = HEAD.size  # BORNHOST follows the fixed head; what comes after depends on the host widths

RECORD_SCHEMA = pa.schema(
    [
        ("row_kind", pa.string()),  # record | blank | corrupt_record | torn_tail
        ("phys_offset", pa.int64()),  # absolute: file start + position
        ("size", pa.int64()),  # TOTALSIZE (declared size for blank and damaged rows)
        ("magic", pa.int32()),
        ("version", pa.int8()),  # 1 or 2 for records
        ("body_crc", pa.int32()),
        ("queue_id", pa.int32()),
        ("flag", pa.int32()),
        ("queue_offset", pa.int64()),
        ("sys_flag", pa.int32()),
        ("born_ts", pa.int64()),
        ("born_host", pa.string()),  # "ip:port", "[ipv6]:port"
        ("store_ts", pa.int64()),
        ("store_host", pa.string()),
        ("reconsume_times", pa.int32()),
        ("prepared_tx_offset", pa.int64()),
        ("body_len", pa.int32()),
        ("crc_ok", pa.bool_()),
        ("topic", pa.string()),
        ("uniq_key", pa.string()),  # property UNIQ_KEY: the client's message id
        ("keys", pa.string()),  # property KEYS
        ("tags", pa.string()),  # property TAGS
        ("digest", pa.int64()),  # xxh3_64 (as signed) of the whole record: slave files are byte copies
        ("detail", pa.string()),  # JSON, for blank and damaged rows
    ]
)
ROW_KINDS = ("record", "blank", "corrupt_record", "torn_tail")
_FILE_NAME = re.compile(r"^\d{20}$")
_ZERO_CHECK_BLOCK = 16 * 1024 * 1024
DEFAULT_BATCH_BYTES = 8 * 1024 * 1024
"""Bytes of records per Arrow batch when scanning a file: bounds the memory of a 1 GiB file's scan."""

U8Array = npt.NDArray[np.uint8]
I64Array = npt.NDArray[np.int64]


class CommitLogFile(NamedTuple):
    start: int
    path: Path


@dataclass(frozen=True, slots=True)
class CommitLogRecord:
    """One decoded record (the slow, convenient path; the scanner is columnar)."""

    phys_offset: int
    size: int
    version: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    sys_flag: int
    born_ts: int
    born_host: str
    store_ts: int
    store_host: str
    reconsume_times: int
    prepared_tx_offset: int
    body: bytes
    topic: str
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get("UNIQ_KEY")


def message_length(*, body_len: int, topic_len: int, prop_len: int, born_v6: bool, store_v6: bool, v2: bool) -> int:
    """calMsgLength: the TOTALSIZE a record with these parts must declare."""
    return BASE_LENGTH + V6_EXTRA * born_v6 + V6_EXTRA * store_v6 + v2 + body_len + topic_len + prop_len


def body_crc(body: bytes | memoryview) -> int:
    """UtilAll.crc32: CRC-32/IEEE masked to 31 bits; 0 for an empty body."""
    return zlib.crc32(body) & 0x7FFFFFFF if len(body) else 0


def parse_properties(text: str) -> dict[str, str]:
    """MessageDecoder.string2messageProperties: ``k 0x01 v 0x02`` pairs; empty keys or values are dropped."""
    props: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        key, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep and key and value:
            props[key] = value
    return props


def format_host(raw: bytes) -> str:
    """The 8- or 20-byte host field as ``ip:port`` (``[ipv6]:port``)."""
    port = int.from_bytes(raw[-4:], "big", signed=True)
    ip = ipaddress.ip_address(raw[:-4])
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


def _bad(message: str, offset: int) -> CorruptRecordError:
    return CorruptRecordError(message, offset=offset)


def decode_record(data: bytes | memoryview | mmap.mmap, pos: int, *, file_start: int) -> CommitLogRecord:
    """Decode and check the record at `pos`; raise CorruptRecordError (absolute offset) if it is damaged."""
    mv = memoryview(data)
    at = file_start + pos
    if len(mv) - pos < HEAD.size:
        raise _bad("record head cut short", at)
    size, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts = HEAD.unpack_from(mv, pos)
    if magic not in (MAGIC_V1, MAGIC_V2):
        raise _bad(f"illegal magic code {magic & 0xFFFFFFFF:#010x}", at)
    if not BASE_LENGTH <= size <= len(mv) - pos:
        raise _bad(f"TOTALSIZE {size} out of range", at)
    rec = mv[pos : pos + size]
    try:
        cur = HEAD.size
        born_v6, store_v6 = bool(sys_flag & BORNHOST_V6_FLAG), bool(sys_flag & STOREHOST_V6_FLAG)
        host = HOST_V6 if born_v6 else HOST_V4
        born_raw = bytes(rec[cur : cur + host.size])
        cur += host.size
        (store_ts,) = I64.unpack_from(rec, cur)
        cur += I64.size
        host = HOST_V6 if store_v6 else HOST_V4
        store_raw = bytes(rec[cur : cur + host.size])
        cur += host.size
        reconsume, prepared, body_len = AFTER_STORE_HOST.unpack_from(rec, cur)
        cur += AFTER_STORE_HOST.size
        if body_len < 0:
            raise _bad(f"negative BODYLEN {body_len}", at)
        body = bytes(rec[cur : cur + body_len])
        cur += body_len
        v2 = magic == MAGIC_V2
        (topic_len,) = (I16 if v2 else I8).unpack_from(rec, cur)
        cur += 2 if v2 else 1
        topic = bytes(rec[cur : cur + topic_len]).decode("utf-8", "replace")
        cur += topic_len
        (prop_len,) = I16.unpack_from(rec, cur)
        cur += I16.size
        props = bytes(rec[cur : cur + prop_len]).decode("utf-8", "replace")
    except struct.error as err:
        raise _bad(f"record structure runs past TOTALSIZE ({err})", at) from None
    want = message_length(
        body_len=body_len, topic_len=topic_len, prop_len=prop_len, born_v6=born_v6, store_v6=store_v6, v2=v2
    )
    if topic_len < 0 or prop_len < 0 or want != size:
        raise _bad(f"TOTALSIZE {size} differs from the computed length {want}", at)
    if phys != at:
        raise _bad(f"PHYSICALOFFSET {phys} differs from the record's offset", at)
    if body_crc(body) != crc:
        raise _bad(f"body CRC {crc} differs from the computed {body_crc(body)}", at)
    return CommitLogRecord(
        phys_offset=at,
        size=size,
        version=2 if v2 else 1,
        body_crc=crc,
        queue_id=queue_id,
        flag=flag,
        queue_offset=queue_offset,
        sys_flag=sys_flag,
        born_ts=born_ts,
        born_host=format_host(born_raw),
        store_ts=store_ts,
        store_host=format_host(store_raw),
        reconsume_times=reconsume,
        prepared_tx_offset=prepared,
        body=body,
        topic=topic,
        properties=parse_properties(props),
    )


def iter_records(data: bytes | memoryview | mmap.mmap, *, file_start: int) -> Iterator[CommitLogRecord]:
    """Every record of one file until BLANK or the zero tail; a damaged record raises CorruptRecordError."""
    mv = memoryview(data)
    pos = 0
    while len(mv) - pos >= FRAME.size:
        size, magic = FRAME.unpack_from(mv, pos)
        if magic == MAGIC_BLANK or (size == 0 and magic == 0):
            return
        rec = decode_record(mv, pos, file_start=file_start)
        yield rec
        pos += rec.size


# --- the columnar scanner -------------------------------------------------------------------------------
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


def _walk(mv: memoryview, pos: int, end: int, budget_end: int) -> tuple[list[int], int]:
    """Record starts from `pos` while each frame is a v1/v2 magic with a size that fits; stop past budget_end."""
    starts: list[int] = []
    append = starts.append
    unpack = FRAME.unpack_from
    last = end - FRAME.size
    while pos <= last and pos < budget_end:
        size, magic = unpack(mv, pos)
        if (magic != MAGIC_V1 and magic != MAGIC_V2) or size < BASE_LENGTH or size > end - pos:
            break
        append(pos)
        pos += size
    return starts, pos


_ROW = 16
"""Bytes copied per row by _rows: numpy copies 16-byte rows of a sliding window view fast."""


def _rows(buf: U8Array, at: I64Array, width: int) -> U8Array:
    """buf[at[i] : at[i] + width] for each i as an (n, width) array; bytes outside the buffer read as zero."""
    n = len(at)
    limit = len(buf) - width
    if limit < 0:
        padded = np.zeros(width, dtype=np.uint8)
        padded[: len(buf)] = buf
        return _rows(padded, at, width)
    out = np.lib.stride_tricks.sliding_window_view(buf, width)[np.clip(at, 0, limit)]
    unsafe = np.flatnonzero((at < 0) | (at > limit)) if n and (at.min() < 0 or at.max() > limit) else ()
    for i in unsafe:  # a few rows at the very end of the data at most
        lo = int(at[i])
        piece = buf[max(lo, 0) : max(lo + width, 0)]
        out[i] = 0
        out[i, max(-lo, 0) : max(-lo, 0) + len(piece)] = piece
    return out


def _gather(buf: U8Array, at: I64Array, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """The `dtype`-shaped bytes at each position of `at`, one row per position."""
    width = max(dtype.itemsize, _ROW)
    rows = _rows(buf, at, width)
    if width != dtype.itemsize:
        rows = np.ascontiguousarray(rows[:, : dtype.itemsize])
    return rows.view(dtype)[:, 0]


def _native(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    return values.astype(values.dtype.newbyteorder("="))


def _validity(mask: npt.NDArray[np.bool_] | None) -> pa.Buffer | None:
    return None if mask is None or mask.all() else pa.py_buffer(np.packbits(mask, bitorder="little"))


def _views(
    data: pa.Buffer,
    buf: U8Array,
    at: I64Array,
    lengths: I64Array,
    valid: npt.NDArray[np.bool_] | None = None,
    base: int = 0,
) -> pa.Array:
    """A binary_view array of buf[at[i] : at[i] + lengths[i]] pointing into `data` (no bytes copied).

    A view is 16 bytes: length i32, then either the value inline (up to 12 bytes) or its first 4 bytes,
    a buffer index and an i32 offset, so `data` is the buffer from `base` on (a batch, not a >2 GiB file).
    """
    n = len(at)
    lengths = np.where(lengths > 0, lengths, 0).astype(np.int32)
    first = _rows(buf, at, _ROW)[:, :12] * (np.arange(12) < lengths[:, None])
    inline = np.ascontiguousarray(first).view("<i4")
    long_value = lengths > 12
    views = np.empty((n, 4), dtype="<i4")
    views[:, 0] = lengths
    views[:, 1] = inline[:, 0]  # the inline bytes 0..3, or the prefix: the same bytes
    views[:, 2] = np.where(long_value, 0, inline[:, 1])
    views[:, 3] = np.where(long_value, at - base, inline[:, 2])
    return pa.Array.from_buffers(pa.binary_view(), n, [_validity(valid), pa.py_buffer(views), data.slice(base)])


def _as_text(values: pa.Array) -> pa.Array:
    try:
        return values.cast(pa.string())
    except pa.ArrowInvalid:  # not UTF-8 (the CRC does not cover topic or properties): decode row by row
        return pa.array([None if v is None else v.decode("utf-8", "replace") for v in values.to_pylist()], pa.string())


def _hosts(ip: npt.NDArray[Any], port: npt.NDArray[Any], v6: npt.NDArray[np.bool_], raw6: dict[int, bytes]) -> pa.Array:
    """``ip:port`` per row, formatted once per distinct host (IPv6 rows come pre-sliced in `raw6`)."""
    key = (ip.astype(np.uint64) << np.uint64(32)) | port.astype(np.uint32).astype(np.uint64)
    enc = pc.dictionary_encode(pa.array(key, pa.uint64()))
    labels = [format_host(int(k).to_bytes(8, "big")) for k in enc.dictionary.to_pylist()]
    hosts = pa.array(labels, pa.string()).take(enc.indices)
    if v6.any():
        rows = hosts.to_pylist()
        for i, raw in raw6.items():
            rows[i] = format_host(raw)
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
) -> tuple[dict[str, npt.NDArray[Any]], dict[str, dict[int, bytes]]]:
    """BORNHOST .. BODYLEN per row when some host is IPv6; IPv6 host bytes are returned per row."""
    mid_at = at + OFF_BORN_HOST
    n = len(at)
    cols: dict[str, npt.NDArray[Any]] = {
        "born_ip": np.zeros(n, np.uint32),
        "born_port": np.zeros(n, np.int32),
        "store_ts": np.zeros(n, np.int64),
        "store_ip": np.zeros(n, np.uint32),
        "store_port": np.zeros(n, np.int32),
        "reconsume_times": np.zeros(n, np.int32),
        "prepared_tx_offset": np.zeros(n, np.int64),
        "body_len": np.zeros(n, np.int32),
        "middle_size": np.zeros(n, np.int64),
    }
    raw6: dict[str, dict[int, bytes]] = {"born": {}, "store": {}}
    for (b6, s6), dtype in _MIDDLE.items():
        rows = np.flatnonzero((born_v6 == b6) & (store_v6 == s6))
        if not len(rows):
            continue
        m = _gather(buf, mid_at[rows], dtype)
        for name in ("born_port", "store_ts", "store_port", "reconsume_times", "prepared_tx_offset", "body_len"):
            cols[name][rows] = _native(m[name])
        cols["middle_size"][rows] = dtype.itemsize
        for side, v6 in (("born", b6), ("store", s6)):
            if v6:
                ports = _native(m[f"{side}_port"]).tolist()
                for i, ip, port in zip(rows.tolist(), m[f"{side}_ip"].tolist(), ports, strict=True):
                    raw6[side][i] = bytes(ip) + port.to_bytes(4, "big", signed=True)
            else:
                cols[f"{side}_ip"][rows] = _native(m[f"{side}_ip"])
    return cols, raw6


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


def _fields(
    data: pa.Buffer, buf: U8Array, starts: list[int], stop: int, file_start: int
) -> tuple[_Columns, dict[str, dict[int, bytes]]]:
    """Every field of the walked records (which are contiguous and end at `stop`), and the checks."""
    at = np.asarray(starts, dtype=np.int64)
    h = _heads(data, at, stop) if len(at) else np.zeros(0, dtype=_V4V4)
    a: dict[str, npt.NDArray[Any]] = {name: _native(h[name]) for name in _HEAD_DTYPE.names or ()}
    born_v6 = (a["sys_flag"] & BORNHOST_V6_FLAG) != 0
    store_v6 = (a["sys_flag"] & STOREHOST_V6_FLAG) != 0
    if born_v6.any() or store_v6.any():
        mid, raw6 = _middle(buf, at, born_v6, store_v6)
    else:
        mid = {name: _native(h[name]) for name in _MIDDLE[False, False].names or ()}
        mid["middle_size"] = np.full(len(at), _MIDDLE[False, False].itemsize, dtype=np.int64)
        raw6 = {"born": {}, "store": {}}
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
    return cols, raw6


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


_WANTED = {"uniq_key": b"UNIQ_KEY", "keys": b"KEYS", "tags": b"TAGS"}


def _properties(
    data: pa.Buffer, buf: U8Array, props_at: I64Array, prop_len: I64Array, base: int
) -> dict[str, pa.Array]:
    """UNIQ_KEY, KEYS and TAGS per row, as string2messageProperties reads them, without a per-row loop.

    The properties of all rows are copied into one blob; every 0x01 that is the first of its item ends a
    key (the item starts after the previous 0x02 or at the row's start), its value runs to the next 0x02
    or the row's end. Keys are compared as integers; a repeated key keeps its last value, empty values
    are dropped, as the Java parser does.
    """
    n = len(props_at)
    blob_arr = _views(data, buf, props_at, prop_len, base=base).cast(pa.large_binary())
    row_off = np.frombuffer(blob_arr.buffers()[1], dtype=np.int64, count=n + 1, offset=blob_arr.offset * 8)
    blob_buf = blob_arr.buffers()[2]
    if blob_buf is None:
        return {name: pa.nulls(n, pa.string()) for name in _WANTED}
    blob = np.frombuffer(blob_buf, dtype=np.uint8)[: int(row_off[-1])]
    ones = np.flatnonzero(blob == 1)
    twos = np.flatnonzero(blob == 2)
    row = np.searchsorted(row_off, ones, side="right") - 1
    before = np.searchsorted(twos, ones)  # twos[before - 1] < q < twos[before]
    item_start = np.maximum(np.where(before > 0, twos[np.maximum(before - 1, 0)] + 1, 0), row_off[row])
    prev_one = np.concatenate(([-1], ones[:-1]))
    first_in_item = prev_one < item_start
    key_len = ones - item_start
    value_end = np.minimum(
        np.where(before < len(twos), twos[np.minimum(before, len(twos) - 1)], row_off[-1]), row_off[row + 1]
    )
    # The first 8 bytes of each key as one integer; shorter keys are compared on their low bytes.
    key8 = np.ascontiguousarray(_rows(blob, item_start, _ROW)[:, :8]).view("<u8")[:, 0]
    usable = first_in_item & (value_end > ones + 1)
    out = {}
    for name, key in _WANTED.items():
        width = len(key)
        mask = np.uint64((1 << (8 * width)) - 1)
        code = np.frombuffer(key.ljust(8, b"\0"), dtype="<u8")[0]
        hit = usable & (key_len == width) & ((key8 & mask) == code)
        start = np.zeros(n, dtype=np.int64)
        stop = np.zeros(n, dtype=np.int64)
        start[row[hit]] = ones[hit] + 1  # fancy assignment: the last of repeated keys wins
        stop[row[hit]] = value_end[hit]
        found = stop > start
        out[name] = _as_text(_views(blob_buf, blob, start, stop - start, found))
    return out


def _record_batch(
    data: pa.Buffer, buf: U8Array, cols: _Columns, raw6: dict[str, dict[int, bytes]], digests: I64Array, file_start: int
) -> pa.RecordBatch:
    a, n = cols.a, len(cols.at)
    base = int(cols.at[0]) if n else 0
    props = _properties(data, buf, a["props_at"], a["prop_len"], base)
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
        "born_host": _hosts(a["born_ip"], a["born_port"], a["born_v6"], raw6["born"]),
        "store_ts": pa.array(a["store_ts"], pa.int64()),
        "store_host": _hosts(a["store_ip"], a["store_port"], a["store_v6"], raw6["store"]),
        "reconsume_times": pa.array(a["reconsume_times"], pa.int32()),
        "prepared_tx_offset": pa.array(a["prepared_tx_offset"], pa.int64()),
        "body_len": pa.array(a["body_len"], pa.int32()),
        "crc_ok": pa.array(np.ones(n, dtype=bool), pa.bool_()),
        "topic": _as_text(_views(data, buf, a["topic_at"], a["topic_len"], base=base)),
        **props,
        "digest": pa.array(digests, pa.int64()),
        "detail": pa.nulls(n, pa.string()),
    }
    return pa.RecordBatch.from_pydict(columns, schema=RECORD_SCHEMA)


def _special_row(
    kind: str,
    phys_offset: int,
    size: int | None,
    magic: int | None,
    detail: dict[str, Any] | None,
    crc_ok: bool | None = None,
) -> pa.RecordBatch:
    row: dict[str, Any] = {name: [None] for name in RECORD_SCHEMA.names}
    row.update(
        row_kind=[kind],
        phys_offset=[phys_offset],
        size=[size],
        magic=[magic],
        crc_ok=[crc_ok],
        detail=[None if detail is None else json.dumps(detail, sort_keys=True)],
    )
    return pa.RecordBatch.from_pydict(row, schema=RECORD_SCHEMA)


def _all_zero(buf: U8Array, start: int, end: int) -> bool:
    for lo in range(max(start, 0), end, _ZERO_CHECK_BLOCK):
        if np.count_nonzero(buf[lo : min(end, lo + _ZERO_CHECK_BLOCK)]):
            return False
    return True


def _damage(at: int, size: int | None, magic: int | None, detail: dict[str, Any], last_file: bool) -> pa.RecordBatch:
    """A record written only in part: torn_tail at the end of the last file, damage anywhere else."""
    if last_file:
        return _special_row("torn_tail", at, size, magic, detail)
    note = "record cut in a file that is not the last"
    return _special_row("corrupt_record", at, size, magic, {**detail, "note": note})


def _check_last_record(buf: U8Array, cols: _Columns, stop: int) -> None:
    """Fail the last record if its properties miss their final 0x02 and only zeros follow: a cut record.

    In a preallocated file the unwritten end of a record reads as zeros, and a cut inside the topic or
    the properties passes every check the broker makes (they are not under the body CRC). The encoder
    ends every property with 0x02, so a zero there, with nothing written after, is a record still in flight.
    """
    i = len(cols.at) - 1
    if cols.a["prop_len"][i] > 0 and buf[stop - 1] == 0 and _all_zero(buf, stop - 1, len(buf)):
        cols.fail(i, {"reason": "properties_not_terminated"})


def _partial_magic(magic: int) -> bool:
    """A record magic, or its first bytes followed by zeros: a frame whose magic was written in part."""
    value = magic & 0xFFFFFFFF
    for keep in (4, 3, 2, 1, 0):
        mask = (0xFFFFFFFF << (8 * (4 - keep))) & 0xFFFFFFFF
        if value & ~mask == 0 and value in (MAGIC_V1 & mask, MAGIC_V2 & mask):
            return True
    return False


def _stop_row(mv: memoryview, buf: U8Array, pos: int, file_start: int, last_file: bool) -> pa.RecordBatch | None:
    """What stopped the walk at `pos` (not a v1/v2 record that fits): BLANK, end of data, or damage."""
    at, end = file_start + pos, len(buf)
    if end - pos < FRAME.size:
        if _all_zero(buf, pos, end):
            return None
        return _damage(at, None, None, {"reason": "cut_in_frame", "available": end - pos}, last_file)
    size, magic = FRAME.unpack_from(mv, pos)
    if magic == MAGIC_BLANK:
        detail = None if pos + size == end else {"declared": size, "bytes_left": end - pos}
        return _special_row("blank", at, size, magic, detail)
    if size == 0 and magic == 0:
        if _all_zero(buf, pos, end):
            return None  # the preallocated zero tail: end of data
        return _special_row("corrupt_record", at, 0, 0, {"reason": "zero_gap_before_data"})
    known = _partial_magic(magic)
    if known and size > end - pos:
        return _damage(at, size, magic, {"reason": "cut_by_end_of_data", "available": end - pos}, last_file)
    # Written only in part: the record's last byte (or, for a nonsense size, anything past the frame) and
    # everything after it are still zeros.
    written_end = pos + size - 1 if FRAME.size < size <= end - pos else pos + FRAME.size
    if known and _all_zero(buf, written_end, end):
        return _damage(at, size, magic, {"reason": "cut", "declared": size}, last_file)
    if magic in (MAGIC_V1, MAGIC_V2):
        return _special_row("corrupt_record", at, size, magic, {"reason": "size_out_of_range", "declared": size})
    return _special_row("corrupt_record", at, size, magic, {"reason": "illegal_magic", "magic": magic & 0xFFFFFFFF})


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
    """
    mv = memoryview(data).cast("B")
    buf: U8Array = np.frombuffer(mv, dtype=np.uint8)
    whole = pa.py_buffer(mv)
    # Slices of bytes and mmap are copies, cheaper than memoryview slices for small records.
    piece: Callable[[slice], Any] = data.__getitem__ if isinstance(data, bytes | mmap.mmap) else mv.__getitem__
    end = len(buf)
    pos = 0
    while True:
        starts, stop = _walk(mv, pos, end, pos + batch_bytes)
        cols, raw6 = _fields(whole, buf, starts, stop, file_start)
        more = bool(starts) and stop >= pos + batch_bytes
        if not more and starts and cols.first_bad is None:
            _check_last_record(buf, cols, stop)
        digests = _crc_and_digest(piece, cols)
        if len(digests):
            yield _record_batch(whole, buf, cols.head(len(digests)), raw6, digests, file_start)
        bad = cols.first_bad
        if bad is not None:
            bad_at, bad_size, bad_magic = starts[bad], int(cols.a["size"][bad]), int(cols.a["magic"][bad])
            if _all_zero(buf, bad_at + bad_size - 1, end):
                yield _damage(
                    file_start + bad_at, bad_size, bad_magic, {"reason": "cut", "check": cols.bad_detail}, last_file
                )
            else:
                crc_ok = False if cols.bad_detail.get("reason") == "body_crc" else None
                yield _special_row("corrupt_record", file_start + bad_at, bad_size, bad_magic, cols.bad_detail, crc_ok)
            return
        if more:
            pos = stop
            continue
        row = _stop_row(mv, buf, stop, file_start, last_file)
        if row is not None:
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


def commitlog_files(store_dir: str | Path) -> list[CommitLogFile]:
    """The commit-log files of a store, by start offset.

    `store_dir` is a store root (holding ``commitlog/``), a commit-log directory itself, or several of
    either joined with ``;`` as in the broker's storePathCommitLog (MultiPathMappedFileQueue).
    """
    found: dict[int, Path] = {}
    for part in str(store_dir).split(";"):
        if not part.strip():
            continue
        root = Path(part.strip())
        folder = root / "commitlog" if (root / "commitlog").is_dir() else root
        if not folder.is_dir():
            continue
        for p in folder.iterdir():
            if _FILE_NAME.match(p.name) and p.is_file():
                found.setdefault(int(p.name), p)
    return [CommitLogFile(start, found[start]) for start in sorted(found)]


def offset_to_file_name(offset: int) -> str:
    """UtilAll.offset2FileName: 20 zero-padded digits."""
    return f"{offset:020d}"


def parse_file(
    path: str | Path, *, file_start: int | None = None, last_file: bool = True, batch_bytes: int = DEFAULT_BATCH_BYTES
) -> Iterator[pa.RecordBatch]:
    """Scan one file from disk in batches (mmap: a 1 GiB file costs page cache, not process memory)."""
    p = Path(path)
    start = int(p.name) if file_start is None else file_start
    with p.open("rb") as fh:
        if p.stat().st_size == 0:
            return
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        mm.madvise(mmap.MADV_SEQUENTIAL)
        yield from iter_batches(mm, file_start=start, last_file=last_file, batch_bytes=batch_bytes)
    finally:
        try:
            mm.close()
        except BufferError:  # an exported view is still alive somewhere; the mapping goes with it
            pass


def file_data_end(path: str | Path, *, file_start: int | None = None, last_file: bool = True) -> int:
    p = Path(path)
    start = int(p.name) if file_start is None else file_start
    return data_end(list(parse_file(p, file_start=start, last_file=last_file)), start)


def max_offset(store_dir: str | Path) -> int | None:
    """The store's max physical offset (MappedFileQueue.getMaxOffset) from its files; None without files."""
    files = commitlog_files(store_dir)
    if not files:
        return None
    last = files[-1]
    return file_data_end(last.path, file_start=last.start)


def min_offset(store_dir: str | Path) -> int | None:
    """The store's min physical offset: the first file's start (CommitLog.getMinOffset); None without files."""
    files = commitlog_files(store_dir)
    return files[0].start if files else None
