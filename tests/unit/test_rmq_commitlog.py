"""The RocketMQ commit-log scanner against a real broker-written file, and the test writer byte for byte."""

from __future__ import annotations

import random
import shutil
import zlib
from pathlib import Path

import pyarrow as pa
import pytest
import xxhash

from audit.errors import CorruptRecordError
from audit.local.rocketmq_commitlog import (
    CommitLogWriter,
    Message,
    blank_record,
    encode,
    properties_string,
    replicate,
    write_store,
)
from audit.sources.rocketmq.format import (
    COMPRESSED_FLAG,
    MAGIC_BLANK,
    MAGIC_V1,
    MAGIC_V2,
    RECORD_SCHEMA,
    parse_properties,
)
from audit.sources.rocketmq.scan import data_end, iter_batches, scan_commitlog
from audit.sources.rocketmq.store import commitlog_files, max_offset, min_offset, parse_file
from tests.conftest import FIXTURES
from tests.rocketmq_oracle import decode_record, iter_records, message_from_record

FIXTURE = FIXTURES / "rocketmq" / "00000000000000000000"
T0 = 1_700_000_000_000


def msg(i: int, **changes: object) -> Message:
    m = Message(
        topic="TopicTest",
        body=f"order {i} paid".encode() * 3,
        properties={"UNIQ_KEY": f"AC11000100002A9F{i:016X}", "KEYS": f"order-{i}", "TAGS": "TagA"},
        queue_id=i % 4,
        queue_offset=i // 4,
        born_ts=T0 + i,
        born_host="10.0.0.7:50123",
        store_ts=T0 + i + 1,
        store_host="10.0.0.1:10911",
    )
    return m.but(**changes)


def rows(batch: pa.RecordBatch, kind: str | None = None) -> list[dict[str, object]]:
    out = batch.to_pylist()
    return [r for r in out if kind is None or r["row_kind"] == kind]


@pytest.fixture(scope="module")
def fixture_bytes() -> bytes:
    return FIXTURE.read_bytes()


def test_reads_47_records_then_a_blank_at_8084(fixture_bytes: bytes) -> None:
    batch = scan_commitlog(fixture_bytes, file_start=0)
    assert batch.schema == RECORD_SCHEMA
    records, others = rows(batch, "record"), [r for r in rows(batch) if r["row_kind"] != "record"]
    assert len(records) == 47
    assert [r["phys_offset"] for r in records] == [172 * i for i in range(47)]
    assert {r["size"] for r in records} == {172}
    assert others == [
        {
            **{k: None for k in RECORD_SCHEMA.names},
            "row_kind": "blank",
            "phys_offset": 8084,
            "size": 108,
            "magic": MAGIC_BLANK,
        }
    ]
    assert data_end(batch, 0) == 8192


def test_decodes_every_field_and_checks_crc(fixture_bytes: bytes) -> None:
    records = rows(scan_commitlog(fixture_bytes, file_start=0), "record")
    first = records[0]
    assert first["magic"] == MAGIC_V1 and first["version"] == 1 and first["crc_ok"] is True
    assert (first["topic"], first["born_host"], first["store_host"]) == ("abc", "127.0.0.1:0", "192.168.71.1:8123")
    assert (first["born_ts"], first["store_ts"]) == (1632821159368, 1632821159372)
    assert (first["keys"], first["tags"], first["uniq_key"]) == ("1632821159368", "TAG1", None)
    body = b"Once, there was a chance for me!"
    assert first["body_crc"] == zlib.crc32(body) & 0x7FFFFFFF and first["body_len"] == len(body)
    for r in records:
        off = int(r["phys_offset"])  # type: ignore[call-overload]
        digest = xxhash.xxh3_64_intdigest(fixture_bytes[off : off + 172])
        assert r["digest"] == (digest - (1 << 64) if digest >= 1 << 63 else digest)
    assert [r["queue_offset"] for r in records] == list(range(47))


