"""Reading a record's leading arguments back from a binlog file written byte-exactly: fragments across
blocks, a record that starts with the writer's zero-length First header, a file changed since the scan."""

from __future__ import annotations

from pathlib import Path

from audit.local.pika_binlog import BinlogWriter, resp_encode
from audit.sources.pika.binlog import parse_file
from audit.sources.pika.binlog_format import BLOCK_SIZE, HEADER_SIZE, ITEM_HEADER_SIZE, content_digest
from audit.sources.pika.record_args import expire_at_ms, join_fragments, read_expiry, resp_args

T0 = 1_700_000_000


def _write(log: Path, cmds: list[list[bytes]]) -> list[tuple[int, int, int]]:
    with BinlogWriter(log, file_size=1 << 30) as w:
        return [w.append(c, exec_time=T0) for c in cmds]


def _digest(cmd: list[bytes]) -> int:
    return content_digest(resp_encode(cmd))


def test_a_record_in_three_blocks_is_joined_and_verified(tmp_path: Path) -> None:
    big = [b"pksetexat", b"big", b"%d" % (T0 + 60), b"v" * (150 * 1024)]
    (_, (f, start, end)) = _write(tmp_path, [[b"set", b"a", b"x" * 1000], big])
    data = (tmp_path / f"write2file{f}").read_bytes()
    assert start // BLOCK_SIZE != end // BLOCK_SIZE  # really fragmented
    item = join_fragments(data[start:end], start)
    assert item[ITEM_HEADER_SIZE:] == resp_encode(big)
    got = read_expiry(str(tmp_path / "write2file0"), start, end, _digest(big), "pksetexat", T0)
    assert got == {"expire_at_ms": (T0 + 60) * 1000, "args_read": "verified"}


def test_a_record_behind_the_zero_length_first_header(tmp_path: Path) -> None:
    """With exactly 8 bytes left in a block the writer puts an empty First fragment there."""
    prefix = len(resp_encode([b"set", b"k", b""]))
    fill = BLOCK_SIZE - HEADER_SIZE - HEADER_SIZE - ITEM_HEADER_SIZE - prefix  # leaves exactly 8 bytes
    n = fill - (len(str(fill)) - 1)  # the value's length digits are part of the content too
    first = [b"set", b"k", b"y" * n]
    nxt = [b"expireat", b"k", b"%d" % (T0 + 9)]
    (_, _, end0), (_, start, end) = _write(tmp_path, [first, nxt])
    assert end0 == start == BLOCK_SIZE - HEADER_SIZE
    got = read_expiry(str(tmp_path / "write2file0"), start, end, _digest(nxt), "expireat", T0)
    assert got == {"expire_at_ms": (T0 + 9) * 1000, "args_read": "verified"}
    rows = parse_file(tmp_path / "write2file0", db=0, filenum=0).to_pylist()
    assert [(r["start"], r["command"]) for r in rows][1] == (start, "expireat")  # the scan agrees


def test_a_file_changed_since_the_scan_gives_no_value(tmp_path: Path) -> None:
    cmd = [b"pexpireat", b"k", b"%d" % (T0 * 1000 + 1)]
    ((_, start, end),) = _write(tmp_path, [cmd])
    path = tmp_path / "write2file0"
    assert read_expiry(str(path), start, end, _digest(cmd), "pexpireat", T0)["expire_at_ms"] == T0 * 1000 + 1
    data = bytearray(path.read_bytes())
    data[end - 3] ^= 1  # one digit of the expiry
    path.write_bytes(bytes(data))
    assert read_expiry(str(path), start, end, _digest(cmd), "pexpireat", T0) == {
        "expire_at_ms": None,
        "args_read": "changed since the scan",
    }
    gone = read_expiry(str(tmp_path / "write2file9"), start, end, _digest(cmd), "pexpireat", T0)
    assert gone["expire_at_ms"] is None and gone["args_read"].startswith("unreadable")


def test_expiry_units_and_relative_forms() -> None:
    assert expire_at_ms("pksetexat", [b"pksetexat", b"k", b"100", b"v"], 0) == 100_000
    assert expire_at_ms("pexpireat", [b"pexpireat", b"k", b"100"], 0) == 100
    assert expire_at_ms("setex", [b"setex", b"k", b"10", b"v"], 50) == 60_000
    assert expire_at_ms("pexpire", [b"pexpire", b"k", b"10"], 50) == 50_010
    assert expire_at_ms("set", [b"set", b"k", b"10"], 50) is None
    assert expire_at_ms("expire", [b"expire", b"k", b"soon"], 50) is None
    assert expire_at_ms("expire", [b"expire", b"k"], 50) is None


def test_resp_args_stops_at_the_limit_or_where_the_content_is_cut() -> None:
    content = resp_encode([b"pksetexat", b"k", b"123", b"v" * 10])
    assert resp_args(content, 3) == [b"pksetexat", b"k", b"123"]
    assert resp_args(content[:33], 4) == [b"pksetexat", b"k", b"123"]  # cut after the third argument
    assert resp_args(content[:32], 4) == [b"pksetexat", b"k"]  # cut inside it
