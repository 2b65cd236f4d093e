"""The GX gate, end to end: real Great Expectations 1.x, a file Data Context under OUT/gx, pandas (no Spark)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from audit.errors import ConfigError, GateError
from audit.gate.gx import GateResult, run_name, validate_gate
from audit.layout import write_json

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "audit" / "expectations" / "redis.json"
COLUMNS = [e["kwargs"]["column"] for e in json.loads(SUITE.read_text())["expectations"]]


def _row(**values: int | float | None) -> dict[str, int | float | None]:
    row: dict[str, int | float | None] = {c: 0.0 if c.startswith("lag_") else 0 for c in COLUMNS}
    row.update(values)
    return row


def _params(**values: int | float | None) -> dict[str, int | float | None]:
    params: dict[str, int | float | None] = {f"max_{c}": 0 for c in COLUMNS}
    params.update(values)
    return params


def _run(
    out: Path, row: dict[str, Any], params: dict[str, Any], name: str = "pair-1", run: str = "run-1"
) -> GateResult:
    """As the pipeline calls it: the run's gate directory is OUT/<run>/gate."""
    return validate_gate(row, SUITE, params, out / run / "gate", name)


def test_suite_file_loads_as_a_gx_suite() -> None:
    from great_expectations import ExpectationSuite

    suite = ExpectationSuite(**json.loads(SUITE.read_text()))
    assert len(suite.expectations) == len(COLUMNS) == 17
    assert set(suite.suite_parameter_options) == {f"max_{c}" for c in COLUMNS}
    assert all(e.meta and e.meta.get("notes") for e in suite.expectations)


def test_clean_row_passes_in_the_shared_context(tmp_path: Path) -> None:
    result = _run(tmp_path, _row(lag_seconds=None), _params())
    assert result.success and result.failed == () and result.ungated == ()
    assert result.evaluated == len(COLUMNS)
    gate = tmp_path / "run-1" / "gate"
    assert Path(result.results_path) == gate / "validation_pair-1.json"
    assert json.loads(Path(result.results_path).read_text())["statistics"]["evaluated_expectations"] == len(COLUMNS)
    # one context for the output directory, with the suite, a checkpoint per suite and the Data Docs
    gx = tmp_path / "gx"
    assert (gx / "great_expectations.yml").is_file() and not (gate / "gx").exists()
    assert (gx / "expectations" / "redis_audit.json").is_file()
    checkpoint = json.loads((gx / "checkpoints" / "redis_audit.json").read_text())
    assert [a["type"] for a in checkpoint["actions"]] == ["update_data_docs"]
    # the run reaches the shared site through a relative link, which the report's links go through
    assert (gate / "data_docs").is_symlink() and os.readlink(gate / "data_docs") == "../../gx/data_docs"
    assert result.data_docs_index == str(gate / "data_docs" / "index.html")
    assert result.validation_page is not None and Path(result.validation_page).is_file()
    assert f"/validations/redis_audit/{run_name('run-1', 'pair-1')}/" in result.validation_page
    assert run_name("run-1", "pair-1") in Path(result.data_docs_index).read_text()


def test_missing_key_fails_naming_column_observed_and_threshold(tmp_path: Path) -> None:
    result = _run(tmp_path, _row(missing_on_replica=1), _params(max_missing_on_replica=0))
    assert not result.success
    assert result.evaluated == len(COLUMNS)
    [failed] = result.failed
    assert failed.expectation == "expect_column_values_to_be_between"
    assert (failed.column, failed.observed, failed.threshold) == ("missing_on_replica", 1, 0)
    assert "missing" in failed.meaning
    assert json.loads(Path(result.results_path).read_text())["success"] is False


def test_none_parameter_is_not_gated(tmp_path: Path) -> None:
    result = _run(tmp_path, _row(value_mismatch=5, lag_seconds=None), _params(max_value_mismatch=None))
    assert result.success and result.failed == ()
    assert result.ungated == ("value_mismatch",)
    assert result.evaluated == len(COLUMNS)  # evaluated, with an open bound
    saved = json.loads(Path(result.results_path).read_text())
    [entry] = [r for r in saved["results"] if r["expectation_config"]["kwargs"]["column"] == "value_mismatch"]
    assert entry["success"] is True and entry["expectation_config"]["kwargs"].get("max_value") is None