def test_agrees_with_the_per_record_decoder(fixture_bytes: bytes) -> None:
    decoded = list(iter_records(fixture_bytes, file_start=0))
    assert len(decoded) == 47
    assert decoded[5].body == b"Once, there was a chance for me!"
    assert decoded[5].properties == {"0": "imagoodperson0", "KEYS": decoded[5].properties["KEYS"], "TAGS": "TAG1"}
    scanned = rows(scan_commitlog(fixture_bytes, file_start=0), "record")
    assert [(d.phys_offset, d.store_ts, d.topic) for d in decoded] == [
        (r["phys_offset"], r["store_ts"], r["topic"]) for r in scanned
    ]


def test_is_reencoded_byte_for_byte(fixture_bytes: bytes, tmp_path: Path) -> None:
    decoded = list(iter_records(fixture_bytes, file_start=0))
    for rec in decoded:
        assert (
            encode(message_from_record(rec), rec.phys_offset)
            == fixture_bytes[rec.phys_offset : rec.phys_offset + rec.size]
        )
    assert fixture_bytes[8084:8092] == blank_record(108) and fixture_bytes[8092:] == bytes(100)
    # The broker wrote the BLANK because a 48th record did not fit: so does the writer.
    messages = [message_from_record(r) for r in decoded]
    write_store(tmp_path, [*messages, messages[0]], file_size=8192)
    assert (tmp_path / "commitlog" / "00000000000000000000").read_bytes() == fixture_bytes


def test_reads_the_file_from_disk_with_mmap(fixture_bytes: bytes, tmp_path: Path) -> None:
    (tmp_path / "commitlog").mkdir()
    shutil.copy(FIXTURE, tmp_path / "commitlog" / FIXTURE.name)
    batches = list(parse_file(tmp_path / "commitlog" / FIXTURE.name, batch_bytes=1000))
    assert sum(b.num_rows for b in batches) == 48
    assert pa.Table.from_batches(batches).to_pylist() == scan_commitlog(fixture_bytes, file_start=0).to_pylist()
    assert max_offset(tmp_path) == 8192 and min_offset(tmp_path) == 0


def test_writes_ipv6_hosts_v2_topics_and_the_compressed_flag(tmp_path: Path) -> None:
    long_topic = "T" * 200
    messages = [
        msg(0),
        msg(1, born_host="[2001:db8::7]:50123"),
        msg(2, store_host="[fe80::1]:10911"),
        msg(3, born_host="[::1]:1", store_host="[2001:db8::1]:10911", topic=long_topic),
        msg(4, compressed=True, body=zlib.compress(b"x" * 500)),
        msg(5, version=2),
        msg(6, body=b"", properties={}),
    ]
    offsets = write_store(tmp_path, messages, file_size=64 * 1024)
    data = (tmp_path / "commitlog" / "00000000000000000000").read_bytes()
    got = rows(scan_commitlog(data, file_start=0), "record")
    assert [r["phys_offset"] for r in got] == offsets
    assert [r["born_host"] for r in got][:4] == ["10.0.0.7:50123", "[2001:db8::7]:50123", "10.0.0.7:50123", "[::1]:1"]
    assert [r["store_host"] for r in got][2:4] == ["[fe80::1]:10911", "[2001:db8::1]:10911"]
    assert [r["sys_flag"] & 0x30 for r in got][:4] == [0, 0x10, 0x20, 0x30]
    assert [r["version"] for r in got] == [1, 1, 1, 2, 1, 2, 1]
    assert got[3]["magic"] == MAGIC_V2 and got[3]["topic"] == long_topic
    assert got[4]["sys_flag"] & COMPRESSED_FLAG and got[4]["crc_ok"]
    assert got[6]["body_len"] == 0 and got[6]["body_crc"] == 0 and got[6]["uniq_key"] is None
    for m, off in zip(messages, offsets, strict=True):
        rec = decode_record(data, off, file_start=0)
        assert encode(message_from_record(rec), off) == encode(m, off)


