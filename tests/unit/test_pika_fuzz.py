"""Properties of the Pika binlog reader over generated logs, cuts and mutations (hypothesis).

Generated logs (tests/binlog_gen.py: Full/First/Middle/Last fragments across 64 KiB blocks, zero trailers,
8-left zero-length Firsts, full-sync padding, padding commands, rollover, preallocated zero tails) must
scan exactly as written; a log cut anywhere (truncated, or the rest zero-filled as a crash leaves a
preallocated file) ends in at most a torn_tail; a mutated log never raises, every record the reader
accepts is what a slow full decoding of its bytes gives, and nothing before the damage is lost.

Pika has no checksum: a value's bytes, the fragment timestamps and the item header's exec_time, term,
logic_id and producer position can change unseen (the row shows what the bytes say, and the master/slave
diff compares digests). What is detectable, and must be reported at the record: the fragment framing
(length, type, sequence, block bounds), the item header's type and content_len, and the RESP structure of
the command (argument count, every length and CRLF).
"""

from __future__ import annotations

import bisect
import functools
import tarfile
from collections.abc import Iterable
from typing import Any

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from audit.sources.pika.binlog import parse_file, scan_binlog
from audit.sources.pika.binlog_format import parse_manifest
from tests.binlog_gen import (
    B,
    Log,
    Written,
    check_rows,
    fragments,
    item_at,
    log_specs,
    scan,
    scratch,
    slow_row,
    write_log,
)
from tests.conftest import FIXTURES
from tests.fuzz_budget import examples, keep_on_failure


def _subset(got: dict[str, Any], want: dict[str, Any]) -> dict[str, Any]:
    return {k: got[k] for k in want}


def _expected(log: Log, n: int, upto: int | None = None) -> list[dict[str, Any]]:
    """Rows of file n's things that end by `upto` (a padding run keeps its whole pieces)."""
    out = []
    for w in log.of(n):
        if upto is None or w.end <= upto:
            out.append(w.row)
        elif w.pieces and w.start < upto:
            whole = [e for _, e in w.pieces if e <= upto]
            if whole:
                out.append({**w.row, "end": whole[-1]})
    return out


@given(spec=log_specs, chunk=st.sampled_from([64 << 10, 192 << 10, 8 << 20]))
@examples(40)
def test_a_generated_log_scans_as_written(spec: tuple[Any, ...], chunk: int) -> None:
    with scratch() as root:
        log = write_log(root, spec)
        for n, data in log.files.items():
            with keep_on_failure("pika_healthy", data):
                got = scan(data, filenum=n)
                check_rows(got, len(data))
                want = _expected(log, n)
                assert [_subset(g, w) for g, w in zip(got, want, strict=True)] == want
                assert len(got) == len(want)
                chunked = parse_file(root / f"write2file{n}", db=0, filenum=n, chunk_size=chunk)
                assert chunked.equals(scan_binlog(data, db=0, filenum=n))


