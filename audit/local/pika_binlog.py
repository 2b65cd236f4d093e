"""A byte-exact imitation of Pika's binlog writer, for the tests and the bench (the auditor never writes).

It follows, step by step, `Binlog::Put` / `Produce` / `EmitPhysicalRecord` / `AppendPadding` /
`SetProducerStatus` (src/pika_binlog.cc L175-406), `Version::StableSave` (L35-58) and the mmap'd
`PosixMmapFile` that holds the open file (src/pstd/src/env.cc L342-420), at OpenAtomFoundation/pika
@ 218b68bb; docs/formats/pika-binlog.md. The byte layout tables are in audit/sources/pika/binlog_format.py.

What a running Pika leaves on disk, and so what this writes:
- `manifest`: 64 KiB, the first 24 bytes `<IQQI` (pro_num, pro_offset, logic_id, term), rewritten after
  every item.
- `write2file<N>`: items framed in 64 KiB blocks. The file being written is preallocated (zero-filled)
  in 4 MiB steps past its logical end; a file is trimmed to its logical size when it is closed, which
  Pika does on rollover and shutdown (a crash leaves the zero tail).
- Each item embeds the producer position read *before* the rollover check, so the first item of
  write2file<N+1> carries (N, size of write2file<N>).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

from audit.sources.pika.binlog_format import (
    BLOCK_SIZE,
    FILE_PREFIX,
    HEADER_SIZE,
    ITEM_HEADER,
    ITEM_HEADER_SIZE,
    ITEM_TYPE_FIRST,
    MANIFEST,
    MANIFEST_NAME,
    MANIFEST_SIZE,
    PHYSICAL_HEADER,
    RecordType,
    read_manifest,
)

MMAP_BOUND_SIZE = 4 << 20  # kMmapBoundSize: the step a PosixMmapFile maps and fallocates in
_RESUME_MAP_GROWTH = 1 << 20  # PosixMmapFile grows its first map by 1 MiB steps to cover a reopened file
PADDING_PROTOCOL_SIZE = 22  # PADDING_BINLOG_PROTOCOL_SIZE: the RESP around a padding command's argument
PADDING_LENGTH_DIGITS = 5  # SPACE_STROE_PARAMETER_LENGTH: its length is written zero-padded to 5 digits


def resp_encode(args: Sequence[bytes]) -> bytes:
    """`Cmd::ToRedisProtocol`: `*N\\r\\n` then `$len\\r\\narg\\r\\n` per argument."""
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        parts.append(b"$%d\r\n%b\r\n" % (len(a), a))
    return b"".join(parts)


def raw_item(
    args: Sequence[bytes], exec_time: int, term: int, logic_id: int, prev_filenum: int, prev_offset: int
) -> bytes:
    """`BinlogEncode`: the 34-byte item header and the RESP content of one command."""
    content = resp_encode(args)
    return (
        ITEM_HEADER.pack(
            ITEM_TYPE_FIRST, exec_time & 0xFFFFFFFF, term, logic_id, prev_filenum, prev_offset, len(content)
        )
        + content
    )


def padding_item(size: int) -> bytes:
    """`ConstructPaddingBinlog`: a `padding` command item of exactly `size` bytes, every header field 0."""
    least = ITEM_HEADER_SIZE + PADDING_PROTOCOL_SIZE + PADDING_LENGTH_DIGITS
    if not least <= size <= BLOCK_SIZE - HEADER_SIZE:
        raise ValueError(f"padding item size {size} outside [{least}, {BLOCK_SIZE - HEADER_SIZE}]")
    content_len = size - ITEM_HEADER_SIZE
    n = content_len - PADDING_PROTOCOL_SIZE - PADDING_LENGTH_DIGITS
    content = b"*2\r\n$7\r\npadding\r\n$%05d\r\n%b\r\n" % (n, b"*" * n)
    return ITEM_HEADER.pack(ITEM_TYPE_FIRST, 0, 0, 0, 0, 0, content_len) + content


def physical_header(length: int, seconds: int, record_type: int) -> bytes:
    """The 8-byte fragment header `EmitPhysicalRecord` writes."""
    return PHYSICAL_HEADER.pack(length & 0xFFFF, length >> 16, seconds & 0xFFFFFFFF, record_type)


class BinlogWriter:
    """Writes one DB's `write2file<N>` files and `manifest` in `log_dir` the way Pika's `Binlog` does.

    An existing `manifest` is resumed from, as Pika does on restart (writing continues at its
    pro_offset, over the zero tail). `prealloc_step` stands in for the 4 MiB mmap step so tests can keep
    files small; `clock` returns unix seconds (physical header time and the default exec_time).
    """

    def __init__(
        self,
        log_dir: Path,
        *,
        file_size: int = 100 << 20,
        preallocate: bool = True,
        prealloc_step: int = MMAP_BOUND_SIZE,
        term: int = 0,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.log_dir = Path(log_dir)
        self.file_size = file_size
        self.preallocate = preallocate
        self.prealloc_step = prealloc_step
        self._clock = clock or (lambda: int(time.time()))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        manifest = self.log_dir / MANIFEST_NAME
        resume = manifest.exists()
        self._mfd = os.open(manifest, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644)
        if os.fstat(self._mfd).st_size < MANIFEST_SIZE:
            os.ftruncate(self._mfd, MANIFEST_SIZE)
        self._fd = -1
        if resume:
            m = read_manifest(self.log_dir)
            self.pro_num, self.pro_offset, self.logic_id, self.term = m.pro_num, m.pro_offset, m.logic_id, m.term
            self._open(self.pro_num, write_len=m.pro_offset)
        else:
            self.pro_num, self.pro_offset, self.logic_id, self.term = 0, 0, 0, term
            self._open(0)
            self._save()

    # -- files ------------------------------------------------------------------------------------------

    def path(self, filenum: int) -> Path:
        return self.log_dir / f"{FILE_PREFIX}{filenum}"

    def _open(self, filenum: int, *, write_len: int | None = None) -> None:
        """NewWritableFile (O_TRUNC), or AppendWritableFile at `write_len` when reopening."""
        if write_len is None:
            self._fd = os.open(self.path(filenum), os.O_CREAT | os.O_RDWR | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            self._size, self._map_size = 0, self.prealloc_step
        else:
            self._fd = os.open(self.path(filenum), os.O_RDWR | os.O_CLOEXEC)
            self._size, self._map_size = write_len, self.prealloc_step
            while self._map_size < write_len:
                self._map_size += _RESUME_MAP_GROWTH
        self._mapped_end = 0  # nothing is mapped before the first append
        self.block_offset = self._size % BLOCK_SIZE  # InitLogFile

    def _close_file(self, *, trim: bool) -> None:
        if self._fd < 0:
            return
        if trim and self._mapped_end > self._size:
            os.ftruncate(self._fd, self._size)  # PosixMmapFile::Close trims the unused mapped tail
        os.close(self._fd)
        self._fd = -1

    def _write(self, data: bytes | bytearray) -> None:
        end = self._size + len(data)
        if self.preallocate and end > self._mapped_end:
            while self._mapped_end < end:
                self._mapped_end += self._map_size
            if os.fstat(self._fd).st_size < self._mapped_end:
                os.ftruncate(self._fd, self._mapped_end)  # posix_fallocate: zeros up to the mapped end
        else:
            self._mapped_end = max(self._mapped_end, end)
        os.pwrite(self._fd, data, self._size)
        self._size = end

    def _save(self) -> None:
        os.pwrite(self._mfd, MANIFEST.pack(self.pro_num, self.pro_offset, self.logic_id, self.term), 0)

    # -- Pika's Binlog ----------------------------------------------------------------------------------

    @property
    def position(self) -> tuple[int, int]:
        """The producer status (pro_num, pro_offset): INFO's binlog_offset."""
        return self.pro_num, self.pro_offset

    @property
    def size(self) -> int:
        """Logical size of the file being written (`PosixMmapFile::Filesize`)."""
        return self._size

    def append(self, args: Sequence[bytes], exec_time: int | None = None) -> tuple[int, int, int]:
        """`Binlog::Put(cmd)`: encode one command and write it; returns (filenum, start, end) in the file."""
        et = self._clock() if exec_time is None else exec_time
        return self.put_item(raw_item(args, et, self.term, self.logic_id + 1, self.pro_num, self.pro_offset))

    def append_padding_command(self, size: int) -> tuple[int, int, int]:
        """Write Pika's `padding` command item of `size` bytes (header fields all 0)."""
        return self.put_item(padding_item(size))

    def put_item(self, item: bytes) -> tuple[int, int, int]:
        """`Binlog::Put(const char*, len)`: roll over if the file is past file_size, produce, save the manifest.

        The bytes are written as given, so tests can plant items Pika would never encode.
        """
        if self._size > self.file_size:
            self._close_file(trim=True)
            self.pro_num += 1
            self._open(self.pro_num)
            self.pro_offset = 0
            self._save()
        start, pro_offset = self._produce(item)
        self.pro_offset = pro_offset
        self.logic_id += 1
        self._save()
        return self.pro_num, start, self._size

    def _produce(self, item: bytes) -> tuple[int, int]:
        """`Produce`: fragment `item` into the blocks; returns (start in the file, new pro_offset)."""
        out = bytearray()
        temp = self.pro_offset
        left, ptr, begin, start = len(item), 0, True, -1
        while True:
            leftover = BLOCK_SIZE - self.block_offset
            if leftover < HEADER_SIZE:
                out += bytes(leftover)  # the trailer
                temp += leftover
                self.block_offset = 0
            if start < 0:
                start = self._size + len(out)
            avail = BLOCK_SIZE - self.block_offset - HEADER_SIZE
            n = min(left, avail)
            end = left == n
            if begin:
                record_type = RecordType.FULL if end else RecordType.FIRST
            else:
                record_type = RecordType.LAST if end else RecordType.MIDDLE
            out += physical_header(n, self._clock(), record_type)
            out += item[ptr : ptr + n]
            self.block_offset += HEADER_SIZE + n
            temp += HEADER_SIZE + n
            ptr += n
            left -= n
            begin = False
            if left <= 0:
                break
        self._write(out)
        return start, temp

    def set_producer_status(self, filenum: int, offset: int, term: int = 0, index: int = 0) -> None:
        """`SetProducerStatus`, what a slave does after a full sync from the master's (filenum, offset).

        Deletes write2file0 and write2file<filenum>, recreates the latter filled with type-6 padding up to
        `offset` (one record per 64 KiB block, the last partial; a last piece under 8 bytes is left out
        and pro_offset is lowered by it), and sets the manifest to (filenum, offset, index, term).
        """
        if offset < 4:  # "offset smaller than the first header"
            offset = 0
        self._close_file(trim=True)
        for n in {0, filenum}:
            self.path(n).unlink(missing_ok=True)
        self._open(filenum)
        if offset >= HEADER_SIZE:  # AppendPadding
            now = self._clock()
            left = offset
            while left > 0:
                size = min(left, BLOCK_SIZE)
                if size < HEADER_SIZE:
                    break
                bsize = size - HEADER_SIZE
                self._write(physical_header(bsize, now, RecordType.BAD_RECORD) + b"*" * bsize)
                left -= size
            offset -= left
        self.pro_num, self.pro_offset, self.term, self.logic_id = filenum, offset, term, index
        self._save()
        self.block_offset = self._size % BLOCK_SIZE

    def close(self, *, trim: bool = True) -> None:
        """Pika's shutdown (trim=True trims the zero tail) or a crash (trim=False leaves it)."""
        self._close_file(trim=trim)
        if self._mfd >= 0:
            os.close(self._mfd)
            self._mfd = -1

    def __enter__(self) -> BinlogWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