def test_rolls_files_with_a_blank_and_names_them_by_offset(tmp_path: Path) -> None:
    messages = [msg(i) for i in range(40)]
    offsets = write_store(tmp_path, messages, file_size=2048)
    files = commitlog_files(tmp_path)
    assert [f.start for f in files] == [2048 * i for i in range(len(files))] and len(files) > 3
    assert [f.path.name for f in files][:2] == ["00000000000000000000", "00000000000000002048"]
    seen: list[int] = []
    for i, f in enumerate(files):
        batch = scan_commitlog(f.path.read_bytes(), file_start=f.start, last_file=i == len(files) - 1)
        seen += [int(r["phys_offset"]) for r in rows(batch, "record")]  # type: ignore[call-overload]
        blanks = rows(batch, "blank")
        if i < len(files) - 1:
            assert len(blanks) == 1 and blanks[0]["phys_offset"] + blanks[0]["size"] == f.start + 2048
    assert seen == offsets
    assert max_offset(tmp_path) == offsets[-1] + len(encode(messages[-1], offsets[-1]))


def test_reads_the_properties_as_the_java_parser_does() -> None:
    rng = random.Random(7)
    names = ["UNIQ_KEY", "KEYS", "TAGS", "XKEYS", "UNIQ_KEYS", "K", "WAIT", "TAGSX"]
    cases: list[str] = [
        "UNIQ_KEY\x01a\x02UNIQ_KEY\x01b\x02",
        "KEYS\x01\x02TAGS\x01t",
        "TAGS\x01a\x01b\x02",
        "\x02\x02KEYS\x01k\x02",
        "UNIQ_KEY",
        "XUNIQ_KEY\x01no\x02",
    ]
    for _ in range(300):
        items = [
            f"{rng.choice(names)}\x01{rng.choice(['', 'v', 'TagA', 'x' * rng.randint(1, 30), 'é'])}"
            for _ in range(rng.randint(0, 5))
        ]
        cases.append("\x02".join(items) + rng.choice(["", "\x02"]))
    buf = bytearray()
    for i, text in enumerate(cases):
        raw = encode(msg(i).but(properties={}), len(buf))
        props = text.encode()
        # Re-point the (empty) properties at `text`: PROPLEN is the last 2 bytes, TOTALSIZE grows.
        rec = bytearray(raw[:-2] + len(props).to_bytes(2, "big") + props)
        rec[0:4] = len(rec).to_bytes(4, "big")
        buf += rec
    got = rows(scan_commitlog(bytes(buf), file_start=0), "record")
    assert len(got) == len(cases)
    for r, text in zip(got, cases, strict=True):
        want = parse_properties(text)
        assert (r["uniq_key"], r["keys"], r["tags"]) == (want.get("UNIQ_KEY"), want.get("KEYS"), want.get("TAGS")), text


def test_gives_the_same_rows_whatever_the_batch_size(tmp_path: Path) -> None:
    write_store(tmp_path, [msg(i) for i in range(300)], file_size=1 << 20)
    data = (tmp_path / "commitlog" / "00000000000000000000").read_bytes()
    whole = scan_commitlog(data, file_start=0).to_pylist()
    for size in (1, 500, 4096):
        batches = list(iter_batches(data, file_start=0, batch_bytes=size))
        assert pa.Table.from_batches(batches).to_pylist() == whole


def test_collects_files_from_several_commitlog_paths(tmp_path: Path) -> None:
    write_store(tmp_path / "a", [msg(i) for i in range(40)], file_size=2048)
    files = commitlog_files(tmp_path / "a")
    (tmp_path / "b" / "commitlog").mkdir(parents=True)
    for f in files[1::2]:
        f.path.rename(tmp_path / "b" / "commitlog" / f.path.name)
    joined = commitlog_files(f"{tmp_path / 'a'};{tmp_path / 'b' / 'commitlog'}")
    assert [f.start for f in joined] == [f.start for f in files]


def _store(tmp_path: Path, n: int = 40) -> tuple[list[int], list[Message]]:
    messages = [msg(i) for i in range(n)]
    return write_store(tmp_path, messages, file_size=2048), messages