def _cut_in(w: Written, data: bytes, draw: st.DrawFn) -> int:
    if w.pieces:
        lo, hi = draw(st.sampled_from(w.pieces))
    else:
        lo, hi = w.start, w.end
    rel = [0, 1, 3, 4, 7, 8, 9, 41, 42, 43, 50, hi - lo - 2, hi - lo - 1]
    blocks = [b - lo + d for b in range((lo // B + 1) * B, hi, B) for d in (-9, -8, -1, 0, 1, 8, 9, 50)]
    pick = draw(st.sampled_from(rel + blocks) | st.integers(0, hi - lo - 1))
    return lo + max(0, min(pick, hi - lo - 1))


@given(data=st.data(), spec=log_specs, zero_fill=st.booleans())
@examples(100)
def test_a_log_cut_anywhere_ends_in_at_most_a_torn_tail(
    data: st.DataObject, spec: tuple[Any, ...], zero_fill: bool
) -> None:
    with scratch() as root:
        log = write_log(root, spec)
    n = data.draw(st.sampled_from([k for k in sorted(log.files) if log.of(k)]), label="file")
    full = log.files[n]
    things = log.of(n)
    w = data.draw(st.sampled_from(things), label="thing")
    cut = _cut_in(w, full, data.draw)
    cut_bytes = full[:cut] + (bytes(max(len(full) - cut, B)) if zero_fill else b"")
    note(f"cut at {cut} of {len(full)} in {w.row['row_kind']} [{w.start}, {w.end}), zero_fill={zero_fill}")
    with keep_on_failure("pika_cut", cut_bytes):
        got = scan(cut_bytes, filenum=n)
        check_rows(got, len(cut_bytes))
        assert "corrupt_record" not in [r["row_kind"] for r in got], got[-3:]
        want = _expected(log, n, cut)
        assert [_subset(g, x) for g, x in zip(got, want, strict=False)] == want[: len(got)]
        assert len(got) in (len(want), len(want) + 1), (got[len(want) :], want[len(got) :])
        # The thing the cut fell in: torn unless only zeros of it were written.
        torn = got[len(want) :]
        inside = [(lo, hi) for x in things for lo, hi in (x.pieces or [(x.start, x.end)]) if lo < cut < hi]
        if inside and any(full[inside[0][0] : cut]):
            assert [(r["row_kind"], r["start"]) for r in torn] == [("torn_tail", inside[0][0])]
            if not zero_fill:
                assert torn[0]["end"] == cut
        else:
            assert torn == []


def _uncovered(rows: list[dict[str, Any]], offsets: Iterable[int]) -> list[int]:
    """The offsets no row spans (rows are ordered and do not overlap)."""
    starts = [r["start"] for r in rows]
    out = []
    for at in offsets:
        k = bisect.bisect_right(starts, at) - 1
        if not (k >= 0 and rows[k]["start"] <= at < rows[k]["end"]):
            out.append(at)
    return out


def _locate(log: Log, n: int, at: int) -> Written | None:
    return next((w for w in log.of(n) if w.start <= at < w.end), None)


@st.composite
def mutations(draw: st.DrawFn, log: Log, n: int) -> tuple[str, int, bytes]:
    data = log.files[n]
    records = [w for w in log.of(n) if not w.pieces]
    how = draw(st.sampled_from(["frame", "item_header", "resp", "argc", "value", "any"] if records else ["any"]))
    if how == "any":
        at = draw(st.integers(0, len(data) - 1))
        width = draw(st.integers(1, 8))
    else:
        w = draw(st.sampled_from(records))
        if how == "frame":  # a length or type byte of one of the record's fragment headers
            lo, _ = draw(st.sampled_from(fragments(data, w.start)))
            at = lo - 8 + draw(st.sampled_from([0, 1, 2, 7]))
        elif how == "item_header":  # the item type or content_len
            at = item_at(data, w.start, draw(st.sampled_from([0, 1, 30, 31, 32, 33])))
        elif how == "resp":  # a byte of the RESP framing: the argument count
            at = item_at(data, w.start, 34 + draw(st.integers(0, 3)))
        elif how == "argc":  # the argument count, another digit
            at = item_at(data, w.start, 35)
            digit = draw(st.sampled_from([d for d in b"0123456789" if d != data[at]]))
            return how, at, bytes([digit])
        else:
            at = draw(st.integers(w.start, w.end - 1))
        width = 1
    width = min(width, len(data) - at)
    old = data[at : at + width]
    new = draw(st.binary(min_size=width, max_size=width).filter(lambda b: b != old))
    return how, at, new


@given(data=st.data(), spec=log_specs)
@examples(200)
def test_a_mutated_log_never_raises_and_accepts_only_sound_records(data: st.DataObject, spec: tuple[Any, ...]) -> None:
    with scratch() as root:
        log = write_log(root, spec)
    n = data.draw(st.sampled_from(sorted(log.files)))
    original = log.files[n]
    if not original:
        return
    how, at, new = data.draw(mutations(log, n), label="mutation")
    mutated = original[:at] + new + original[at + len(new) :]
    note(f"{how} at {at}: {original[at : at + len(new)].hex()} -> {new.hex()}")
    with keep_on_failure(f"pika_mutated_{how}", mutated):
        got = scan(mutated, filenum=n)
        check_rows(got, len(mutated))
        for r in got:
            if r["row_kind"] == "record":
                assert r == slow_row(mutated, r["start"], n), r
        before = [w.row for w in log.of(n) if w.end <= at and not w.pieces]
        assert [r for r in got if r["row_kind"] == "record" and r["end"] <= at] == before
        damage = [r for r in got if r["row_kind"] in ("corrupt_record", "torn_tail")]
        hit = _locate(log, n, at)
        if damage:  # at the damaged record, or inside the padding record whose content (unchecked) hides it
            piece = next((hi for lo, hi in hit.pieces if lo <= at < hi), hit.end) if hit and hit.pieces else 0
            # or where a padding row read over the mutated byte ends: a padding's own length changed by
            # the mutation shows only at the header that should follow it (corpus: padding_length_one_longer)
            padded = max(
                (r["end"] for r in got if r["row_kind"] == "padding" and r["start"] <= at < r["end"]), default=0
            )
            assert damage[0]["start"] <= max(at + len(new), piece - 1, padded), damage[0]
        # Nothing is skipped unseen: every written record before a torn tail is a row or inside one.
        stop = min([r["start"] for r in got if r["row_kind"] == "torn_tail"] + [len(mutated)])
        assert not _uncovered(got, (w.start for w in log.of(n) if w.start < stop and not w.pieces)), got[-3:]
        if how in ("frame", "item_header", "resp", "argc") and hit is not None:
            assert not [r for r in got if r["row_kind"] == "record" and r["start"] == hit.start and r != hit.row]


# -- a real Pika 4.0 capture (tests/fixtures/pika-live) ---------------------------------------------------

LIVE = FIXTURES / "pika-live" / "binlogs.tar.gz"


@functools.cache
def live_binlog(member: str = "master/log_db1") -> tuple[bytes, tuple[dict[str, Any], ...]]:
    """A live master's write2file0 up to its manifest's pro_offset plus a block of its zero tail, and its rows."""
    with tarfile.open(LIVE) as tar:
        manifest = parse_manifest(tar.extractfile(f"{member}/manifest").read(64))  # type: ignore[union-attr]
        data = tar.extractfile(f"{member}/write2file0").read()  # type: ignore[union-attr]
    data = data[: manifest.pro_offset + B]
    rows = tuple(scan(data))
    assert {r["row_kind"] for r in rows} == {"record"} and rows[-1]["end"] == manifest.pro_offset
    return data, rows


@given(data=st.data())
@examples(60)
def test_a_mutated_live_binlog_never_raises_and_accepts_only_sound_records(data: st.DataObject) -> None:
    original, rows = live_binlog()
    k = data.draw(st.integers(0, len(rows) - 1), label="record")
    r = rows[k]
    at = data.draw(
        st.integers(r["start"], r["end"] - 1)
        | st.sampled_from([r["start"], r["start"] + 7, r["start"] + 8, r["start"] + 43])
    )
    width = data.draw(st.integers(1, 4))
    old = original[at : at + width]
    new = data.draw(st.binary(min_size=len(old), max_size=len(old)).filter(lambda b: b != old))
    mutated = original[:at] + new + original[at + len(new) :]
    note(f"at {at}: {old.hex()} -> {new.hex()}")
    with keep_on_failure("pika_live_mutated", mutated):
        got = scan(mutated)
        check_rows(got, len(mutated))
        unchanged = {r["start"]: r for r in rows}
        for g in got:  # a record that is not the original one is what a slow full decoding says
            if g["row_kind"] == "record" and g != unchanged.get(g["start"]):
                assert g == slow_row(mutated, g["start"]), g
        assert [g for g in got if g["row_kind"] == "record" and g["end"] <= at] == list(rows[:k])
        damage = [g for g in got if g["row_kind"] in ("corrupt_record", "torn_tail")]
        if damage:
            assert damage[0]["start"] <= at + len(new) - 1, damage[0]
        stop = min([g["start"] for g in got if g["row_kind"] == "torn_tail"] + [len(mutated)])
        assert not _uncovered(got, (w["start"] for w in rows if w["start"] < stop))


@given(data=st.data(), zero_fill=st.booleans())
@examples(40)
def test_the_live_binlog_cut_anywhere_ends_in_at_most_a_torn_tail(data: st.DataObject, zero_fill: bool) -> None:
    original, rows = live_binlog("slave/log_db0")
    cut = data.draw(st.integers(1, rows[-1]["end"]), label="cut")
    cut_bytes = original[:cut] + (bytes(B) if zero_fill else b"")
    got = scan(cut_bytes)
    whole = [r for r in rows if r["end"] <= cut]
    inside = [r for r in rows if r["start"] < cut < r["end"]]
    assert got[: len(whole)] == whole
    assert [(g["row_kind"], g["start"]) for g in got[len(whole) :]] == [("torn_tail", r["start"]) for r in inside]


# -- exhaustive runs: `make fuzz` only --------------------------------------------------------------------


@pytest.mark.fuzz
def test_every_bit_flip_of_the_first_live_blocks() -> None:
    original, rows = live_binlog()
    prefix = original[: 16 << 10]  # about 200 records, the last one cut
    head = [r for r in rows if r["end"] <= len(prefix)]
    for at in range(len(prefix) // 2):
        for bit in range(8):
            mutated = prefix[:at] + bytes([prefix[at] ^ (1 << bit)]) + prefix[at + 1 :]
            with keep_on_failure("pika_live_bit_flip", mutated):
                got = scan(mutated)
                check_rows(got, len(mutated))
                unchanged = {r["start"]: r for r in head}
                for g in got:
                    if g["row_kind"] == "record" and g != unchanged.get(g["start"]):
                        assert g == slow_row(mutated, g["start"]), (at, bit, g)


@pytest.mark.fuzz
def test_every_cut_of_the_live_binlog() -> None:
    original, rows = live_binlog("slave/log_db0")
    end = rows[-1]["end"]
    for cut in [*range(1, B + 1), *range(B, 4 * B, 7), *range(end - 500, end + 1)]:
        for zero_fill in (False, True):
            got = scan(original[:cut] + (bytes(B) if zero_fill else b""))
            assert "corrupt_record" not in {g["row_kind"] for g in got}, (cut, zero_fill)
