"""Generated RocketMQ stores for the property and fuzz tests, and what a correct scan of them must say.

Stores are written with the byte-exact writer (audit/local/rocketmq_commitlog.py); the expected records
come from the slow per-record decoder (tests/rocketmq_oracle.py). Nothing here calls the columnar scanner
except `scan_file`, which is the thing under test.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import xxhash
from hypothesis import strategies as st

from audit.errors import CorruptRecordError
from audit.local.rocketmq_commitlog import Message, encode, encoded_length, replicate, write_store
from audit.sources.rocketmq.format import (
    FRAME,
    MAGIC_BLANK,
    MAGIC_V1,
    MAGIC_V2,
    RECORD_SCHEMA,
    ROW_KINDS,
)
from audit.sources.rocketmq.scan import iter_batches
from audit.sources.rocketmq.store import commitlog_files
from tests.rocketmq_oracle import CommitLogRecord, decode_record

# -- messages ----------------------------------------------------------------------------------------------

TOPIC_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-%|"
"""What the broker's TopicValidator accepts: a real topic is never empty and never holds a NUL."""

_ports = st.integers(-(2**31), 2**31 - 1) | st.sampled_from([0, 10911, 65535])
_v4 = st.builds(lambda ip, port: f"{ip}:{port}", st.ip_addresses(v=4), _ports)
_v6 = st.builds(lambda ip, port: f"[{ip}]:{port}", st.ip_addresses(v=6), _ports)
hosts = _v4 | _v6
_prop_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=40)
_prop_keys = st.sampled_from(["UNIQ_KEY", "KEYS", "TAGS", "WAIT", "DELAY", "UNIQ_KEYS", "K"]) | _prop_text.filter(bool)
properties = st.dictionaries(_prop_keys, _prop_text.filter(bool), max_size=5)
topics = st.text(TOPIC_CHARS, min_size=1, max_size=20) | st.text(TOPIC_CHARS, min_size=120, max_size=300)
bodies = st.binary(max_size=300) | st.binary(min_size=1000, max_size=3000)
_i32 = st.integers(-(2**31), 2**31 - 1)
_i64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def messages(draw: st.DrawFn) -> Message:
    topic = draw(topics)
    return Message(
        topic=topic,
        body=draw(bodies),
        properties=draw(properties),
        queue_id=draw(_i32),
        flag=draw(_i32),
        queue_offset=draw(_i64),
        sys_flag=draw(st.sampled_from([0, 0x4, 0x8, 0xC, 0x40, 0x100])),
        born_ts=draw(_i64),
        born_host=draw(hosts),
        store_ts=draw(_i64),
        store_host=draw(hosts),
        reconsume_times=draw(_i32),
        prepared_tx_offset=draw(_i64),
        version=draw(st.sampled_from([None, 2] if len(topic.encode()) > 127 else [None, 1, 2])),
        compressed=draw(st.booleans()),
    )


# -- stores ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Store:
    """A master store as the writer left it: where each record is and its bytes, per file."""

    root: Path
    file_size: int
    messages: list[Message]
    offsets: list[int]
    files: dict[int, bytes]  # file start -> the file's bytes

    def size_of(self, k: int) -> int:
        return encoded_length(self.messages[k])

    def file_of(self, offset: int) -> int:
        return offset - offset % self.file_size


@st.composite
def store_specs(draw: st.DrawFn, max_messages: int = 30) -> tuple[list[Message], int, bool]:
    """Messages, a file size that holds the largest of them (so files roll with BLANKs), preallocation."""
    msgs = draw(st.lists(messages(), min_size=1, max_size=max_messages))
    biggest = max(encoded_length(m) for m in msgs) + 8
    file_size = max(biggest, draw(st.sampled_from([1024, 2048, 4096, 16384])))
    return msgs, file_size, draw(st.booleans())


def write(root: Path, msgs: list[Message], file_size: int, preallocate: bool) -> Store:
    offsets = write_store(root, msgs, file_size=file_size, preallocate=preallocate)
    files = {f.start: f.path.read_bytes() for f in commitlog_files(root)}
    return Store(root, file_size, msgs, offsets, files)


@contextmanager
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="rmq-fuzz-") as d:
        yield Path(d)


def field_starts(msg: Message, at: int) -> list[int]:
    """Offsets inside the record where each field starts (and its last byte): the interesting cut points."""
    raw = encode(msg, at)
    born6 = msg.born_host.startswith("[")
    store6 = msg.store_host.startswith("[")
    v2 = raw[4:8] == MAGIC_V2.to_bytes(4, "big", signed=True)
    points = [0, 1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 28, 36, 40, 48]
    p = 48 + (20 if born6 else 8)
    points += [p, p + 8]
    p += 8 + (20 if store6 else 8)
    points += [p, p + 4, p + 12]
    p += 16
    points.append(p)  # body
    p += len(msg.body)
    points.append(p)  # topic length
    p += 2 if v2 else 1
    points.append(p)  # topic
    p += len(msg.topic.encode())
    points += [p, p + 1]  # properties length
    p += 2
    points.append(p)  # properties
    points.append(len(raw) - 1)
    return sorted({q for q in points if 0 <= q < len(raw)})