def _scan_all(tmp_path: Path) -> list[dict[str, object]]:
    files = commitlog_files(tmp_path)
    out: list[dict[str, object]] = []
    for i, f in enumerate(files):
        out += [r for b in parse_file(f.path, last_file=i == len(files) - 1) for r in b.to_pylist()]
    return out


def test_reports_a_bad_body_crc_and_resumes_at_the_next_file(tmp_path: Path) -> None:
    offsets, _ = _store(tmp_path)
    target = offsets[3]  # in the first file
    path = tmp_path / "commitlog" / "00000000000000000000"
    data = bytearray(path.read_bytes())
    data[target + 100] ^= 0xFF  # a body byte
    path.write_bytes(bytes(data))
    got = _scan_all(tmp_path)
    bad = [r for r in got if r["row_kind"] == "corrupt_record"]
    assert len(bad) == 1 and bad[0]["phys_offset"] == target and bad[0]["crc_ok"] is False
    assert '"reason": "body_crc"' in str(bad[0]["detail"])
    offs = [r["phys_offset"] for r in got if r["row_kind"] == "record"]
    assert offs[:3] == offsets[:3] and offsets[3] not in offs
    assert [o for o in offsets if o >= 2048] == [o for o in offs if int(o) >= 2048]  # type: ignore[call-overload]
    with pytest.raises(CorruptRecordError) as err:
        list(iter_records(bytes(data), file_start=0))
    assert err.value.offset == target


def test_reports_a_length_mismatch_and_a_misplaced_record(tmp_path: Path) -> None:
    first = encode(msg(0), 0)
    wrong_len = bytearray(encode(msg(1), len(first)) + b"\x07")  # one byte more than calMsgLength says
    wrong_len[0:4] = len(wrong_len).to_bytes(4, "big")
    got = rows(scan_commitlog(first + bytes(wrong_len), file_start=0))
    assert got[-1]["row_kind"] == "corrupt_record" and '"length_mismatch"' in str(got[-1]["detail"])
    misplaced = encode(msg(0), 0) + encode(msg(1), 999)  # PHYSICALOFFSET says 999, it sits elsewhere
    got = rows(scan_commitlog(misplaced, file_start=0))
    assert got[-1]["row_kind"] == "corrupt_record" and got[-1]["phys_offset"] == len(encode(msg(0), 0))
    assert '"phys_offset_mismatch"' in str(got[-1]["detail"])


def test_calls_a_record_cut_by_the_end_of_data_a_torn_tail(tmp_path: Path) -> None:
    offsets, _ = _store(tmp_path, 5)
    data = (tmp_path / "commitlog" / "00000000000000000000").read_bytes()
    # A cut inside the first bytes of TOTALSIZE leaves only zeros: nothing to tell from the zero tail.
    assert [r["row_kind"] for r in rows(scan_commitlog(data[: offsets[3] + 3], file_start=0))] == ["record"] * 3
    for cut in (offsets[3] + 4, offsets[3] + 6, offsets[3] + 50, offsets[3] + 130, offsets[3] + 150, offsets[4] - 1):
        got = rows(scan_commitlog(data[:cut], file_start=0))
        assert [r["row_kind"] for r in got] == ["record"] * 3 + ["torn_tail"], cut
        assert got[-1]["phys_offset"] == offsets[3]
        assert data_end(scan_commitlog(data[:cut], file_start=0), 0) == offsets[3]
        # The same cut in a preallocated file: the rest is zeros.
        padded = data[:cut] + bytes(2048 - cut)
        kinds = [r["row_kind"] for r in rows(scan_commitlog(padded, file_start=0))]
        assert kinds == ["record"] * 3 + ["torn_tail"], cut
        not_last = rows(scan_commitlog(padded, file_start=0, last_file=False))
        assert not_last[-1]["row_kind"] == "corrupt_record"


