"""The GX suite of kind mysql (audit/expectations/mysql.json), validated by real GX on the local Spark session."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from audit.findings import SEVERITY_BY_CATEGORY
from audit.gate.gx import validate_gate

SUITE = Path(__file__).resolve().parents[2] / "audit" / "expectations" / "mysql.json"
COLUMNS = [e["kwargs"]["column"] for e in json.loads(SUITE.read_text())["expectations"]]


def test_suite_covers_every_mysql_category() -> None:
    from great_expectations import ExpectationSuite

    suite = ExpectationSuite(**json.loads(SUITE.read_text()))
    assert set(suite.suite_parameter_options) == {f"max_{c}" for c in COLUMNS}
    categories = {"missing_row", "extra_row", "row_mismatch", "missing_table", "extra_table", "schema_mismatch"}
    categories |= {"link_down", "lagging", "missing_gtid", "errant_gtid", "wrong_master"}
    assert categories <= set(COLUMNS) and categories <= set(SEVERITY_BY_CATEGORY)


def test_a_row_mismatch_fails_the_gate_naming_the_column(spark: Any, tmp_path: Path) -> None:
    row: dict[str, int | float | None] = {c: 0 for c in COLUMNS}
    params: dict[str, int | float | None] = {f"max_{c}": 0 for c in COLUMNS}
    params.update(max_lagging=None, max_lag_seconds=30)
    row.update(row_mismatch=2, lagging=1)  # lagging is not gated (null threshold)
    result = validate_gate(row, SUITE, params, tmp_path / "bad", "shop-db")
    assert not result.success
    assert [(f.column, f.observed, f.threshold) for f in result.failed] == [("row_mismatch", 2, 0)]


def test_rows_in_flight_are_gated_by_max_in_flight_when_set(spark: Any, tmp_path: Path) -> None:
    # the gate's row always carries in_flight; a suite without it ignored a pair's max_in_flight
    row: dict[str, int | float | None] = {c: 0 for c in COLUMNS}
    row["in_flight"] = 3
    params: dict[str, int | float | None] = {f"max_{c}": 0 for c in COLUMNS}
    params.update(max_lagging=None, max_lag_seconds=30, max_in_flight=2)
    result = validate_gate(row, SUITE, params, tmp_path / "set", "shop-db")
    assert [(f.column, f.observed, f.threshold) for f in result.failed] == [("in_flight", 3, 2)]
    params["max_in_flight"] = None  # not gated unless set
    assert validate_gate(row, SUITE, params, tmp_path / "unset", "shop-db").success
