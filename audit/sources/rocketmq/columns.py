"""Reading one field of many commit-log records at once: numpy gathers and zero-copy Arrow views.

The scanner (audit/sources/rocketmq/scan.py) knows where every record of a batch starts; these helpers
turn "the bytes at these positions" into numpy columns and Arrow arrays without a Python loop per record.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

U8Array = npt.NDArray[np.uint8]
I64Array = npt.NDArray[np.int64]


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


NotUtf8 = dict[int, dict[str, str]]
"""Row -> column -> the hex of a value that is not UTF-8 (its text column holds it with U+FFFD)."""


def _as_text(values: pa.Array, name: str, not_utf8: NotUtf8) -> pa.Array:
    """The values as strings; those that are not UTF-8 (the CRC covers neither topic nor properties) are
    decoded with replacement characters and their raw bytes kept, as hex, in `not_utf8`."""
    try:
        return values.cast(pa.string())
    except pa.ArrowInvalid:
        pass
    out: list[str | None] = []
    for row, raw in enumerate(values.to_pylist()):
        try:
            out.append(None if raw is None else raw.decode("utf-8"))
        except UnicodeDecodeError:
            out.append(raw.decode("utf-8", "replace"))
            not_utf8.setdefault(row, {})[name] = raw.hex()
    return pa.array(out, pa.string())


_WANTED = {"uniq_key": b"UNIQ_KEY", "keys": b"KEYS", "tags": b"TAGS"}


def _properties(
    data: pa.Buffer, buf: U8Array, props_at: I64Array, prop_len: I64Array, base: int, not_utf8: NotUtf8
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
        out[name] = _as_text(_views(blob_buf, blob, start, stop - start, found), name, not_utf8)
    return out