def test_ends_silently_at_the_zero_tail_but_not_at_a_zero_gap(tmp_path: Path) -> None:
    a, b = encode(msg(0), 0), encode(msg(1), 0)
    assert [r["row_kind"] for r in rows(scan_commitlog(a + bytes(5000), file_start=0))] == ["record"]
    assert scan_commitlog(bytes(4096), file_start=0).num_rows == 0
    gap = rows(scan_commitlog(a + bytes(64) + b, file_start=0))
    assert gap[-1]["row_kind"] == "corrupt_record" and gap[-1]["phys_offset"] == len(a)


def test_reports_an_illegal_magic(tmp_path: Path) -> None:
    a = encode(msg(0), 0)
    junk = (300).to_bytes(4, "big") + b"\x12\x34\x56\x78" + b"junk" * 80
    got = rows(scan_commitlog(encode(msg(0), 4096) + junk, file_start=4096))
    assert got[-1]["row_kind"] == "corrupt_record" and got[-1]["phys_offset"] == 4096 + len(a)
    assert '"illegal_magic"' in str(got[-1]["detail"])


def test_copies_bytes_like_ha_including_a_cut_record(tmp_path: Path) -> None:
    offsets, _ = _store(tmp_path / "m")
    cut = offsets[30] + 17
    replicate(tmp_path / "m", tmp_path / "s", start=2048, upto=cut)
    files = commitlog_files(tmp_path / "s")
    assert files[0].start == 2048 and all(f.path.stat().st_size == 2048 for f in files)
    got = _scan_all(tmp_path / "s")
    assert got[-1]["row_kind"] == "torn_tail" and got[-1]["phys_offset"] == offsets[30]
    assert max_offset(tmp_path / "s") == offsets[30]
    with CommitLogWriter(tmp_path / "w", file_size=2048) as w:
        w.extend([msg(0), msg(1)])
        w.append_bytes(b"\xff" * 9)
    assert (tmp_path / "w" / "commitlog" / "00000000000000000000").stat().st_size == 2048


def test_properties_string_round_trip() -> None:
    props = {"UNIQ_KEY": "A1", "KEYS": "k1 k2", "TAGS": "t"}
    assert parse_properties(properties_string(props)) == props


