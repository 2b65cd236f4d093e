"""What ends a walk through a commit-log file that is not a record: the rows that say so. Pure.

The scanner (audit/sources/rocketmq/scan.py) walks records by their TOTALSIZE. Where that stops before
the end of the data, :func:`stop_row` tells a BLANK, the preallocated zero tail (no row), a record cut
by the end of the data or written only in part (`torn_tail` in the last file, `corrupt_record` in any
other), and damage (`corrupt_record` with the reason). The byte layout is in
audit/sources/rocketmq/format.py.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import pyarrow as pa

from audit.sources.rocketmq.columns import U8Array
from audit.sources.rocketmq.format import (
    BASE_LENGTH,
    BORNHOST_V6_FLAG,
    FRAME,
    I8,
    I16,
    MAGIC_BLANK,
    MAGIC_V1,
    MAGIC_V2,
    OFF_BORN_HOST,
    RECORD_SCHEMA,
    STOREHOST_V6_FLAG,
    V6_EXTRA,
)

_ZERO_CHECK_BLOCK = 16 * 1024 * 1024


def special_row(
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


def all_zero(buf: U8Array, start: int, end: int) -> bool:
    for lo in range(max(start, 0), end, _ZERO_CHECK_BLOCK):
        if np.count_nonzero(buf[lo : min(end, lo + _ZERO_CHECK_BLOCK)]):
            return False
    return True


def damage(at: int, size: int | None, magic: int | None, detail: dict[str, Any], last_file: bool) -> pa.RecordBatch:
    """A record written only in part: torn_tail at the end of the last file, damage anywhere else."""
    if last_file:
        return special_row("torn_tail", at, size, magic, detail)
    note = "record cut in a file that is not the last"
    return special_row("corrupt_record", at, size, magic, {**detail, "note": note})


def _partial_magic(magic: int) -> bool:
    """A record or BLANK magic's first 0-3 bytes followed by zeros: a frame cut inside its MAGICCODE."""
    value = magic & 0xFFFFFFFF
    for keep in (3, 2, 1, 0):
        mask = (0xFFFFFFFF << (8 * (4 - keep))) & 0xFFFFFFFF
        if value & ~mask == 0 and value in (MAGIC_V1 & mask, MAGIC_V2 & mask, MAGIC_BLANK & mask):
            return True
    return False


def cut_short(buf: U8Array, at: int, size: int, has_props: bool) -> bool:
    """Whether a walked record that failed a check is one cut short, zeros standing for what is missing.

    Only zeros may follow from the byte that cannot be zero in a whole record: the 0x02 ending its
    properties, or without properties the topic's last byte (then PROPLEN 0 fills the last 2 bytes).
    """
    return all_zero(buf, at + size - (1 if has_props else 3), len(buf))


_I32 = struct.Struct(">i")


def _length_mismatch(mv: memoryview, pos: int, end: int, size: int) -> dict[str, Any] | None:
    """For a v1/v2 frame whose TOTALSIZE runs past the data: what its own length fields say, if it is not cut.

    A record cut by the end of the data declares more than is there; so does one whose TOTALSIZE is
    damaged. They differ when BODYLEN, TOPICLEN and PROPLEN are all readable: a cut record's computed
    length is its TOTALSIZE, a damaged one's is not (or a length is negative). None: consistent, or
    not enough bytes to tell.
    """
    if pos + OFF_BORN_HOST > end:
        return None
    (sys_flag,) = _I32.unpack_from(mv, pos + 36)
    magic = FRAME.unpack_from(mv, pos)[1]
    born_v6, store_v6 = bool(sys_flag & BORNHOST_V6_FLAG), bool(sys_flag & STOREHOST_V6_FLAG)
    body_len_at = pos + OFF_BORN_HOST + 8 + 8 + 8 + 12 + V6_EXTRA * (born_v6 + store_v6)
    if body_len_at + 4 > end:
        return None
    (body_len,) = _I32.unpack_from(mv, body_len_at)
    v2 = magic == MAGIC_V2
    topic_len_at = body_len_at + 4 + max(body_len, 0)
    if body_len < 0:
        return {"reason": "length_mismatch", "declared": size, "body_len": body_len}
    if topic_len_at + 1 + v2 > end:
        return None
    topic_len = I16.unpack_from(mv, topic_len_at)[0] if v2 else I8.unpack_from(mv, topic_len_at)[0]
    prop_len_at = topic_len_at + 1 + v2 + max(topic_len, 0)
    if topic_len >= 0 and prop_len_at + 2 > end:
        return None
    prop_len = I16.unpack_from(mv, prop_len_at)[0] if topic_len >= 0 else 0
    want = BASE_LENGTH + V6_EXTRA * (born_v6 + store_v6) + v2 + body_len + topic_len + prop_len
    if topic_len < 0 or prop_len < 0 or want != size:
        return {"reason": "length_mismatch", "declared": size, "computed": want}
    return None


def stop_row(mv: memoryview, buf: U8Array, pos: int, file_start: int, last_file: bool) -> pa.RecordBatch | None:
    """What stopped the walk at `pos` (not a v1/v2 record that fits): BLANK, end of data, or damage."""
    at, end = file_start + pos, len(buf)
    if end - pos < FRAME.size:  # a frame cut short: zeros stand for its missing bytes
        size, magic = FRAME.unpack_from(bytes(buf[pos:end]).ljust(FRAME.size, b"\0"))
        if size == 0 and magic == 0:
            return None
        if _partial_magic(magic) or magic in (MAGIC_V1, MAGIC_V2, MAGIC_BLANK):
            return damage(at, None, None, {"reason": "cut_in_frame", "available": end - pos}, last_file)
        return special_row("corrupt_record", at, None, None, {"reason": "illegal_frame", "available": end - pos})
    size, magic = FRAME.unpack_from(mv, pos)
    if magic == MAGIC_BLANK:
        detail = None if pos + size == end else {"declared": size, "bytes_left": end - pos}
        return special_row("blank", at, size, magic, detail)
    if size == 0 and magic == 0:
        if all_zero(buf, pos, end):
            return None  # the preallocated zero tail: end of data
        return special_row("corrupt_record", at, 0, 0, {"reason": "zero_gap_before_data"})
    if magic in (MAGIC_V1, MAGIC_V2):
        if size <= end - pos:  # the walk refused it: a size no record can have
            return special_row("corrupt_record", at, size, magic, {"reason": "size_out_of_range", "declared": size})
        mismatch = _length_mismatch(mv, pos, end, size)
        if mismatch is not None:
            return special_row("corrupt_record", at, size, magic, mismatch)
        return damage(at, size, magic, {"reason": "cut_by_end_of_data", "available": end - pos}, last_file)
    # Written only in part: the magic is cut, so nothing after it was written either.
    if _partial_magic(magic) and all_zero(buf, pos + FRAME.size, end):
        return damage(at, size, magic, {"reason": "cut", "declared": size}, last_file)
    return special_row("corrupt_record", at, size, magic, {"reason": "illegal_magic", "magic": magic & 0xFFFFFFFF})
