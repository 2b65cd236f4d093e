"""Hostile values through both binary log readers: NUL bytes, invalid UTF-8, markup, CRLF.

Binary columns keep the bytes exactly (Pika `key`); text columns lose nothing silently: Pika's `command`
escapes what is not plain ASCII reversibly, and a RocketMQ topic or UNIQ_KEY/KEYS/TAGS value that is not
UTF-8 stays a record whose text shows U+FFFD and whose `detail` keeps the raw bytes as hex.
"""

from __future__ import annotations

import codecs
import json
from pathlib import Path

import pytest
import xxhash

from audit.local.pika_binlog import BinlogWriter, resp_encode
from audit.local.rocketmq_commitlog import Message, encode
from audit.sources.pika.binlog import parse_file, scan_binlog
from audit.sources.pika.binlog_resp import command_name
from audit.sources.rocketmq.scan import iter_batches, scan_commitlog

HOSTILE = [
    b"\x00",
    b"k\x00ey",
    b"\xff\xfe\xfd",  # not UTF-8
    b"\xc3\x28",  # a broken 2-byte sequence
    b"\xed\xa0\x80",  # an encoded surrogate: not UTF-8 either
    b"<script>alert(1)</script>",
    b"\r\n*3\r\n$3\r\nSET\r\n",  # RESP inside a value
    b"\\x41",  # looks like an escape
    "ключ-鍵-🔑".encode(),
    b"",
]


def _signed(h: int) -> int:
    return h - (1 << 64) if h >= 1 << 63 else h


@pytest.mark.parametrize("chunk", [64 << 10, 8 << 20])
def test_pika_keys_are_byte_exact_and_commands_reversible(tmp_path: Path, chunk: int) -> None:
    commands = [[cmd, key, b"v"] for cmd in (b"SET", *HOSTILE[:-1]) for key in HOSTILE]
    with BinlogWriter(tmp_path, file_size=1 << 30, preallocate=False, clock=lambda: 1) as w:
        for args in commands:
            w.append(args, exec_time=1)
    data = (tmp_path / "write2file0").read_bytes()
    got = scan_binlog(data, db=0, filenum=0).to_pylist()
    assert parse_file(tmp_path / "write2file0", db=0, filenum=0, chunk_size=chunk).to_pylist() == got
    assert [r["row_kind"] for r in got] == ["record"] * len(commands)
    for r, args in zip(got, commands, strict=True):
        assert r["key"] == args[1]  # binary column: the bytes, NULs and all
        assert codecs.escape_decode(r["command"].encode())[0] == args[0].lower()
        assert r["digest"] == _signed(xxhash.xxh3_64_intdigest(resp_encode(args)))
    assert command_name(b"SET") == "set" and command_name(b"<script>") == "<script>"
    assert command_name(b"\\x41") != command_name(b"A")  # no two commands share a name


def _planted(topic_raw: bytes, keys_raw: bytes) -> bytes:
    """A record whose topic and KEYS value are `topic_raw` and `keys_raw` (neither is under the CRC)."""
    topic_slot, keys_slot = "T" * len(topic_raw), "K" * len(keys_raw)
    raw = encode(Message(topic=topic_slot, body=b"body", properties={"KEYS": keys_slot, "TAGS": "t"}), 0)
    raw = raw.replace(topic_slot.encode(), topic_raw, 1) if topic_raw else raw
    return raw.replace(b"KEYS\x01" + keys_slot.encode(), b"KEYS\x01" + keys_raw, 1)


@pytest.mark.parametrize("value", [v for v in HOSTILE if v])
def test_rocketmq_text_that_is_not_utf8_keeps_its_bytes(value: bytes) -> None:
    data = _planted(b"Topic" + value, b"key-" + value)
    rows = scan_commitlog(data + bytes(100), file_start=0).to_pylist()
    assert [r["row_kind"] for r in rows] == ["record"]
    row = rows[0]
    topic, keys = b"Topic" + value, b"key-" + value
    try:
        text = (topic.decode(), keys.decode())
    except UnicodeDecodeError:
        detail = json.loads(row["detail"])["not_utf8"]
        assert (bytes.fromhex(detail["topic"]), bytes.fromhex(detail["keys"])) == (topic, keys)
        assert row["topic"] == topic.decode("utf-8", "replace") and "\ufffd" in row["topic"]
    else:
        assert (row["topic"], row["keys"], row["detail"]) == (*text, None)  # exact, markup and NULs included
    assert row["tags"] == "t"


def test_rocketmq_not_utf8_rows_are_flagged_in_any_batch() -> None:
    good = _planted(b"Topic", b"k")
    bad = _planted(b"Topic\xff", b"k\xfe")
    data = b""
    for rec in (good, good, bad, good):
        data += _at(rec, len(data))
    for batch_bytes in (1, len(good) * 2 + 1, 1 << 20):
        rows = [r for b in iter_batches(data, file_start=0, batch_bytes=batch_bytes) for r in b.to_pylist()]
        assert [r["row_kind"] for r in rows] == ["record"] * 4
        flagged = [json.loads(r["detail"]) if r["detail"] else None for r in rows]
        assert flagged == [None, None, {"not_utf8": {"keys": b"k\xfe".hex(), "topic": b"Topic\xff".hex()}}, None]


def _at(record: bytes, offset: int) -> bytes:
    """The record moved to `offset` (PHYSICALOFFSET rewritten)."""
    return record[:28] + offset.to_bytes(8, "big") + record[36:]
