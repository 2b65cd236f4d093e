from __future__ import annotations

import random
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import xxhash

from audit.errors import CorruptRecordError
from audit.local.pika_binlog import BinlogWriter, padding_item, raw_item
from audit.sources.pika.binlog import parse_file, scan_binlog
from audit.sources.pika.binlog_format import RECORD_SCHEMA, binlog_entries, file_number, parse_manifest, read_manifest
from tests.pika_binlog_helpers import BinlogRecord, iter_records, summarize

B = 65536
T0 = 1_700_000_000  # 0x6553F100
KINDS = {"record", "padding", "corrupt_record", "torn_tail"}


def resp(args: list[bytes]) -> bytes:
    """RESP array, written out here independently of the writer's encoder."""
    out = b"*" + str(len(args)).encode() + b"\r\n"
    for a in args:
        out += b"$" + str(len(a)).encode() + b"\r\n" + a + b"\r\n"
    return out


def signed(h: int) -> int:
    return h - (1 << 64) if h >= 1 << 63 else h


def digest(args: list[bytes]) -> int:
    return signed(xxhash.xxh3_64_intdigest(resp(args)))


def rows(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    assert batch.schema.equals(RECORD_SCHEMA)
    return list(batch.to_pylist())


def writer(path: Path, **kw: object) -> BinlogWriter:
    opts: dict[str, Any] = {"file_size": 256 << 10, "prealloc_step": 64 << 10, "clock": lambda: T0}
    opts.update(kw)
    return BinlogWriter(path, **opts)  # type: ignore[arg-type]


def set_bytes(key: bytes, vlen: int) -> int:
    """Bytes a `SET key <vlen bytes>` takes in the file when it is one Full record."""
    return 8 + 34 + len(resp([b"SET", key, b"v" * vlen]))


def land(w: BinlogWriter, left: int, tag: bytes, add: Callable[[list[bytes]], None]) -> None:
    """`add` one SET sized so that exactly `left` bytes remain in the current block afterwards."""
    while B - w.block_offset - left < 120:
        add([b"SET", b"filler", b"f" * 40])
    need = B - left - w.block_offset
    key = b"land:" + tag
    while True:
        for vlen in range(max(0, need - 120), need):
            if set_bytes(key, vlen) == need:
                add([b"SET", key, b"v" * vlen])
                assert w.block_offset == B - left
                return
        key += b"+"  # a digit-count jump skipped `need`; one more key byte shifts it


# -- bytes ------------------------------------------------------------------------------------------------


def test_one_tiny_record_byte_for_byte(tmp_path: Path) -> None:
    with writer(tmp_path, term=7, preallocate=False) as w:
        assert w.append([b"set", b"k", b"v"], exec_time=T0 + 1) == (0, 0, 69)
        assert w.append([b"set", b"k", b"v"], exec_time=T0 + 1) == (0, 69, 138)
    content = b"*3\r\n$3\r\nset\r\n$1\r\nk\r\n$1\r\nv\r\n"  # 27 bytes
    first = (
        bytes.fromhex(
            "3d0000"
            "00f15365"
            "01"  # fragment length 61, seconds T0, Full
            "0100"
            "01f15365"
            "07000000"  # item type 1, exec_time T0+1, term 7
            "0100000000000000"  # logic_id 1
            "00000000"
            "0000000000000000"  # previous position (0, 0)
            "1b000000"  # content_len 27
        )
        + content
    )
    second = first[:8] + bytes.fromhex("010001f153650700000002000000000000000000000045000000000000001b000000") + content
    data = (tmp_path / "write2file0").read_bytes()
    assert data == first + second
    manifest = (tmp_path / "manifest").read_bytes()
    assert len(manifest) == 64 * 1024
    assert manifest[:24] == bytes.fromhex("000000008a00000000000000020000000000000007000000")
    assert manifest[24:] == bytes(len(manifest) - 24)
    r = rows(scan_binlog(data, db=3, filenum=0))
    assert r[1] == {
        "row_kind": "record",
        "db": 3,
        "filenum": 0,
        "start": 69,
        "end": 138,
        "exec_time": T0 + 1,
        "term": 7,
        "logic_id": 2,
        "prev_filenum": 0,
        "prev_offset": 69,
        "content_len": 27,
        "digest": signed(xxhash.xxh3_64_intdigest(content)),
        "command": "set",
        "key": b"k",
        "detail": None,
    }


def test_manifest_and_file_names(tmp_path: Path) -> None:
    data = struct.pack("<IQQI", 5, 123456, 99, 2) + bytes(100)
    m = parse_manifest(data)
    assert (m.pro_num, m.pro_offset, m.logic_id, m.term) == (5, 123456, 99, 2)
    with pytest.raises(CorruptRecordError):
        parse_manifest(data[:23])
    assert file_number("write2file0") == 0 and file_number("write2file12") == 12
    assert file_number("write2file") is None and file_number("write2file01") is None
    assert file_number("manifest") is None and file_number("write2file3.bak") is None
    for name in ("write2file10", "write2file2", "write2file0", "manifest", "context", "write2filex"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "write2file3").symlink_to("write2file3")  # a loop
    (tmp_path / "write2file4").symlink_to("gone")  # dangling
    (tmp_path / "write2file5").mkdir()
    (tmp_path / "write2file6").symlink_to("write2file2")  # a symlink to a file is a file
    (tmp_path / "write2file2147483648").write_bytes(b"")  # past the int32 filenum column
    got = [(n, p.name, why) for n, p, why in binlog_entries(tmp_path)]
    assert got == [
        (0, "write2file0", None),
        (2, "write2file2", None),
        (3, "write2file3", "cannot stat: Too many levels of symbolic links"),
        (4, "write2file4", "cannot stat: No such file or directory"),
        (5, "write2file5", "not a regular file"),
        (6, "write2file6", None),
        (10, "write2file10", None),
        (2147483648, "write2file2147483648", "file number over 2147483647"),
    ]


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ((5, 1 << 63, 0, 0), "pro_offset 9223372036854775808"),
        ((5, (1 << 64) - 1, 0, 0), "pro_offset 18446744073709551615"),
        ((1 << 31, 0, 0, 0), "pro_num 2147483648"),
    ],
)
def test_a_manifest_position_no_file_can_have_is_damage_naming_the_field(
    fields: tuple[int, int, int, int], said: str
) -> None:
    # pro_offset 2^63+5 went on into a signed long Spark column: a NumberFormatException, exit 4
    with pytest.raises(CorruptRecordError, match=said):
        parse_manifest(struct.pack("<IQQI", *fields))
    top = parse_manifest(struct.pack("<IQQI", (1 << 31) - 1, (1 << 63) - 1, (1 << 64) - 1, (1 << 32) - 1))
    assert (top.pro_num, top.pro_offset) == ((1 << 31) - 1, (1 << 63) - 1)