def test_runs_and_pairs_accumulate_in_one_data_docs_index(tmp_path: Path) -> None:
    first = _run(tmp_path, _row(), _params(), name="pair.a", run="run-1")
    second = _run(tmp_path, _row(lag_bytes=10.0), _params(max_lag_bytes=5), name="pair.a", run="run-2")
    other = _run(tmp_path, _row(), _params(max_ttl_mismatch=None), name="pair_b", run="run-2")
    assert first.success and not second.success and other.success
    assert [f.column for f in second.failed] == ["lag_bytes"]
    assert second.failed[0].observed == 10.0 and second.failed[0].threshold == 5
    assert first.results_path != second.results_path != other.results_path
    index = (tmp_path / "gx" / "data_docs" / "index.html").read_text()
    for run, pair in (("run-1", "pair.a"), ("run-2", "pair.a"), ("run-2", "pair_b")):
        assert run_name(run, pair) in index
    pages = {Path(r.validation_page or "").resolve() for r in (first, second, other)}
    assert len(pages) == 3 and all(p.is_file() for p in pages)
    assert len(list((tmp_path / "gx" / "uncommitted" / "validations" / "redis_audit").iterdir())) == 3
    assert [p.name for p in tmp_path.iterdir() if (p / "gate").is_dir()] != []
    assert sum(1 for _ in tmp_path.rglob("great_expectations.yml")) == 1


PARALLEL = """
import json, sys
from pathlib import Path
from audit.gate.gx import validate_gate
row, params, out, name = json.loads(sys.argv[1])
r = validate_gate(row, Path(sys.argv[2]), params, Path(out) / "run-p" / "gate", name)
print(json.dumps([r.success, r.validation_page]))
"""


def test_parallel_processes_share_the_context(tmp_path: Path) -> None:
    """Two processes (as two mapped Airflow tasks) validate at once into a context neither has created yet."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PARALLEL, json.dumps([_row(), _params(), str(tmp_path), name]), str(SUITE)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for name in ("left", "right")
    ]
    outcomes = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outcomes]
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outcomes]
    assert all(ok and Path(page).is_file() for ok, page in results)
    index = (tmp_path / "gx" / "data_docs" / "index.html").read_text()
    assert run_name("run-p", "left") in index and run_name("run-p", "right") in index


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


def test_missing_suite_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(GateError, match=r"nope\.json.*REPLICA_AUDIT_EXPECTATIONS"):
        validate_gate(_row(), tmp_path / "nope.json", _params(), tmp_path / "r" / "gate", "p")


def test_a_suite_of_the_operator_s_own_that_cannot_be_read_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # REPLICA_AUDIT_EXPECTATIONS naming a wrong directory ended the pair as "could not be audited", exit 3:
    # the README's code for a source that could not be read, not for a setting
    from audit.outcome import EXIT_USAGE, exit_code_of_error

    monkeypatch.setenv("REPLICA_AUDIT_EXPECTATIONS", str(tmp_path))
    with pytest.raises(ConfigError, match=r"nope\.json.*REPLICA_AUDIT_EXPECTATIONS") as e:
        validate_gate(_row(), tmp_path / "nope.json", _params(), tmp_path / "r" / "gate", "p")
    assert exit_code_of_error(e.value) == EXIT_USAGE


def test_bad_name_is_a_gate_error(tmp_path: Path) -> None:
    with pytest.raises(GateError, match="name"):
        _run(tmp_path, _row(), _params(), name="a/b")


def test_the_index_lists_the_latest_results_and_every_result_keeps_its_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GX reads every listed result at every gate: an unbounded index made each gate slower with history
    monkeypatch.setattr("audit.gate.gx.INDEX_VALIDATIONS", 2)
    results = [_run(tmp_path, _row(), _params(), run=f"run-{i}") for i in (1, 2, 3)]
    index = (tmp_path / "gx" / "data_docs" / "index.html").read_text()
    assert run_name("run-3", "pair-1") in index and run_name("run-2", "pair-1") in index
    assert run_name("run-1", "pair-1") not in index
    assert all(r.validation_page is not None and Path(r.validation_page).is_file() for r in results)


def test_a_gate_reuses_the_templates_an_earlier_gate_compiled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import jinja2

    compiled: list[str | None] = []
    compile_ = jinja2.Environment.compile

    def counting(self: jinja2.Environment, source: Any, name: str | None = None, *args: Any, **kwargs: Any) -> Any:
        compiled.append(name)
        return compile_(self, source, name, *args, **kwargs)

    monkeypatch.setattr(jinja2.Environment, "compile", counting)
    _run(tmp_path, _row(), _params(), run="run-1")
    first = len(compiled)
    assert first > 10  # GX builds new views, each with a new Environment, at every gate
    assert any((tmp_path / "gx" / ".jinja_cache").iterdir())
    compiled.clear()
    second = _run(tmp_path, _row(missing_on_replica=1), _params(), run="run-2")
    assert compiled == []
    assert second.validation_page is not None and "missing_on_replica" in Path(second.validation_page).read_text()


def test_an_unwritable_gx_context_is_the_operators_to_fix_not_a_source_error(tmp_path: Path) -> None:
    (tmp_path / "gx").write_text("not a directory")  # as a read-only OUT/gx would fail, for root too
    with pytest.raises(ConfigError, match=r"gate pair-1: cannot write the GX context in .*gx"):
        _run(tmp_path, _row(lag_seconds=None), _params())


def test_an_unwritable_output_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "run").write_text("not a directory")
    with pytest.raises(ConfigError, match=r"output .*run: cannot write summary.json"):
        write_json(tmp_path / "run" / "summary.json", {"a": 1})
