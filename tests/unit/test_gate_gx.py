"""The GX gate, end to end: real Great Expectations 1.x validating through the real local Spark session."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from audit.errors import GateError
from audit.gate.gx import GateResult, validate_gate

SUITE = Path(__file__).resolve().parents[2] / "expectations" / "redis.json"
COLUMNS = [e["kwargs"]["column"] for e in json.loads(SUITE.read_text())["expectations"]]


def _row(**values: int | float | None) -> dict[str, int | float | None]:
    row: dict[str, int | float | None] = {c: 0.0 if c.startswith("lag_") else 0 for c in COLUMNS}
    row.update(values)
    return row


def _params(**values: int | float | None) -> dict[str, int | float | None]:
    params: dict[str, int | float | None] = {f"max_{c}": 0 for c in COLUMNS}
    params.update(values)
    return params


def _run(tmp_path: Path, row: dict[str, Any], params: dict[str, Any], name: str = "pair-1") -> GateResult:
    return validate_gate(row, SUITE, params, tmp_path / "gate", name)


def test_suite_file_loads_as_a_gx_suite() -> None:
    from great_expectations import ExpectationSuite

    suite = ExpectationSuite(**json.loads(SUITE.read_text()))
    assert len(suite.expectations) == len(COLUMNS) == 13
    assert set(suite.suite_parameter_options) == {f"max_{c}" for c in COLUMNS}
    assert all(e.meta and e.meta.get("notes") for e in suite.expectations)


def test_clean_row_passes_and_writes_results_and_docs(spark: Any, tmp_path: Path) -> None:
    result = _run(tmp_path, _row(lag_seconds=None), _params())
    assert result.success
    assert result.evaluated == len(COLUMNS)
    assert result.failed == ()
    saved = json.loads(Path(result.results_path).read_text())
    assert Path(result.results_path) == tmp_path / "gate" / "validation_pair-1.json"
    assert saved["success"] is True
    assert saved["statistics"]["evaluated_expectations"] == len(COLUMNS)
    assert result.data_docs_index is not None
    index = Path(result.data_docs_index)
    assert index.is_file() and index.is_relative_to(tmp_path / "gate")
    assert "redis_audit-pair-1" in index.read_text()


def test_missing_key_fails_naming_column_observed_and_threshold(spark: Any, tmp_path: Path) -> None:
    result = _run(tmp_path, _row(missing_on_replica=1), _params(max_missing_on_replica=0))
    assert not result.success
    assert result.evaluated == len(COLUMNS)
    [failed] = result.failed
    assert failed.expectation == "expect_column_values_to_be_between"
    assert failed.column == "missing_on_replica"
    assert failed.observed == 1
    assert failed.threshold == 0
    assert "missing" in failed.meaning
    assert json.loads(Path(result.results_path).read_text())["success"] is False


def test_none_parameter_is_not_gated(spark: Any, tmp_path: Path) -> None:
    result = _run(tmp_path, _row(value_mismatch=5), _params(max_value_mismatch=None))
    assert result.success
    assert result.evaluated == len(COLUMNS) - 1
    assert result.failed == ()


def test_same_name_twice_and_several_pairs_share_a_gate_dir(spark: Any, tmp_path: Path) -> None:
    first = _run(tmp_path, _row(), _params(), name="pair.a")
    second = _run(tmp_path, _row(lag_bytes=10.0), _params(max_lag_bytes=5), name="pair.a")
    other = _run(tmp_path, _row(), _params(max_ttl_mismatch=None), name="pair_b")
    assert first.success and not second.success and other.success
    assert [f.column for f in second.failed] == ["lag_bytes"]
    assert second.failed[0].observed == 10.0 and second.failed[0].threshold == 5
    assert other.evaluated == len(COLUMNS) - 1
    assert first.results_path == second.results_path != other.results_path
    assert json.loads(Path(second.results_path).read_text())["success"] is False
    assert other.data_docs_index is not None
    docs = Path(other.data_docs_index).read_text()
    assert "redis_audit-pair.a" in docs and "redis_audit-pair_b" in docs


def test_missing_parameter_is_a_gate_error(tmp_path: Path) -> None:
    params = _params()
    del params["max_ttl_mismatch"]
    with pytest.raises(GateError, match="max_ttl_mismatch"):
        _run(tmp_path, _row(), params)


def test_missing_column_is_a_gate_error(tmp_path: Path) -> None:
    row = _row()
    del row["wrong_master"]
    with pytest.raises(GateError, match="wrong_master"):
        _run(tmp_path, row, _params())


def test_bad_name_is_a_gate_error(tmp_path: Path) -> None:
    with pytest.raises(GateError, match="name"):
        _run(tmp_path, _row(), _params(), name="a/b")