# -- round trip -----------------------------------------------------------------------------------------


def test_round_trip_mixed_sizes_edges_and_rollover(tmp_path: Path) -> None:
    rnd = random.Random(5)
    w = writer(tmp_path, file_size=512 << 10)  # the edge cases below all land in write2file0
    written: list[tuple[list[bytes], tuple[int, int, int], int]] = []  # args, (filenum, start, end), exec_time

    def add(args: list[bytes]) -> None:
        et = T0 + len(written)
        written.append((args, w.append(args, exec_time=et), et))

    for k in range(40):
        add([b"SET", b"key:%d" % k, rnd.randbytes(rnd.randint(64, 512))])
    add([b"HSET", b"h\r\n:bin\x00key", b"field", b"value"])  # CRLF and NUL inside the key
    add([b"incr", b"counter"])  # two arguments, lower case
    add([b"FLUSHDB"])  # no key
    add([b"SET", b"K" * 3000, b"long key"])  # the key column keeps 1024 bytes
    add([b"SET", b"big:1", rnd.randbytes(70_000)])  # First + Last
    add([b"SET", b"big:2", rnd.randbytes(200_000)])  # First + Middle + Middle + Last
    land(w, 8, b"a", add)  # exactly 8 bytes left in the block
    add([b"SET", b"after:8-left", b"x" * 100])  # starts with a zero-length First in those 8 bytes
    land(w, 8, b"b", add)
    add([b"SET", b"big-after:8-left", rnd.randbytes(100_000)])  # zero-length First, Middle, Last
    land(w, 5, b"c", add)  # fewer than 8 left: a zero trailer, the next record in the next block
    add([b"DEL", b"after:5-left"])
    while w.position[0] < 2:
        add([b"SET", b"roll:%d" % len(written), rnd.randbytes(rnd.randint(64, 4096))])
    for k in range(10):
        add([b"LPUSH", b"tail:%d" % k, b"x"])
    manifest = read_manifest(tmp_path)
    assert (manifest.pro_num, manifest.logic_id) == (w.position[0], len(written))

    # the edge cases really happened where intended
    i8 = next(k for k, x in enumerate(written) if x[0][1:2] == [b"after:8-left"])
    fn, start, end = written[i8][1]
    assert start % B == B - 8 and written[i8 - 1][1][2] == start
    raw = (tmp_path / f"write2file{fn}").read_bytes()
    assert raw[start : start + 3] == b"\0\0\0" and raw[start + 7] == 2  # zero-length First
    assert raw[start + 8 + 7] == 4  # then the Last at the next block
    i5 = next(k for k, x in enumerate(written) if x[0][1:2] == [b"after:5-left"])
    fn, start, _ = written[i5][1]
    prev_end = written[i5 - 1][1][2]
    assert prev_end % B == B - 5 and start == prev_end + 5
    assert (tmp_path / f"write2file{fn}").read_bytes()[prev_end:start] == bytes(5)  # the trailer

    got: list[dict[str, Any]] = []
    files = binlog_entries(tmp_path)
    assert [(n, why) for n, _, why in files] == [(0, None), (1, None), (2, None)]
    for n, path, _ in files:
        data = path.read_bytes()
        whole = scan_binlog(data, db=1, filenum=n)
        if n == manifest.pro_num:
            assert len(data) % (64 << 10) == 0 and len(data) > manifest.pro_offset  # a preallocated zero tail
            assert whole.equals(scan_binlog(data, db=1, filenum=n, logical_end=manifest.pro_offset))
            assert summarize(whole, file_size=len(data))["zero_tail_bytes"] == len(data) - manifest.pro_offset
        else:
            assert len(data) > 512 << 10  # closed on rollover: trimmed, past file_size by one record at most
        got.extend(rows(whole))
    assert all(r["row_kind"] == "record" for r in got)
    assert len(got) == len(written)
    prev = (0, 0)
    for k, (r, (args, (fn, start, end), et)) in enumerate(zip(got, written, strict=True)):
        assert (r["filenum"], r["start"], r["end"]) == (fn, start, end)
        assert r["command"] == args[0].decode().lower()
        assert r["key"] == (args[1][:1024] if len(args) > 1 else None)
        assert r["digest"] == digest(args)
        assert r["content_len"] == len(resp(args))
        assert (r["exec_time"], r["term"], r["logic_id"]) == (et, 0, k + 1)
        assert (r["prev_filenum"], r["prev_offset"]) == prev  # the producer position before the append
        prev = (fn, end)
    first_of_1 = next(r for r in got if r["filenum"] == 1)
    last_of_0 = [r for r in got if r["filenum"] == 0][-1]
    assert (first_of_1["prev_filenum"], first_of_1["prev_offset"]) == (0, last_of_0["end"])
    assert (first_of_1["start"], got[-1]["end"]) == (0, manifest.pro_offset)


