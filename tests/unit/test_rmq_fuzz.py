"""Properties of the RocketMQ commit-log scanner over generated stores, cuts and mutations (hypothesis).

Generated stores (tests/commitlog_gen.py: every field, v1/v2, IPv4/IPv6 mixes, properties, BLANK
rollovers, preallocated or not) must scan exactly as the per-record oracle decodes them; a slave cut
anywhere ends in at most a torn_tail; a mutated byte is reported at the record it damaged whenever the
format can tell (body CRC, length formula, PHYSICALOFFSET, magic), and any record the scanner accepts
holds exactly the bytes on disk. The budget is tests/fuzz_budget.py's.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest
from hypothesis import assume, given, note
from hypothesis import strategies as st

from audit.errors import CorruptRecordError
from audit.local.rocketmq_commitlog import Message
from audit.sources.rocketmq.format import MAGIC_BLANK
from tests.commitlog_gen import (
    OracleScan,
    Store,
    check_rows,
    expected_healthy,
    field_starts,
    oracle_row,
    oracle_scan,
    scan_file,
    scratch,
    slave_of,
    store_specs,
    without_detail,
    write,
)
from tests.conftest import FIXTURES
from tests.fuzz_budget import examples, keep_on_failure
from tests.rocketmq_oracle import decode_record

pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")

FIXTURE = FIXTURES / "rocketmq" / "00000000000000000000"
batch_sizes = st.sampled_from([1, 200, 1000, 1 << 20])


def _compare(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    assert len(got) == len(want), ([r["row_kind"] for r in got], [r["row_kind"] for r in want])
    for g, w in zip(got, want, strict=True):
        assert {k: g[k] for k in w} == w


@given(spec=store_specs(), batch_bytes=batch_sizes)
@examples(60)
def test_a_generated_store_scans_as_the_oracle_decodes_it(
    spec: tuple[list[Message], int, bool], batch_bytes: int
) -> None:
    msgs, file_size, prealloc = spec
    with scratch() as root:
        store = write(root, msgs, file_size, prealloc)
        starts = sorted(store.files)
        for start in starts:
            data = store.files[start]
            last = start == starts[-1]
            with keep_on_failure("rmq_healthy", data):
                got = scan_file(data, start, last, batch_bytes)
                check_rows(got, start, len(data))
                _compare(got, expected_healthy(store, start, data, last))
        got_offsets = [r["phys_offset"] for s in starts for r in scan_file(store.files[s], s, s == starts[-1], 1 << 20)]
        assert [o for o in got_offsets if o in set(store.offsets)] == store.offsets


@st.composite
def cut_points(draw: st.DrawFn, store: Store) -> int:
    """An offset to cut the master's bytes at: inside a record at one of its field edges or anywhere, inside
    a BLANK or the bytes after it, or exactly at a record boundary."""
    k = draw(st.integers(0, len(store.offsets) - 1))
    at, msg = store.offsets[k], store.messages[k]
    where = draw(st.sampled_from(["field", "any", "blank", "boundary"]))
    if where == "field":
        return at + draw(st.sampled_from(field_starts(msg, at)))
    if where == "any":
        return at + draw(st.integers(0, store.size_of(k) - 1))
    if where == "blank":
        ends = [s + len(d) for s, d in store.files.items() if s != max(store.files)]
        if ends:
            file_end = draw(st.sampled_from(ends))
            blank_at = max(o + store.size_of(i) for i, o in enumerate(store.offsets) if o < file_end)
            return blank_at + draw(st.integers(0, min(12, file_end - blank_at)))
    return at


@given(data=st.data(), spec=store_specs(max_messages=20), slave_prealloc=st.booleans(), batch_bytes=batch_sizes)
@examples(120)
def test_a_slave_cut_anywhere_ends_in_at_most_a_torn_tail(
    data: st.DataObject, spec: tuple[list[Message], int, bool], slave_prealloc: bool, batch_bytes: int
) -> None:
    msgs, file_size, _ = spec
    with scratch() as root:
        store = write(root / "m", msgs, file_size, True)
        cut = data.draw(cut_points(store), label="cut")
        slave = slave_of(store, root / "s", cut, slave_prealloc)
        starts = sorted(slave)
        for start in starts:
            got = scan_file(slave[start], start, start == starts[-1], batch_bytes)
            with keep_on_failure("rmq_slave_cut", slave[start]):
                check_rows(got, start, len(slave[start]))
                assert "corrupt_record" not in [r["row_kind"] for r in got], got[-1]
                if start != starts[-1]:
                    _compare(got, expected_healthy(store, start, store.files[start], False))
                    continue
                # The last file: every whole record, then the cut thing as a torn tail unless only zeros
                # of it were copied (nothing then tells it from the preallocated tail).
                # In a preallocated slave a record is whole when what the cut left out is only zeros
                # (a PROPLEN of 0): the zeros of the file are its bytes.
                master = store.files[start]
                ends = [
                    o + size
                    for o, size in ((o, store.size_of(k)) for k, o in enumerate(store.offsets))
                    if start <= o
                    and (
                        o + size <= cut
                        or (slave_prealloc and o < cut and not any(master[cut - start : o + size - start]))
                    )
                ]
                whole = [o for k, o in enumerate(store.offsets) if o + store.size_of(k) in ends]
                assert [r["phys_offset"] for r in got if r["row_kind"] == "record"] == whole
                edge = max([start, *ends])
                written = slave[start][edge - start : cut - start]
                tail = [r for r in got if r["row_kind"] != "record"]
                is_blank = store.files[start][edge - start + 4 : edge - start + 8] == MAGIC_BLANK.to_bytes(
                    4, "big", signed=True
                )
                if is_blank and cut - edge >= 8:
                    assert [r["row_kind"] for r in tail] == ["blank"]
                elif written.strip(b"\0"):
                    assert [(r["row_kind"], r["phys_offset"]) for r in tail] == [("torn_tail", edge)]
                else:
                    assert tail == []


def _body_range(data: bytes, pos: int, file_start: int) -> tuple[int, int]:
    rec = decode_record(data, pos, file_start=file_start)
    born6, store6 = bool(rec.sys_flag & 0x10), bool(rec.sys_flag & 0x20)
    body_at = pos + 48 + (20 if born6 else 8) + 8 + (20 if store6 else 8) + 16
    return body_at, body_at + len(rec.body)


@st.composite
def mutations(draw: st.DrawFn, data: bytes, file_start: int) -> tuple[str, int, bytes]:
    """(class, position, new bytes): a burst in a record body, a byte of a checked header field, any byte."""
    seen = oracle_scan(data, file_start)
    assert seen.error is None and seen.records
    rec = draw(st.sampled_from(seen.records))
    pos = rec.phys_offset - file_start
    how = draw(st.sampled_from(["body", "checked_header", "any_in_record", "anywhere"]))
    if how == "body":
        lo, hi = _body_range(data, pos, file_start)
        assume(hi > lo)
        at = draw(st.integers(lo, hi - 1))
        width = draw(st.integers(1, min(4, hi - at)))
    elif how == "checked_header":  # TOTALSIZE, MAGICCODE, BODYCRC, PHYSICALOFFSET, SYSFLAG's IPv6 bits
        at = pos + draw(st.sampled_from([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, *range(28, 36), 39]))
        width = 1
    elif how == "any_in_record":
        at = pos + draw(st.integers(0, rec.size - 1))
        width = draw(st.integers(1, 4))
    else:
        at = draw(st.integers(0, len(data) - 1))
        width = draw(st.integers(1, 8))
    width = min(width, len(data) - at)
    old = data[at : at + width]
    if how == "checked_header" and at == pos + 39:
        # One bit: the number of IPv6 hosts changes, so does the length (swapping which one is IPv6 does not).
        new = bytes([old[0] ^ draw(st.sampled_from([0x10, 0x20]))])
    else:
        new = draw(st.binary(min_size=width, max_size=width).filter(lambda b: b != old))
    return how, at, new


@functools.lru_cache(maxsize=8)
def _oracle_of(original: bytes, file_start: int) -> OracleScan:
    return oracle_scan(original, file_start)


def _check_mutated(
    original: bytes, mutated: bytes, file_start: int, how: str, at: int, width: int, last_file: bool
) -> None:
    got = scan_file(mutated, file_start, last_file, 1000)
    check_rows(got, file_start, len(mutated))
    before = _oracle_of(original, file_start)
    damage = [r for r in got if r["row_kind"] in ("corrupt_record", "torn_tail")]
    for r in got:
        if r["row_kind"] != "record":
            continue
        # What the scanner accepts is what the bytes say, field for field.
        pos = r["phys_offset"] - file_start
        assert without_detail(r) == oracle_row(decode_record(mutated, pos, file_start=file_start), mutated, file_start)
    hit = next((rec for rec in before.records if rec.phys_offset <= file_start + at < rec.phys_offset + rec.size), None)
    untouched = [
        oracle_row(rec, original, file_start) for rec in before.records if rec.phys_offset + rec.size <= file_start + at
    ]
    assert [without_detail(r) for r in got[: len(untouched)]] == untouched
    if damage:
        assert damage[0]["phys_offset"] < file_start + at + width, damage
    if hit is None:
        return
    row = got[len(untouched)] if len(got) > len(untouched) else None
    if how == "body":
        assert row is not None and row["row_kind"] == "corrupt_record" and row["phys_offset"] == hit.phys_offset, row
        assert json.loads(row["detail"])["reason"] == "body_crc" and row["crc_ok"] is False
    elif how == "checked_header":
        assert row is not None and row["phys_offset"] == hit.phys_offset, row
        assert row["row_kind"] in ("corrupt_record", "torn_tail"), row


def _mutate(data: bytes, at: int, new: bytes) -> bytes:
    return data[:at] + new + data[at + len(new) :]


@given(data=st.data(), spec=store_specs(max_messages=15))
@examples(150)
def test_a_mutated_generated_store_is_reported_where_it_is_damaged(
    data: st.DataObject, spec: tuple[list[Message], int, bool]
) -> None:
    msgs, file_size, prealloc = spec
    with scratch() as root:
        store = write(root, msgs, file_size, prealloc)
    starts = sorted(store.files)
    start = data.draw(st.sampled_from(starts), label="file")
    original = store.files[start]
    how, at, new = data.draw(mutations(original, start), label="mutation")
    mutated = _mutate(original, at, new)
    note(f"{how} at {at}: {original[at : at + len(new)].hex()} -> {new.hex()}")
    with keep_on_failure(f"rmq_mutated_{how}", mutated):
        _check_mutated(original, mutated, start, how, at, len(new), start == starts[-1])
        for other in starts:  # damage ends the reading of its own file only
            if other != start:
                _compare(
                    scan_file(store.files[other], other, other == starts[-1], 1000),
                    expected_healthy(store, other, store.files[other], other == starts[-1]),
                )


@pytest.fixture(scope="module")
def fixture_bytes() -> bytes:
    return FIXTURE.read_bytes()


@given(data=st.data())
@examples(150)
def test_a_mutated_broker_written_file_is_reported_where_it_is_damaged(data: st.DataObject) -> None:
    original = FIXTURE.read_bytes()
    how, at, new = data.draw(mutations(original, 0), label="mutation")
    mutated = _mutate(original, at, new)
    note(f"{how} at {at}: {original[at : at + len(new)].hex()} -> {new.hex()}")
    with keep_on_failure(f"rmq_fixture_{how}", mutated):
        _check_mutated(original, mutated, 0, how, at, len(new), True)
        _check_mutated(original, mutated, 0, how, at, len(new), False)


@given(blob=st.binary(max_size=3000), file_start=st.sampled_from([0, 8192, 1 << 30]), last=st.booleans())
@examples(150)
def test_arbitrary_bytes_never_raise(blob: bytes, file_start: int, last: bool) -> None:
    with keep_on_failure("rmq_arbitrary", blob):
        got = scan_file(blob, file_start, last, 500)
        check_rows(got, file_start, len(blob))
        for r in got:
            if r["row_kind"] == "record":
                pos = r["phys_offset"] - file_start
                assert without_detail(r) == oracle_row(
                    decode_record(blob, pos, file_start=file_start), blob, file_start
                )


def test_a_corrupt_record_error_of_the_oracle_is_a_row_of_the_scanner(fixture_bytes: bytes) -> None:
    # Sanity of the harness itself: the oracle stops where the scanner reports damage.
    mutated = bytearray(fixture_bytes)
    mutated[172 * 3 + 100] ^= 1
    seen = oracle_scan(bytes(mutated), 0)
    assert isinstance(seen.error, CorruptRecordError) and seen.error.offset == 172 * 3
    got = scan_file(bytes(mutated), 0, True, 1000)
    assert got[-1]["row_kind"] == "corrupt_record" and got[-1]["phys_offset"] == 172 * 3


# -- exhaustive runs: `make fuzz` only --------------------------------------------------------------------


@pytest.mark.fuzz
def test_every_bit_flip_of_the_broker_written_file(fixture_bytes: bytes) -> None:
    for at in range(len(fixture_bytes)):
        for bit in range(8):
            mutated = _mutate(fixture_bytes, at, bytes([fixture_bytes[at] ^ (1 << bit)]))
            with keep_on_failure("rmq_fixture_bit_flip", mutated):
                _check_mutated(fixture_bytes, mutated, 0, "any", at, 1, True)


@pytest.mark.fuzz
def test_every_cut_of_a_mixed_store() -> None:
    hosts = ["10.0.0.7:50123", "[2001:db8::7]:50123", "[::1]:1"]
    msgs = [
        Message(
            topic="T" * (1 + i % 3) if i % 5 else "L" * 140,
            body=bytes(range(i % 7)) * 40,
            properties={} if i % 4 == 0 else {"UNIQ_KEY": f"U{i}", "KEYS": "k" * (i % 3), "TAGS": "t"},
            born_host=hosts[i % 3],
            store_host=hosts[(i // 3) % 3],
        )
        for i in range(24)
    ]
    with scratch() as root:
        store = write(root / "m", msgs, 2048, True)
        for cut in range(1, max(store.offsets) + store.size_of(len(msgs) - 1) + 1):
            for prealloc in (True, False):
                slave = slave_of(store, root / f"s{cut}{prealloc}", cut, prealloc)
                starts = sorted(slave)
                for start in starts:
                    got = scan_file(slave[start], start, start == starts[-1], 1 << 20)
                    with keep_on_failure("rmq_every_cut", slave[start]):
                        check_rows(got, start, len(slave[start]))
                        assert "corrupt_record" not in [r["row_kind"] for r in got], (cut, prealloc, got[-1])
