"""Replays tests/fuzz_corpus/: inputs the property tests found failing, kept with what a scan must give.

Each `<name>.bin` is the bytes of one file; `<name>.json` says why it is there and the rows expected
(kind and offsets). The general invariants of tests/commitlog_gen.py and tests/binlog_gen.py hold for
every file, whatever the batch or chunk size. tests/fuzz_budget.py says how to add a found failure.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from audit.sources.pika.binlog import parse_file
from tests import binlog_gen, commitlog_gen
from tests.fuzz_budget import CORPUS


def _cases(reader: str) -> list[Any]:
    return [pytest.param(p, id=p.stem) for p in sorted((CORPUS / reader).glob("*.bin"))]


def _sidecar(path: Path) -> dict[str, Any]:
    side = path.with_suffix(".json")
    return json.loads(side.read_text()) if side.exists() else {}


@pytest.mark.parametrize("path", _cases("rocketmq"))
def test_rocketmq_corpus(path: Path) -> None:
    data, side = path.read_bytes(), _sidecar(path)
    start, last = side.get("file_start", 0), side.get("last_file", True)
    whole = commitlog_gen.scan_file(data, start, last, len(data) + 1)
    commitlog_gen.check_rows(whole, start, len(data))
    for batch_bytes in (1, 100, 4096):
        assert commitlog_gen.scan_file(data, start, last, batch_bytes) == whole, batch_bytes
    if "expect" in side:
        assert [[r["row_kind"], r["phys_offset"]] for r in whole] == side["expect"], side["why"]


@pytest.mark.parametrize("path", _cases("pika"))
def test_pika_corpus(path: Path, tmp_path: Path) -> None:
    data, side = path.read_bytes(), _sidecar(path)
    whole = binlog_gen.scan(data)
    binlog_gen.check_rows(whole, len(data))
    (tmp_path / "write2file0").write_bytes(data)
    for chunk in (64 << 10, 128 << 10):
        assert parse_file(tmp_path / "write2file0", db=0, filenum=0, chunk_size=chunk).to_pylist() == whole
    for r in whole:
        if r["row_kind"] == "record":
            assert r == binlog_gen.slow_row(data, r["start"])
    if "expect" in side:
        assert [[r["row_kind"], r["start"], r["end"]] for r in whole] == side["expect"], side["why"]


def test_the_corpus_is_small_and_described() -> None:
    files = [p for reader in ("rocketmq", "pika") for p in (CORPUS / reader).glob("*.bin")]
    assert len(files) >= 10 and sum(p.stat().st_size for p in files) < 512 << 10
    assert all("why" in _sidecar(p) for p in files)
