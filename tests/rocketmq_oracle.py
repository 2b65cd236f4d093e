"""A per-record RocketMQ commit-log decoder: the slow, obvious reading of the format.

Used only by the tests, as an oracle the columnar scanner (audit/sources/rocketmq/scan.py) is checked
against, and by the byte-exact writer's round trips.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from audit.errors import CorruptRecordError
from audit.local.rocketmq_commitlog import Message
from audit.sources.rocketmq.format import (
    AFTER_STORE_HOST,
    BASE_LENGTH,
    BORNHOST_V6_FLAG,
    COMPRESSED_FLAG,
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
    STOREHOST_V6_FLAG,
    body_crc,
    format_host,
    message_length,
    parse_properties,
)


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


def message_from_record(rec: CommitLogRecord) -> Message:
    """The writer's Message that re-encodes `rec` byte for byte."""
    return Message(
        topic=rec.topic,
        body=rec.body,
        properties=dict(rec.properties),
        queue_id=rec.queue_id,
        flag=rec.flag,
        queue_offset=rec.queue_offset,
        sys_flag=rec.sys_flag & ~(BORNHOST_V6_FLAG | STOREHOST_V6_FLAG | COMPRESSED_FLAG),
        born_ts=rec.born_ts,
        born_host=rec.born_host,
        store_ts=rec.store_ts,
        store_host=rec.store_host,
        reconsume_times=rec.reconsume_times,
        prepared_tx_offset=rec.prepared_tx_offset,
        version=rec.version,
        compressed=bool(rec.sys_flag & COMPRESSED_FLAG),
        body_crc=rec.body_crc,
    )