def test_parse_file_in_chunks_equals_whole_scan(tmp_path: Path) -> None:
    rnd = random.Random(9)
    w = writer(tmp_path, file_size=1 << 30)
    w.set_producer_status(4, 300_000)  # padding run longer than a chunk
    for k in range(400):
        size = rnd.choice([100, 300, 2000, 90_000]) if k % 37 else 250_000  # records longer than a chunk
        w.append([b"SET", b"k%d" % k, rnd.randbytes(size)])
    w.close(trim=False)
    path = tmp_path / "write2file4"
    data = path.read_bytes()
    whole = scan_binlog(data, db=0, filenum=4)
    assert whole.num_rows == 401 and rows(whole)[0]["row_kind"] == "padding"
    for chunk in (64 << 10, 192 << 10, 1 << 20):
        assert parse_file(path, db=0, filenum=4, chunk_size=chunk).equals(whole)
    # damage inside a long record, and a logical end inside another
    bad = bytearray(data)
    big = [r for r in rows(whole) if r["end"] - r["start"] > 200_000]
    bad[big[0]["start"] + 7] = 9
    path.write_bytes(bad)
    cut = big[1]["start"] + 100_000
    for logical_end in (None, cut):
        expect = scan_binlog(bytes(bad), db=0, filenum=4, logical_end=logical_end)
        assert parse_file(path, db=0, filenum=4, logical_end=logical_end, chunk_size=64 << 10).equals(expect)
        assert {"corrupt_record"} <= set(expect.column("row_kind").to_pylist())
    assert rows(expect)[-1]["row_kind"] == "torn_tail" and rows(expect)[-1]["end"] == cut