# -- what a scan must say ----------------------------------------------------------------------------------


def scan_file(data: bytes, file_start: int, last_file: bool, batch_bytes: int) -> list[dict[str, Any]]:
    """The scanner under test, all batches of one file as row dicts (schema checked)."""
    out: list[dict[str, Any]] = []
    for batch in iter_batches(data, file_start=file_start, last_file=last_file, batch_bytes=batch_bytes):
        assert batch.schema == RECORD_SCHEMA
        out += batch.to_pylist()
    return out


def signed(h: int) -> int:
    return h - (1 << 64) if h >= 1 << 63 else h


def oracle_row(rec: CommitLogRecord, data: bytes, file_start: int) -> dict[str, Any]:
    """The row the columnar scan must give for a record the oracle decoded."""
    pos = rec.phys_offset - file_start
    return {
        "row_kind": "record",
        "phys_offset": rec.phys_offset,
        "size": rec.size,
        "magic": MAGIC_V2 if rec.version == 2 else MAGIC_V1,
        "version": rec.version,
        "body_crc": rec.body_crc,
        "queue_id": rec.queue_id,
        "flag": rec.flag,
        "queue_offset": rec.queue_offset,
        "sys_flag": rec.sys_flag,
        "born_ts": rec.born_ts,
        "born_host": rec.born_host,
        "store_ts": rec.store_ts,
        "store_host": rec.store_host,
        "reconsume_times": rec.reconsume_times,
        "prepared_tx_offset": rec.prepared_tx_offset,
        "body_len": len(rec.body),
        "crc_ok": True,
        "topic": rec.topic,
        "uniq_key": rec.properties.get("UNIQ_KEY"),
        "keys": rec.properties.get("KEYS"),
        "tags": rec.properties.get("TAGS"),
        "digest": signed(xxhash.xxh3_64_intdigest(data[pos : pos + rec.size])),
    }


def without_detail(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "detail"}


@dataclass
class OracleScan:
    records: list[CommitLogRecord]
    stop: int  # file position where the oracle stopped
    error: CorruptRecordError | None  # why, when it was not a BLANK or the zero tail


def oracle_scan(data: bytes, file_start: int) -> OracleScan:
    """The oracle's records of one file up to what stops it (BLANK, zeros, the end, or a damaged record)."""
    records: list[CommitLogRecord] = []
    pos = 0
    while len(data) - pos >= FRAME.size:
        size, magic = FRAME.unpack_from(data, pos)
        if magic == MAGIC_BLANK or (size == 0 and magic == 0):
            break
        try:
            rec = decode_record(data, pos, file_start=file_start)
        except CorruptRecordError as err:
            return OracleScan(records, pos, err)
        records.append(rec)
        pos += rec.size
    return OracleScan(records, pos, None)


def check_rows(rows: list[dict[str, Any]], file_start: int, size: int) -> None:
    """What holds for any scan of any bytes: known kinds, contiguous records, at most one final other row."""
    pos = file_start
    for i, r in enumerate(rows):
        assert r["row_kind"] in ROW_KINDS, r
        assert r["phys_offset"] == pos, (r, pos)
        if r["row_kind"] == "record":
            assert r["detail"] is None or "reason" not in json.loads(r["detail"])
            assert file_start <= r["phys_offset"] < r["phys_offset"] + r["size"] <= file_start + size
            pos += r["size"]
        else:
            assert i == len(rows) - 1, rows[i:]
            if r["row_kind"] != "blank":
                assert "reason" in json.loads(r["detail"]), r


def expected_healthy(store: Store, start: int, data: bytes, last_file: bool) -> list[dict[str, Any]]:
    """The rows of an undamaged file: the oracle's records, then the BLANK when the file is not the last."""
    seen = oracle_scan(data, start)
    assert seen.error is None, seen.error
    rows = [oracle_row(r, data, start) for r in seen.records]
    if seen.stop + FRAME.size <= len(data) and FRAME.unpack_from(data, seen.stop)[1] == MAGIC_BLANK:
        rows.append({"row_kind": "blank", "phys_offset": start + seen.stop})
    else:
        assert last_file, "only the last file ends without a BLANK"
    return rows


def slave_of(store: Store, root: Path, upto: int, preallocate: bool) -> dict[int, bytes]:
    """A slave's files after HA copied the master's bytes [0, upto) (cut anywhere)."""
    replicate(store.root, root, start=0, upto=upto, preallocate=preallocate)
    return {f.start: f.path.read_bytes() for f in commitlog_files(root)}
