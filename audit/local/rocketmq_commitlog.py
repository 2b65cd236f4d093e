"""A byte-exact RocketMQ commit-log writer, for tests and the bench only (never used on real stores).

It encodes records as MessageExtEncoder does (layout in `audit.sources.rocketmq.format`), rolls files
the way DefaultAppendMessageCallback does (a record needs its length plus 8 bytes in the current file,
otherwise a BLANK fills the rest and the record starts the next file), names files by their 20-digit
start offset, and can copy a master's bytes into a slave store the way HA does (byte copies, cut anywhere).
The test suite checks it byte for byte against a real broker-written file.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from audit.sources.rocketmq.format import (
    AFTER_STORE_HOST,
    BORNHOST_V6_FLAG,
    COMPRESSED_FLAG,
    DEFAULT_FILE_SIZE,
    END_FILE_MIN_BLANK_LENGTH,
    FRAME,
    HEAD,
    HOST_V4,
    HOST_V6,
    I8,
    I16,
    I64,
    MAGIC_BLANK,
    MAGIC_V1,
    MAGIC_V2,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    STOREHOST_V6_FLAG,
    body_crc,
    message_length,
    offset_to_file_name,
)
from audit.sources.rocketmq.store import commitlog_files


@dataclass(frozen=True, slots=True)
class Message:
    """What a broker stores for one message, minus what the position decides (PHYSICALOFFSET)."""

    topic: str
    body: bytes = b""
    properties: Mapping[str, str] = field(default_factory=dict)
    queue_id: int = 0
    flag: int = 0
    queue_offset: int = 0
    sys_flag: int = 0
    """Other SYSFLAG bits (transaction type, compression type); the IPv6 bits follow the hosts."""
    born_ts: int = 0
    born_host: str = "127.0.0.1:0"
    store_ts: int = 0
    store_host: str = "127.0.0.1:10911"
    reconsume_times: int = 0
    prepared_tx_offset: int = 0
    version: int | None = None
    """1 or 2; None picks v2 for topics longer than 127 bytes (autoMessageVersionOnTopicLen)."""
    compressed: bool = False
    """Sets COMPRESSED_FLAG; the body is stored as given (already compressed by the client)."""
    body_crc: int | None = None
    """None: computed. Set it to plant a wrong CRC."""

    def but(self, **changes: object) -> Message:
        return replace(self, **changes)  # type: ignore[arg-type]


def properties_string(props: Mapping[str, str]) -> str:
    """MessageDecoder.messageProperties2String: ``key 0x01 value 0x02`` for each pair, in order."""
    return "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in props.items())


def _host(text: str) -> tuple[bytes, int, bool]:
    addr, _, port = text.rpartition(":")
    ip = ipaddress.ip_address(addr.strip("[]"))
    return ip.packed, int(port), ip.version == 6


def encoded_length(msg: Message) -> int:
    topic, props = msg.topic.encode(), properties_string(msg.properties).encode()
    return message_length(
        body_len=len(msg.body),
        topic_len=len(topic),
        prop_len=len(props),
        born_v6=_host(msg.born_host)[2],
        store_v6=_host(msg.store_host)[2],
        v2=_is_v2(msg, topic),
    )


def _is_v2(msg: Message, topic: bytes) -> bool:
    return msg.version == 2 if msg.version is not None else len(topic) > 127


def encode(msg: Message, phys_offset: int) -> bytes:
    """The record's bytes at absolute offset `phys_offset` (MessageExtEncoder.encode + doAppend's patches)."""
    born_ip, born_port, born_v6 = _host(msg.born_host)
    store_ip, store_port, store_v6 = _host(msg.store_host)
    topic, props = msg.topic.encode(), properties_string(msg.properties).encode()
    v2 = _is_v2(msg, topic)
    if (not v2 and len(topic) > 127) or len(topic) > 32767 or len(props) > 32767:
        raise ValueError("topic or properties too long for this record version")
    sys_flag = msg.sys_flag & ~(BORNHOST_V6_FLAG | STOREHOST_V6_FLAG | COMPRESSED_FLAG)
    sys_flag |= (BORNHOST_V6_FLAG if born_v6 else 0) | (STOREHOST_V6_FLAG if store_v6 else 0)
    sys_flag |= COMPRESSED_FLAG if msg.compressed else 0
    size = message_length(
        body_len=len(msg.body), topic_len=len(topic), prop_len=len(props), born_v6=born_v6, store_v6=store_v6, v2=v2
    )
    crc = body_crc(msg.body) if msg.body_crc is None else msg.body_crc
    return b"".join(
        (
            HEAD.pack(
                size,
                MAGIC_V2 if v2 else MAGIC_V1,
                crc,
                msg.queue_id,
                msg.flag,
                msg.queue_offset,
                phys_offset,
                sys_flag,
                msg.born_ts,
            ),
            (HOST_V6 if born_v6 else HOST_V4).pack(born_ip, born_port),
            I64.pack(msg.store_ts),
            (HOST_V6 if store_v6 else HOST_V4).pack(store_ip, store_port),
            AFTER_STORE_HOST.pack(msg.reconsume_times, msg.prepared_tx_offset, len(msg.body)),
            msg.body,
            (I16 if v2 else I8).pack(len(topic)),
            topic,
            I16.pack(len(props)),
            props,
        )
    )


def blank_record(size: int) -> bytes:
    """The end-of-file record: ``[i32 bytes left][i32 BLANK magic]`` (the rest is left as it is)."""
    return FRAME.pack(size, MAGIC_BLANK)


class CommitLogWriter:
    """Appends records to ``<store_dir>/commitlog/`` like a broker: BLANK at file end, rollover, 20-digit names.

    `preallocate` makes every file `file_size` long (zeros, sparse) as a broker does; without it the last
    file ends where its data ends (files before it are still full size, as the broker requires).
    """

    def __init__(
        self,
        store_dir: str | Path,
        *,
        file_size: int = DEFAULT_FILE_SIZE,
        start_offset: int = 0,
        preallocate: bool = True,
    ) -> None:
        self.dir = Path(store_dir) / "commitlog"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.file_size = file_size
        self.preallocate = preallocate
        self.offset = start_offset
        self._fh: BinaryIO | None = None
        self._file_start = -1
        self._pending = bytearray()
        self._pending_at = 0

    @property
    def max_offset(self) -> int:
        return self.offset

    def _open(self) -> None:
        start = self.offset - self.offset % self.file_size
        if self._fh is not None and start == self._file_start:
            return
        self._close_file(full=True)
        path = self.dir / offset_to_file_name(start)
        self._fh = path.open("r+b" if path.exists() else "w+b")
        if self.preallocate:
            self._fh.truncate(self.file_size)
        self._file_start = start
        self._pending_at = self.offset - start

    def _flush(self) -> None:
        if self._fh is not None and self._pending:
            self._fh.seek(self._pending_at)
            self._fh.write(self._pending)
            self._pending_at += len(self._pending)
            self._pending.clear()

    def _close_file(self, *, full: bool) -> None:
        if self._fh is None:
            return
        self._flush()
        if full:
            self._fh.truncate(self.file_size)
        self._fh.close()
        self._fh = None

    def append(self, msg: Message) -> int:
        """Write one record where the log ends; returns its PHYSICALOFFSET."""
        size = encoded_length(msg)
        if size + END_FILE_MIN_BLANK_LENGTH > self.file_size:
            raise ValueError(f"record of {size} bytes cannot fit in a {self.file_size}-byte file")
        self._open()
        left = self.file_size - self.offset % self.file_size
        if size + END_FILE_MIN_BLANK_LENGTH > left:
            self._pending += blank_record(left)
            self.offset += left
            self._open()
        at = self.offset
        self._pending += encode(msg, at)
        self.offset += size
        if len(self._pending) >= 8 * 1024 * 1024:
            self._flush()
        return at

    def sync(self) -> None:
        """Make everything appended so far visible to other readers of the files, as a broker's mmap is."""
        self._flush()
        if self._fh is not None:
            self._fh.flush()

    def extend(self, messages: Iterable[Message]) -> list[int]:
        return [self.append(m) for m in messages]

    def append_bytes(self, data: bytes) -> int:
        """Raw bytes at the end of the log (garbage, a foreign record), with no rollover: for planting damage."""
        self._open()
        at = self.offset
        self._pending += data
        self.offset += len(data)
        return at

    def close(self) -> None:
        self._close_file(full=False)

    def __enter__(self) -> CommitLogWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def write_store(
    store_dir: str | Path,
    messages: Iterable[Message],
    *,
    file_size: int = DEFAULT_FILE_SIZE,
    start_offset: int = 0,
    preallocate: bool = True,
) -> list[int]:
    """Write `messages` as a fresh commit log; returns each record's PHYSICALOFFSET."""
    with CommitLogWriter(store_dir, file_size=file_size, start_offset=start_offset, preallocate=preallocate) as w:
        return w.extend(messages)


def replicate(
    master_dir: str | Path, slave_dir: str | Path, *, start: int, upto: int, preallocate: bool = True
) -> None:
    """Copy the master's commit-log bytes [start, upto) into the slave's files of the same names, as HA does.

    HA ships raw bytes in chunks with no regard to record boundaries, so `upto` may cut a record: the
    slave then ends with a torn tail. Existing slave files are written into, not replaced.
    """
    out = Path(slave_dir) / "commitlog"
    out.mkdir(parents=True, exist_ok=True)
    for f in commitlog_files(master_dir):
        size = f.path.stat().st_size
        lo, hi = max(start, f.start), min(upto, f.start + size)
        if lo >= hi:
            continue
        with f.path.open("rb") as src:
            src.seek(lo - f.start)
            data = src.read(hi - lo)
        target = out / f.path.name
        with target.open("r+b" if target.exists() else "w+b") as dst:
            if preallocate and dst.seek(0, 2) < size:
                dst.truncate(size)
            dst.seek(lo - f.start)
            dst.write(data)