def test_close_trims_and_reopen_resumes(tmp_path: Path) -> None:
    w = writer(tmp_path)
    ends = [w.append([b"SET", b"a%d" % k, b"x" * 50])[2] for k in range(5)]
    w.close(trim=False)  # a crash: the zero tail stays
    assert (tmp_path / "write2file0").stat().st_size == 64 << 10
    w = writer(tmp_path)  # Pika restarting: writes on at the manifest's pro_offset, over the zero tail
    assert w.position == (0, ends[-1])
    more = w.append([b"SET", b"b", b"y"])
    assert more[1] == ends[-1]
    w.close()
    data = (tmp_path / "write2file0").read_bytes()
    assert len(data) == more[2]  # trimmed
    got = rows(scan_binlog(data, db=0, filenum=0))
    assert [r["logic_id"] for r in got] == [1, 2, 3, 4, 5, 6] and got[-1]["key"] == b"b"


def test_slave_items_differ_only_in_header(tmp_path: Path) -> None:
    """A slave re-encodes each item: same content and end offsets, its own exec_time, term, logic_id."""
    cmds = [[b"SET", b"k%d" % k, b"v" * (k * 997 % 3000)] for k in range(300)]
    with writer(tmp_path / "m", term=3) as m, writer(tmp_path / "s", clock=lambda: T0 + 50) as s:
        s.set_producer_status(0, 0)
        for c in cmds:
            assert m.append(c)[1:] == s.append(c)[1:]
    rm = rows(scan_binlog((tmp_path / "m" / "write2file0").read_bytes(), db=0, filenum=0))
    rs = rows(scan_binlog((tmp_path / "s" / "write2file0").read_bytes(), db=0, filenum=0))
    assert [(r["end"], r["digest"]) for r in rm] == [(r["end"], r["digest"]) for r in rs]
    assert {r["term"] for r in rm} == {3} and {r["exec_time"] for r in rs} == {T0 + 50}
    item = raw_item(cmds[0], T0, 3, 1, 0, 0)
    assert item[34:] == resp(cmds[0]) and struct.unpack_from("<HIIQIQI", item) == (1, T0, 3, 1, 0, 0, len(item) - 34)


# -- full sync padding ----------------------------------------------------------------------------------


def test_full_sync_padding_then_records(tmp_path: Path) -> None:
    w = writer(tmp_path, term=2)
    for k in range(3):
        w.append([b"SET", b"old%d" % k, b"x"])
    w.set_producer_status(3, 200_000)
    assert not (tmp_path / "write2file0").exists()
    assert read_manifest(tmp_path) == parse_manifest(struct.pack("<IQQI", 3, 200_000, 0, 0))
    first = w.append([b"SET", b"new", b"y"])
    w.append_padding_command(100)
    w.append([b"DEL", b"new"])
    data = (tmp_path / "write2file3").read_bytes()
    assert data[7] == 6 and data[B + 7] == 6 and data[8:B] == b"*" * (B - 8)
    got = rows(scan_binlog(data, db=0, filenum=3))
    assert [r["row_kind"] for r in got] == ["padding", "record", "record", "record"]
    assert (got[0]["start"], got[0]["end"], got[0]["detail"]) == (0, 200_000, None)
    assert got[0]["command"] is None and got[0]["digest"] is None
    assert (got[1]["start"], got[1]["end"]) == first[1:] and first[1] == 200_000
    assert (got[1]["logic_id"], got[1]["term"], got[1]["prev_filenum"], got[1]["prev_offset"]) == (1, 0, 3, 200_000)
    pad = got[2]
    assert (pad["command"], pad["key"], pad["exec_time"], pad["logic_id"]) == ("padding", None, 0, 0)
    assert pad["end"] - pad["start"] == 108 and pad["content_len"] == 66
    assert padding_item(100)[34:] == b"*2\r\n$7\r\npadding\r\n$00039\r\n" + b"*" * 39 + b"\r\n"
    s = summarize(scan_binlog(data, db=0, filenum=3), file_size=len(data))
    assert (s["records"], s["first_record_start"], s["padding_bytes"], s["corrupt_records"]) == (3, 200_000, 200_000, 0)


