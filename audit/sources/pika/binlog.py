"""The Pika binlog scanner: one file's bytes in, Arrow rows of RECORD_SCHEMA out. Pure.

The byte layout, the row kinds and what counts as damage are in audit/sources/pika/binlog_format.py
(and docs/formats/pika-binlog.md); this module walks the 64 KiB blocks, reassembles fragments, decodes
each item's header and RESP command, and reports damage and cut records where they are. The rows'
columns are audit/sources/pika/binlog_rows.py's.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

import pyarrow as pa

from audit.sources.pika.binlog_format import (
    BLOCK_SIZE,
    HEADER_SIZE,
    ITEM_HEADER_SIZE,
    KEY_PREFIX_MAX,
    MAX_FRAGMENT,
    ROW_CORRUPT,
    ROW_PADDING,
    ROW_TORN,
    RecordType,
)
from audit.sources.pika.binlog_resp import (
    BAD_HEAD,
    PREFIX,
    args_end,
)
from audit.sources.pika.binlog_rows import ITEM_CHECK, BinlogRows, h64

# The same 8 bytes as one little-endian word, for the hot loop:
# length = w & 0xFFFFFF, seconds = (w >> 24) & 0xFFFFFFFF, type = w >> 56; an all-zero header is w == 0.
_HEADER_WORD = struct.Struct("<Q")
_LENGTH_MASK = 0xFFFFFF
_TYPE_SHIFT = 56
_CRLF = b"\r\n"
_B = BLOCK_SIZE
_MASK = BLOCK_SIZE - 1
_LAST_HEADER_AT = BLOCK_SIZE - HEADER_SIZE  # a header at or past this block offset is skipped by Pika's reader
_CUT_BY_ZEROS = "record cut where the zero-filled tail starts"
_ZERO_GAP = "zero-filled gap before more data"
_NONZERO = re.compile(rb"[^\x00]")
_NOT_LAST = "record cut in a file that is not the last"


class _Scan(BinlogRows):
    """Columns for one file and the little state that crosses chunk boundaries.

    `run` scans one buffer whose first byte is at file offset `base` (a block boundary, so `i & _MASK`
    is the offset inside the block). Good Full records are handled inline by the hot loop; everything
    else (block ends, fragments, padding, damage, the end of data) goes through `_step`.

    Per row the hot loop appends only start, end, the raw 34-byte item header (decoded in one numpy
    pass by `batch`), digest, command and key. Rows that are not good records are rare, so their kind,
    detail and null item fields are kept aside in `special`.
    """

    def __init__(self, db: int, filenum: int, last: bool = True) -> None:
        super().__init__(db, filenum)
        self.last = last  # the side's last file: a cut record at the end of its data is a torn tail
        self.pad_start = -1  # file offset of an open padding run, carried across chunks
        self.bad_start = -1  # file offset of an open corrupt region (skipping continuations), carried
        self.bad_detail = ""
        self.done = False  # the log ended (zero header, or the end of final data)
        self.resume = 0  # file offset to continue from when a run stopped for want of data

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
        check = ITEM_CHECK.unpack_from
        hash64 = h64
        prefix = PREFIX.match
        heads = self.heads
        value_head, last_arg = self.value_heads.get, self._last_arg
        head = self._head
        bad = BAD_HEAD
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
                                    else (v := q + 2 if got[3] == 1 else args_end(buf, q + 2, e, got[3] - 1)) >= 0
                                    and buf.startswith(value_head(e - v) or last_arg(e - v), v, e)
                                    and buf.endswith(_CRLF, e - 2, e)
                                )
                            ):
                                start(base + i)
                                end(base + e)
                                headers += buf[j:c]
                                digest(hash64(mv[c:e]))
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

    def _torn(self, start: int, end: int, why: str) -> None:
        """A record cut by the end of the data: a torn tail in the last file, damage in any other (Pika
        only moves to the next file after a whole record, and trims the file it leaves)."""
        if self.last:
            self._row(ROW_TORN, start, end, why)
        else:
            self._row(ROW_CORRUPT, start, end, f"{_NOT_LAST}: {why}")

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
            if buf[i : min(i + left, limit)].strip(b"\0"):  # a writer leaves only zeros here (but the header above)
                return self._corrupt(base + i, "non-zero bytes in a block trailer", base, i + left, buf, limit, final)
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
            self._torn(base + i, base + limit, "record header cut by the end of data")
        return self._finish()

    def _zero_header(self, buf: bytes, base: int, i: int, limit: int, final: bool) -> int:
        """An all-zero header: the end of the log, unless data follows (then a damaged, zeroed region).

        In a chunk whose rest is zeros, what follows is not known yet: it is read again with more data.
        """
        more = _NONZERO.search(buf, i, limit)
        if more is None:
            if not final:
                return self._need(base, i)
            if not self.last:  # Pika trims a file's zero tail when it moves on to the next file
                self._row(ROW_CORRUPT, base + i, base + limit, "zero-filled tail in a file that is not the last")
            return self._finish()
        at = more.start()
        self.bad_start, self.bad_detail = base + i, _ZERO_GAP
        return self._resync(buf, base, max(i + _B - (i & _MASK), at - (at & _MASK)), limit, final)

    def _torn_at_zeros(self, buf: bytes, base: int, start: int, limit: int, final: bool, why: str) -> int:
        """The record at buf[start] is cut and only zeros follow: torn up to where the zeros begin."""
        if not final:
            return self._need(base, start)  # the zeros may end in the next chunk: read on
        self._torn(base + start, base + start + max(1, len(buf[start:limit].rstrip(b"\0"))), why)
        return self._finish()

    def _torn_or_need(self, base: int, start: int, i: int, limit: int, final: bool, why: str) -> int:
        if not final:
            return self._need(base, start)
        self._torn(base + start, base + limit, why)
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
                self._torn(base + i, base + limit, "padding record cut by the end of data")
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
    data: bytes | bytearray | memoryview,
    *,
    db: int,
    filenum: int,
    logical_end: int | None = None,
    last: bool = True,
) -> pa.RecordBatch:
    """Every record, padding run and damaged region of one binlog file's bytes, as RECORD_SCHEMA rows.

    Reading stops at the first all-zero header or at `logical_end` (the manifest's pro_offset when this
    is the file being written). Damage becomes rows, never an exception. `last` False says a later file
    exists: a record cut at the end of the data, or a zero-filled tail, is then damage, not a torn tail.
    """
    buf = data if isinstance(data, bytes) else bytes(data)
    limit = len(buf) if logical_end is None else max(0, min(len(buf), logical_end))
    scan = _Scan(db, filenum, last)
    scan.run(buf, 0, 0, limit, True)
    return scan.batch()


def parse_file(
    path: Path | str,
    *,
    db: int,
    filenum: int,
    logical_end: int | None = None,
    chunk_size: int = 8 << 20,
    last: bool = True,
) -> pa.RecordBatch:
    """`scan_binlog` over a file read in block-aligned chunks, so memory stays near `chunk_size`.

    A record larger than a chunk makes the next read as large as needed; one still open at a chunk's
    end is read again from its start with the next chunk.
    """
    chunk = max(_B, chunk_size - chunk_size % _B)
    scan = _Scan(db, filenum, last)
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
