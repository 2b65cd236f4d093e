"""Stores as a live broker leaves them while it writes: the next file preallocated ahead of the roll, head
files deleted by retention, records caught half written. Lag and torn tails at most, never a divergence."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from audit.local.rocketmq_commitlog import replicate, write_store
from audit.sources.rocketmq.format import offset_to_file_name
from audit.sources.rocketmq.store import commitlog_files, max_offset
from tests.unit.test_rmq_diff import FILE_SIZE, SIZE, T_NEW, msg, run


def preallocate_next(store: Path) -> Path:
    """The file after the last one, full size and zeros: what AllocateMappedFileService creates ahead."""
    last = commitlog_files(store)[-1]
    path = last.path.parent / offset_to_file_name(last.start + FILE_SIZE)
    with path.open("wb") as fh:
        fh.truncate(FILE_SIZE)
    return path


@pytest.mark.parametrize("cut", [0, 37], ids=["at-a-record", "mid-record"])
def test_a_lagging_slave_with_the_next_file_preallocated_is_lag_not_damage(
    spark: Any, tmp_path: Path, cut: int
) -> None:
    offsets = write_store(tmp_path / "m", [msg(i) for i in range(200)], file_size=FILE_SIZE)
    top = offsets[-1] + SIZE
    behind = offsets[-4] + cut  # inside the last file holding data
    assert behind // FILE_SIZE == top // FILE_SIZE
    replicate(tmp_path / "m", tmp_path / "s", start=0, upto=behind)
    for side in ("m", "s"):
        preallocate_next(tmp_path / side)
    rows, result = run(spark, tmp_path / "m", tmp_path / "s")
    assert [(r["category"], r["start_num"]) for r in rows] == ([("torn_tail", offsets[-4])] if cut else [])
    m = result.metrics
    assert (m["master_max_offset"], m["replica_max_offset"], m["common_end"]) == (top, offsets[-4], offsets[-4])
    assert m["bytes_not_compared"] == 0 and m["replica_end_unknown"] == 0
    if cut:
        assert json.loads(rows[0]["detail"])["file"] == offset_to_file_name(top - top % FILE_SIZE)
    assert max_offset(tmp_path / "m") == top and max_offset(tmp_path / "s") == offsets[-4]


def test_a_record_written_while_the_scan_reads_the_last_file_is_not_damage() -> None:
    """The scanner reads a live file at several moments: where its walk found zeros, a record may be
    there by the time it looks again. That is data arriving, not a corrupt_record."""
    from audit.local.rocketmq_commitlog import encode
    from audit.sources.rocketmq.scan import iter_batches

    data = bytearray(FILE_SIZE)
    pos = 0
    for i in range(5):
        data[pos : pos + SIZE] = encode(msg(i), pos)
        pos += SIZE
    batches = iter_batches(data, file_start=0, last_file=True)
    first = next(batches)  # the walk stopped at the zeros after record 4
    assert first.num_rows == 5
    data[pos : pos + SIZE] = encode(msg(5), pos)  # the broker appends record 5 meanwhile
    rest = list(batches)
    kinds = [k for b in rest for k in b.column("row_kind").to_pylist()]
    assert "corrupt_record" not in kinds and kinds in ([], ["record"])
    if kinds:
        assert rest[0].column("phys_offset").to_pylist() == [pos]
    # Damage that stays put is still damage: two readings agree on it.
    data[2 * SIZE + 95] ^= 0x01  # a bit of record 2's body
    rows = [b for b in iter_batches(data, file_start=0, last_file=True) if b.column("row_kind")[0].as_py() != "record"]
    assert [(r.column("row_kind")[0].as_py(), r.column("phys_offset")[0].as_py()) for r in rows] == [
        ("corrupt_record", 2 * SIZE)
    ]


@pytest.mark.parametrize("side", ["m", "s"])
def test_head_files_deleted_after_the_listing_are_out_of_range_not_an_error(
    spark: Any, tmp_path: Path, side: str
) -> None:
    """Retention (fileReservedTime) deletes a store's oldest files, on each broker at its own moment: a file
    listed by the snapshot and gone when the diff reads it leaves the common range, as if never listed."""
    from audit.sources.rocketmq.diff import diff_stores

    offsets = write_store(tmp_path / "m", [msg(i) for i in range(300)], file_size=FILE_SIZE)
    top = offsets[-1] + SIZE
    replicate(tmp_path / "m", tmp_path / "s", start=0, upto=top)
    listed = {s: commitlog_files(tmp_path / s) for s in ("m", "s")}
    for f in listed[side][:2]:
        f.path.unlink()
    result = diff_stores(spark, listed["m"], listed["s"], chunk_bytes=4096)
    rows = result.findings.collect()
    result.release()
    assert rows == []
    m = result.metrics
    prefix = "master" if side == "m" else "replica"
    assert (m[f"{prefix}_min_offset"], m[f"{prefix}_files"], m[f"{prefix}_files_deleted"]) == (
        2 * FILE_SIZE,
        len(listed[side]) - 2,
        2,
    )
    assert (m["common_start"], m["common_end"], m["bytes_not_compared"]) == (2 * FILE_SIZE, top, 0)
    assert m["bytes_compared"] == top - 2 * FILE_SIZE


def test_a_slave_behind_a_duplicate_is_lag_past_its_newest_record(spark: Any, tmp_path: Path) -> None:
    """The slave stored message 120 twice, so its copy of each later message lies one record further than
    the master's; it has received messages up to 199 of 300. Master records past its newest message are
    lag, not a missing_range, whatever their offset."""
    messages = [msg(i) for i in range(300)]
    write_store(tmp_path / "m", messages, file_size=FILE_SIZE)
    dup = 120
    s_offsets = write_store(tmp_path / "s", [*messages[: dup + 1], *messages[dup:200]], file_size=FILE_SIZE)
    rows, result = run(spark, tmp_path / "m", tmp_path / "s")
    assert [(r["category"], r["start_num"], r["count"]) for r in rows] == [("duplicate_range", s_offsets[dup + 1], 1)]
    assert result.metrics["replica_max_offset"] == s_offsets[-1] + SIZE < result.metrics["master_max_offset"]


def test_a_slave_missing_a_record_read_while_the_master_rolls_shows_it_once(spark: Any, tmp_path: Path) -> None:
    """The slave lacks message 100, so it holds each later message one record earlier than the master. The
    master rolled to a new file after the snapshot listed its files: the slave's last listed file holds
    messages the master wrote past the files listed. Those are not read on the master, not divergent."""
    from audit.sources.rocketmq.diff import diff_stores

    messages = [msg(i) for i in range(300)]
    offsets = write_store(tmp_path / "m", messages, file_size=FILE_SIZE)
    gone = 100
    write_store(tmp_path / "s", [m for i, m in enumerate(messages) if i != gone], file_size=FILE_SIZE)
    listed = {s: commitlog_files(tmp_path / s)[:3] for s in ("m", "s")}  # as listed before the roll to file 3
    result = diff_stores(spark, listed["m"], listed["s"], chunk_bytes=4096)
    rows = [r.asDict() for r in result.findings.collect()]
    result.release()
    assert [(r["category"], r["start_num"], r["count"]) for r in rows] == [("missing_range", offsets[gone], 1)]


@pytest.mark.parametrize("deleted", ["master", "both"])
@pytest.mark.parametrize("shift", ["lacks", "repeats"])
def test_a_shifted_slave_whose_head_file_retention_deleted_has_no_finding_at_the_range_start(
    spark: Any, tmp_path: Path, shift: str, deleted: str
) -> None:
    """The slave lacks message 5 (or stored it twice), so each of its files holds one message more (less)
    than the master's: at the start of file 1 it holds the message after (before) the master's first one.
    Retention deletes file 0 on the master (the slave deletes its own a moment later) or on both, so the
    common range starts at file 1. The master's first message is not missing from the slave (its copy is
    in the slave's file 0), and the slave's first one is not another master's data (the master's copy was
    in its deleted file 0): both lie outside what the two stores hold in common."""
    messages = [msg(i) for i in range(300)]
    write_store(tmp_path / "m", messages, file_size=FILE_SIZE)
    k = 5
    held = [m for i, m in enumerate(messages) if i != k] if shift == "lacks" else [*messages[: k + 1], *messages[k:]]
    write_store(tmp_path / "s", held, file_size=FILE_SIZE)
    for side in ("m",) if deleted == "master" else ("m", "s"):
        commitlog_files(tmp_path / side)[0].path.unlink()
    rows, result = run(spark, tmp_path / "m", tmp_path / "s")
    assert result.metrics["common_start"] == FILE_SIZE and result.metrics["chunks_different"] > 0
    assert [(r["category"], r["start_num"]) for r in rows] == []


def test_a_message_lost_at_the_start_of_the_range_is_missing_when_the_slave_still_holds_the_file_before(
    spark: Any, tmp_path: Path
) -> None:
    """The slave lacks the master's first message of file 1; the master deleted file 0, the slave not yet.
    The slave's file 0 is read for its copies, finds none: a missing_range, not a loss hidden by retention."""
    messages = [msg(i) for i in range(300)]
    offsets = write_store(tmp_path / "m", messages, file_size=FILE_SIZE)
    gone = offsets.index(FILE_SIZE)
    write_store(tmp_path / "s", [m for i, m in enumerate(messages) if i != gone], file_size=FILE_SIZE)
    commitlog_files(tmp_path / "m")[0].path.unlink()
    rows, _ = run(spark, tmp_path / "m", tmp_path / "s")
    assert [(r["category"], r["start_num"], r["count"]) for r in rows] == [("missing_range", FILE_SIZE, 1)]