def test_full_sync_offset_just_past_a_block(tmp_path: Path) -> None:
    """AppendPadding leaves out a last piece under 8 bytes and lowers pro_offset by it."""
    w = writer(tmp_path)
    w.set_producer_status(1, 3 * B + 5)
    assert w.position == (1, 3 * B)
    end = w.append([b"SET", b"a", b"b"])[2]
    got = rows(scan_binlog((tmp_path / "write2file1").read_bytes(), db=0, filenum=1))
    assert [(r["row_kind"], r["start"]) for r in got] == [("padding", 0), ("record", 3 * B)]
    assert got[0]["end"] == 3 * B and got[1]["end"] == end


# -- damage ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """About 6 blocks of small records, some of them split First/Last across block ends."""
    rnd = random.Random(1)
    path = tmp_path_factory.mktemp("clean")
    with writer(path, preallocate=False, file_size=1 << 30) as w:
        while w.position[1] < 6 * B:
            w.append([b"SET", b"key:%d" % rnd.randrange(10**6), rnd.randbytes(rnd.randint(64, 512))])
    return (path / "write2file0").read_bytes()


def _clean_rows(clean: bytes) -> list[dict[str, Any]]:
    got = rows(scan_binlog(clean, db=0, filenum=0))
    assert {r["row_kind"] for r in got} == {"record"}
    return got


def _in_block(good: list[dict[str, Any]], block: int, *, straddling: bool = False) -> dict[str, Any]:
    """A record in `block` or, straddling, one from `block` on that is split First + Last over a block end."""
    for r in good:
        start, end = r["start"], r["end"]
        if straddling and start // B >= block and end // B > start // B and end % B > 0:
            return r
        if not straddling and start // B == block and start % B > 1000 and end // B == block:
            return r
    raise AssertionError("no such record")


def _expect_resume(
    good: list[dict[str, Any]], damaged: dict[str, Any], block_end: int, got: list[dict[str, Any]], detail: str
) -> None:
    """Rows before the damage unchanged, one corrupt row, then every record from the next block on."""
    before = [r for r in good if r["end"] <= damaged["start"]]
    after = [r for r in good if r["start"] >= block_end]
    cont = [r for r in good if r["start"] < block_end < r["end"]]
    resume = cont[0]["end"] if cont else block_end
    assert got[: len(before)] == before
    bad = got[len(before)]
    assert (bad["row_kind"], bad["start"], bad["end"], bad["detail"]) == (
        "corrupt_record",
        damaged["start"],
        resume,
        detail,
    )
    assert got[len(before) + 1 :] == after and after