def test_a_slave_cut_mid_record_with_ipv4_and_ipv6_producers(tmp_path: Path) -> None:
    # The normal state of a live slave: HA chunks cut its last record, and the producers connect over
    # both IPv4 and IPv6. The cut record is dropped from the batch; its IPv6 host must go with it.
    hosts = ["10.0.0.7:50123", "[2001:db8::7]:50123"]
    messages = [msg(i, born_host=hosts[i % 2], store_host=hosts[(i // 2) % 2]) for i in range(12)]
    offsets = write_store(tmp_path / "m", messages, file_size=64 * 1024)
    for cut_in in (len(messages) - 1, len(messages) - 2):  # the cut record is IPv6, then IPv4 born
        slave = tmp_path / f"s{cut_in}"
        replicate(tmp_path / "m", slave, start=0, upto=offsets[cut_in] + 60)
        got = _scan_all(slave)
        assert [r["row_kind"] for r in got] == ["record"] * cut_in + ["torn_tail"]
        assert [r["born_host"] for r in got[:cut_in]] == [m.born_host for m in messages[:cut_in]]
        assert [r["store_host"] for r in got[:cut_in]] == [m.store_host for m in messages[:cut_in]]
        assert got[-1]["phys_offset"] == offsets[cut_in]


def test_a_record_without_properties_cut_in_its_topic_is_a_torn_tail(tmp_path: Path) -> None:
    # Found by tests/unit/test_rmq_fuzz.py: with no properties the record ends with its topic, and a cut
    # inside the topic left zeros that passed every check: a record with topic "Topic\0\0" was accepted.
    messages = [msg(0), msg(1, topic="TopicTest", properties={})]
    offsets = write_store(tmp_path / "m", messages, file_size=4096)
    topic_at = offsets[1] + len(encode(messages[1], offsets[1])) - 2 - len("TopicTest")
    for cut in (topic_at, topic_at + 1, topic_at + 8):
        slave = tmp_path / f"s{cut}"
        replicate(tmp_path / "m", slave, start=0, upto=cut)
        got = _scan_all(slave)
        assert [(r["row_kind"], r["phys_offset"]) for r in got] == [("record", 0), ("torn_tail", offsets[1])]
        assert '"topic_cut"' in str(got[-1]["detail"])
        # Whatever the batch size: a batch ending right after the cut record once hid it (fuzz, too).
        data = (slave / "commitlog" / "00000000000000000000").read_bytes()
        for batch_bytes in (1, offsets[1], offsets[1] + 1, 1 << 20):
            kinds = [
                r["row_kind"] for b in iter_batches(data, file_start=0, batch_bytes=batch_bytes) for r in b.to_pylist()
            ]
            assert kinds == ["record", "torn_tail"], batch_bytes
    whole = tmp_path / "whole"
    replicate(tmp_path / "m", whole, start=0, upto=topic_at + 9)  # the topic whole, PROPLEN 0 is the zeros
    assert [r["topic"] for r in _scan_all(whole)] == ["TopicTest", "TopicTest"]


def test_a_bad_crc_in_a_last_record_without_properties_is_corrupt_not_torn() -> None:
    # Found by tests/unit/test_rmq_fuzz.py: such a record ends with PROPLEN 0, so "zeros from its last
    # byte on" held for a whole record and a body CRC failure was reported as a cut (info, not critical).
    first = encode(msg(0), 0)
    second = bytearray(encode(msg(1, properties={}), len(first)))
    second[11] ^= 1  # BODYCRC
    for tail in (b"", bytes(500)):
        got = rows(scan_commitlog(first + bytes(second) + tail, file_start=0))
        assert [(r["row_kind"], r["phys_offset"]) for r in got] == [("record", 0), ("corrupt_record", len(first))]
        assert '"body_crc"' in str(got[-1]["detail"])


def test_a_slave_cut_inside_a_blank_is_a_torn_tail(tmp_path: Path) -> None:
    # HA copies the BLANK at a file's end like any bytes: a chunk may end inside its magic.
    offsets, messages = _store(tmp_path / "m")
    last = max(k for k, o in enumerate(offsets) if o < 2048)
    blank_at = offsets[last] + len(encode(messages[last], offsets[last]))
    frame = blank_record(2048 - blank_at)
    for cut in range(blank_at + 1, blank_at + 9):
        slave = tmp_path / f"s{cut}"
        replicate(tmp_path / "m", slave, start=0, upto=cut)
        got = _scan_all(slave)
        if cut == blank_at + 8:
            assert got[-1]["row_kind"] == "blank"
        elif any(frame[: cut - blank_at]):
            assert (got[-1]["row_kind"], got[-1]["phys_offset"]) == ("torn_tail", blank_at), cut
        else:
            assert got[-1]["row_kind"] == "record" and got[-1]["phys_offset"] == offsets[last]
        assert "corrupt_record" not in [r["row_kind"] for r in got]


def test_a_totalsize_past_the_end_is_corrupt_when_the_record_lengths_disagree() -> None:
    # A damaged TOTALSIZE that ran past the end of the data was taken for a cut record (torn_tail), and
    # the whole records after it were silently not read.
    a, b = encode(msg(0), 0), encode(msg(1), 0)
    data = bytearray(a + encode(msg(1), len(a)) + encode(msg(2), len(a) + len(b)))
    data[len(a) : len(a) + 4] = (len(data)).to_bytes(4, "big")
    got = rows(scan_commitlog(bytes(data), file_start=0))
    assert [(r["row_kind"], r["phys_offset"]) for r in got] == [("record", 0), ("corrupt_record", len(a))]
    assert '"length_mismatch"' in str(got[-1]["detail"])
    whole = a + encode(msg(1), len(a))
    for end in (len(a) + 4, len(a) + 50, len(a) + 90, len(whole) - 3, len(whole) - 1):  # real cuts stay torn
        got = rows(scan_commitlog(whole[:end], file_start=0))
        assert [r["row_kind"] for r in got] == ["record", "torn_tail"], end