def test_a_slave_behind_a_duplicate_is_lag_past_its_newest_record_whatever_the_master_clock_did(
    spark: Any, tmp_path: Path
) -> None:
    """The slave stored message 120 twice, so it holds each later message one record further than the
    master; it has received messages up to 199 of 300. The master's clock stepped back 1 s before it stored
    message 200 (an NTP step, a resumed VM): messages 200.. carry store times older than the slave's newest
    record, yet follow it in the master's log. The master record at the slave's end is lag, not missing.
    Message 250 puts message 150 again (a delayed message's second put keeps its UNIQ_KEY): the slave holds
    its first copy, which says nothing of the second one."""
    messages = [msg(i) if i < 200 else msg(i, t0=T_NEW - 1_000) for i in range(300)]
    messages[250] = messages[250].but(properties=messages[150].properties)
    write_store(tmp_path / "m", messages, file_size=FILE_SIZE)
    dup = 120
    s_offsets = write_store(tmp_path / "s", [*messages[: dup + 1], *messages[dup:200]], file_size=FILE_SIZE)
    assert messages[200].store_ts < messages[199].store_ts
    rows, _ = run(spark, tmp_path / "m", tmp_path / "s")
    assert [(r["category"], r["start_num"], r["count"]) for r in rows] == [("duplicate_range", s_offsets[dup + 1], 1)]


def test_a_message_lost_in_the_first_millisecond_of_a_log_that_lost_no_file_is_missing(
    spark: Any, tmp_path: Path
) -> None:
    """Messages 0-9 were stored in one millisecond (a busy broker stores many per millisecond) and the
    slave lacks message 5. Both logs start at offset 0, so nothing lies before the slave's first record:
    message 5 is missing, however old."""
    messages = [msg(i).but(store_ts=T_NEW) if i < 10 else msg(i) for i in range(300)]
    offsets = write_store(tmp_path / "m", messages, file_size=FILE_SIZE)
    gone = 5
    write_store(tmp_path / "s", [m for i, m in enumerate(messages) if i != gone], file_size=FILE_SIZE)
    rows, _ = run(spark, tmp_path / "m", tmp_path / "s")
    assert [(r["category"], r["start_num"], r["count"]) for r in rows] == [("missing_range", offsets[gone], 1)]