@pytest.mark.parametrize("case", ["length", "type", "middle", "last", "item_type", "content_len", "short_item"])
def test_damage_is_one_row_and_reading_resumes_at_the_next_block(clean: bytes, case: str) -> None:
    good = _clean_rows(clean)
    r = _in_block(good, 1)
    s, e = r["start"], r["end"]
    data = bytearray(clean)
    block_end = (s // B + 1) * B
    if case == "length":
        data[s : s + 3] = (70_000).to_bytes(3, "little")
        detail = "fragment length 70000 > 65528 at block 1"
    elif case == "type":
        data[s + 7] = 9
        detail = "unknown record type 9"
    elif case == "middle":
        data[s + 7] = 3
        detail = "Middle fragment without First"
    elif case == "last":
        data[s + 7] = 4
        detail = "Last fragment without First"
    elif case == "item_type":
        data[s + 8] = 2
        detail = "item header type 2 != 1"
    elif case == "content_len":
        struct.pack_into("<I", data, s + 8 + 30, e - s - 42 + 10)
        detail = f"content_len {e - s - 42 + 10} != {e - s - 42} remaining"
    else:  # a Full fragment too short to hold an item header
        data[s : s + 3] = (20).to_bytes(3, "little")
        detail = "item of 20 bytes is shorter than its 34-byte header"
    _expect_resume(good, r, block_end, rows(scan_binlog(bytes(data), db=0, filenum=0)), detail)


def test_damage_in_a_split_record_skips_its_continuation(clean: bytes) -> None:
    good = _clean_rows(clean)
    r = _in_block(good, 2, straddling=True)
    s, e = r["start"], r["end"]
    data = bytearray(clean)
    last = e - e % B  # its Last fragment opens the next block
    assert data[s + 7] == 2 and data[last + 7] == 4
    data[last + 7] = 2  # a First while the record is open
    got = rows(scan_binlog(bytes(data), db=0, filenum=0))
    _expect_resume(good, r, last + B, got, "First fragment while a record is open")
    data = bytearray(clean)
    data[s + 7] = 8  # the First itself: reading resumes after the Last at the next block
    got = rows(scan_binlog(bytes(data), db=0, filenum=0))
    bad = next(x for x in got if x["row_kind"] == "corrupt_record")
    assert (bad["start"], bad["end"], bad["detail"]) == (s, e, "unknown record type 8")
    assert [x for x in got if x["row_kind"] == "record"] == [x for x in good if x["start"] != s]


def test_unparseable_resp_is_flagged_and_reading_goes_on(clean: bytes) -> None:
    good = _clean_rows(clean)
    r = _in_block(good, 1)
    s = r["start"]
    data = bytearray(clean)
    data[s + 42] = ord("#")
    got = rows(scan_binlog(bytes(data), db=0, filenum=0))
    k = good.index(r)
    assert got[:k] == good[:k] and got[k + 1 :] == good[k + 1 :]
    assert got[k]["row_kind"] == "corrupt_record" and got[k]["detail"] == "RESP content unparseable"
    assert (got[k]["logic_id"], got[k]["end"], got[k]["command"]) == (r["logic_id"], r["end"], None)


def test_truncated_data_is_a_torn_tail(clean: bytes) -> None:
    good = _clean_rows(clean)
    last = good[-1]
    s, e = last["start"], last["end"]
    for cut in (s + 3, s + 8, s + 50, e - 1):
        got = rows(scan_binlog(clean[:cut], db=0, filenum=0))
        assert got[:-1] == good[:-1]
        assert (got[-1]["row_kind"], got[-1]["start"], got[-1]["end"]) == ("torn_tail", s, cut)
    split = _in_block(good, 2, straddling=True)
    s, e = split["start"], split["end"]
    block = e - e % B  # where its Last fragment starts
    for cut in (block, block + 4, block + 20):  # First written, Last missing or cut
        got = rows(scan_binlog(clean[:cut], db=0, filenum=0))
        assert (got[-1]["row_kind"], got[-1]["start"], got[-1]["end"]) == ("torn_tail", s, cut)
    zeroed = clean[:block] + bytes(B)  # ... or the zero tail where the Last should be
    got = rows(scan_binlog(zeroed, db=0, filenum=0))
    assert (got[-1]["row_kind"], got[-1]["start"], got[-1]["end"]) == ("torn_tail", s, block)
    assert rows(scan_binlog(clean, db=0, filenum=0, logical_end=e - 1))[-1]["row_kind"] == "torn_tail"
    assert rows(scan_binlog(clean + bytes(5), db=0, filenum=0)) == good  # zero bytes after the end are no damage


def test_iter_records_and_summary(clean: bytes) -> None:
    recs = list(iter_records(memoryview(clean), db=2, filenum=0))
    assert all(isinstance(r, BinlogRecord) and r.db == 2 for r in recs)
    assert [r.end for r in recs] == [r["end"] for r in _clean_rows(clean)]
    s = summarize(scan_binlog(clean, db=0, filenum=0), file_size=len(clean) + 100)
    assert s == {
        "records": len(recs),
        "first_record_start": 0,
        "logical_end": len(clean),
        "padding_bytes": 0,
        "corrupt_records": 0,
        "torn_tail": False,
        "zero_tail_bytes": 100,
    }


def _check_invariants(batch: pa.RecordBatch, size: int) -> None:
    assert batch.schema.equals(RECORD_SCHEMA)
    prev_end = 0
    for r in batch.to_pylist():
        assert r["row_kind"] in KINDS
        assert prev_end <= r["start"] < r["end"] <= size
        assert (r["detail"] is None) == (r["row_kind"] in ("record", "padding"))
        prev_end = r["end"]


def test_random_and_bit_flipped_bytes_never_raise(clean: bytes, tmp_path: Path) -> None:
    rnd = random.Random(1234)
    path = tmp_path / "write2file0"
    mixed = tmp_path / "mixed"
    with writer(mixed, preallocate=False) as w:
        w.set_producer_status(0, 100_000)
        for k in range(60):
            w.append([b"SET", b"k%d" % k, rnd.randbytes(rnd.choice([50, 500, 70_000]))])
    bases = [clean, (mixed / "write2file0").read_bytes()]
    for n in range(250):
        data = bytearray(rnd.choice(bases))
        how = n % 5
        if how == 0:  # a few flipped bits
            for _ in range(rnd.randint(1, 8)):
                data[rnd.randrange(len(data))] ^= 1 << rnd.randrange(8)
        elif how == 1:  # a random run of garbage
            at = rnd.randrange(len(data))
            data[at : at + 64] = rnd.randbytes(64)
        elif how == 2:  # cut anywhere
            del data[rnd.randrange(len(data)) :]
        elif how == 3:  # garbage from the start, with zero runs
            data = bytearray(rnd.randbytes(rnd.randint(0, 3 * B)))
            for _ in range(rnd.randint(0, 5)):
                at = rnd.randrange(len(data) + 1)
                data[at : at + rnd.randint(1, 500)] = bytes(500)
        else:  # headers that claim plausible types and lengths
            for _ in range(rnd.randint(1, 4)):
                at = rnd.randrange(len(data))
                data[at : at + 8] = struct.pack(
                    "<HBIB", rnd.randrange(1 << 16), rnd.randrange(2), T0, rnd.choice([1, 2, 3, 4, 6])
                )
        batch = scan_binlog(bytes(data), db=0, filenum=0)
        _check_invariants(batch, len(data))
        if n % 10 == 0:
            path.write_bytes(data)
            assert parse_file(path, db=0, filenum=0, chunk_size=64 << 10).equals(batch)


def test_a_record_cut_in_a_file_that_is_not_the_last_is_damage_not_a_torn_tail(clean: bytes, tmp_path: Path) -> None:
    # Pika moves to the next file only after a whole record and trims the file it leaves: a cut or a zero
    # tail there is damage. It was an info-level torn_tail, and the pair passed.
    good = _clean_rows(clean)
    last = good[-1]
    s, e = last["start"], last["end"]
    split = _in_block(good, 2, straddling=True)
    block = split["end"] - split["end"] % B
    cases = [(clean[:cut], last, cut) for cut in (s + 3, s + 8, s + 50, e - 1)]
    cases += [(clean[:block] + bytes(B), split, block), (clean[: s + 40] + bytes(B), last, s + 40)]
    for data, r, cut in cases:
        torn = rows(scan_binlog(data, db=0, filenum=0))
        got = rows(scan_binlog(data, db=0, filenum=0, last=False))
        assert got[:-1] == torn[:-1] == [x for x in good if x["end"] <= r["start"]]
        assert torn[-1]["row_kind"] == "torn_tail" and got[-1]["row_kind"] == "corrupt_record"
        assert (got[-1]["start"], got[-1]["end"]) == (torn[-1]["start"], torn[-1]["end"]) and torn[-1]["end"] <= cut
        assert got[-1]["detail"] == f"record cut in a file that is not the last: {torn[-1]['detail']}"
        path = tmp_path / "write2file0"
        path.write_bytes(data)
        assert parse_file(path, db=0, filenum=0, last=False, chunk_size=B).to_pylist() == got


def test_a_zero_tail_ends_only_the_last_file_quietly(clean: bytes, tmp_path: Path) -> None:
    good = _clean_rows(clean)
    assert rows(scan_binlog(clean, db=0, filenum=0, last=False)) == good  # a trimmed file: no false positive
    assert rows(scan_binlog(clean + bytes(B), db=0, filenum=0)) == good
    got = rows(scan_binlog(clean + bytes(B), db=0, filenum=0, last=False))
    assert got[:-1] == good
    tail = (got[-1]["row_kind"], got[-1]["start"], got[-1]["end"], got[-1]["detail"])
    assert tail == ("corrupt_record", len(clean), len(clean) + B, "zero-filled tail in a file that is not the last")
    path = tmp_path / "write2file0"
    path.write_bytes(clean + bytes(3 * B))
    for chunk in (B, 8 << 20):
        assert parse_file(path, db=0, filenum=0, last=False, chunk_size=chunk).to_pylist()[-1]["start"] == len(clean)


# -- found by the property tests (tests/unit/test_pika_fuzz.py) -------------------------------------------


def test_a_crash_cut_with_the_rest_zero_filled_is_a_torn_tail(clean: bytes) -> None:
    # A preallocated file cut by a crash keeps its zeros after the cut: a header with a zero type byte,
    # or an item whose RESP ends in zeros, was a critical corrupt_record instead of a torn tail.
    good = _clean_rows(clean)
    last = good[-1]
    s, e = last["start"], last["end"]
    split = _in_block(good, 2, straddling=True)
    block = split["end"] - split["end"] % B  # its Last fragment starts here
    cases = [(last, cut) for cut in (s + 1, s + 5, s + 7, s + 8, s + 40, s + 60, e - 2, e - 1)]
    cases += [(split, cut) for cut in (block + 5, block + 12, split["end"] - 1)]
    for r, cut in cases:
        filled = clean[:cut] + bytes(B)
        got = rows(scan_binlog(filled, db=0, filenum=0))
        before = [x for x in good if x["end"] <= r["start"]]
        assert got[: len(before)] == before, cut
        tail = got[len(before) :]
        assert [(x["row_kind"], x["start"]) for x in tail] == [("torn_tail", r["start"])], (cut, tail)
        assert tail[0]["end"] <= cut
    assert rows(scan_binlog(clean + bytes(B), db=0, filenum=0)) == good


def test_a_zeroed_header_with_data_after_it_is_damage_not_the_end(clean: bytes, tmp_path: Path) -> None:
    # An all-zero header used to end the log silently, whatever followed: the rest of the file unread.
    good = _clean_rows(clean)
    r = _in_block(good, 1)
    data = bytearray(clean)
    data[r["start"] : r["start"] + 8] = bytes(8)
    got = rows(scan_binlog(bytes(data), db=0, filenum=0))
    block_end = (r["start"] // B + 1) * B
    _expect_resume(good, r, block_end, got, "zero-filled gap before more data")
    path = tmp_path / "write2file0"
    path.write_bytes(bytes(data) + bytes(3 * B))  # and the zero tail after the data still ends it quietly
    for chunk in (B, 2 * B, 8 << 20):
        assert parse_file(path, db=0, filenum=0, chunk_size=chunk).to_pylist() == got


def test_every_resp_argument_is_checked_not_only_the_first_two() -> None:
    # The argument count of a command with three or more arguments was not checked against the content.
    for args in ([b"SET", b"k", b"v"], [b"HSET", b"h", b"f", b"v"], [b"LPUSH", b"l", b"a", b"b", b"c"]):
        item = raw_item(args, T0, 0, 1, 0, 0)
        for digit in b"0123456789":
            changed = item[:35] + bytes([digit]) + item[36:]
            data = struct.pack("<HBIB", len(changed), 0, T0, 1) + changed
            got = rows(scan_binlog(data, db=0, filenum=0))
            if changed == item:
                assert got[0]["row_kind"] == "record" and got[0]["key"] == args[1]
            else:
                assert (got[0]["row_kind"], got[0]["detail"]) == ("corrupt_record", "RESP content unparseable")
        value_len = item.rindex(b"$")  # a value's declared length that disagrees with its bytes
        changed = item[: value_len + 1] + b"9" + item[value_len + 2 :]
        data = struct.pack("<HBIB", len(changed), 0, T0, 1) + changed
        assert rows(scan_binlog(data, db=0, filenum=0))[0]["row_kind"] == "corrupt_record"


@pytest.mark.parametrize(("left", "at", "value"), [(8, 0, 1), (8, 7, 1), (5, 2, 9)])  # length, type; not the time
def test_non_zero_bytes_in_a_block_trailer_are_damage_located_there(
    tmp_path: Path, left: int, at: int, value: int
) -> None:
    """The last 8 bytes of a block hold zeros (or a zero-length First header): Pika's reader never reads
    them. A byte changed there (found by the fuzzing: a zero-length First header whose length byte was
    hit) is damage at that byte, not at the fragments the next block then holds without their First."""
    w = writer(tmp_path)
    land(w, left, b"a", lambda args: w.append(args, exec_time=T0))
    trailer = w.position[1]
    w.append([b"SET", b"after-the-trailer", b"x" * 100], exec_time=T0)
    w.append([b"SET", b"later", b"y"], exec_time=T0)
    data = bytearray((tmp_path / "write2file0").read_bytes())
    assert trailer % B == B - left
    data[trailer + at] = value
    got = rows(scan_binlog(bytes(data), db=0, filenum=0))
    damage = [r for r in got if r["row_kind"] != "record"]
    assert damage and damage[0]["row_kind"] == "corrupt_record" and damage[0]["start"] == trailer
    assert [r["key"] for r in got if r["row_kind"] == "record"][-1] == b"later"  # reading resumed after it
