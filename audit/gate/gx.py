"""Run the gate: one pair's row of numbers, validated by Great Expectations 1.x on Spark.

The suite file is GX 1.x suite JSON (`ExpectationSuite(**json)` loads it) whose thresholds are suite
parameters (`{"$PARAMETER": "max_missing_on_replica"}`). A parameter passed as None means "not gated":
the expectations that use it are left out of the suite that runs. Each call validates through a file
Data Context at `gate_dir/gx/`, writes the result to `gate_dir/validation_<name>.json` and updates the
Data Docs site at `gate_dir/data_docs/`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from audit.errors import GateError

_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_SITE = "gate"
_PARAM = "$PARAMETER"
# GX keeps a process-wide "current context"; one validation at a time keeps each call on its own.
_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class FailedExpectation:
    expectation: str
    column: str
    observed: float | int | None
    threshold: float | int | None
    meaning: str


@dataclass(frozen=True, slots=True)
class GateResult:
    success: bool
    evaluated: int
    failed: tuple[FailedExpectation, ...]
    results_path: str
    data_docs_index: str | None


def _import_gx_quietly() -> None:
    """Import GX with analytics off and its INFO chatter ("Skipping registering function ...") muted."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    import great_expectations  # noqa: F401

    # A few GX modules set their own level (INFO) at import, which would bypass the parent's.
    for logger_name in list(logging.root.manager.loggerDict):
        if logger_name.startswith("great_expectations."):
            logger = logging.getLogger(logger_name)
            if logging.NOTSET < logger.level < logging.WARNING:
                logger.setLevel(logging.WARNING)


def _param(value: Any) -> str | None:
    """The parameter name when `value` is `{"$PARAMETER": name}`, else None."""
    return str(value[_PARAM]) if isinstance(value, dict) and _PARAM in value else None


def _raised(info: Any) -> str | None:
    """The error an expectation raised, else None; GX keys metric errors by metric id instead of the flat form."""
    if not info:
        return None
    if isinstance(info, dict) and "raised_exception" in info:
        return str(info.get("exception_message")) if info["raised_exception"] else None
    return str(info)[:1000]


def _load_suite(suite_file: Path) -> dict[str, Any]:
    try:
        spec = json.loads(Path(suite_file).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise GateError(f"cannot read expectation suite {suite_file}: {e}") from e
    if not isinstance(spec, dict) or not isinstance(spec.get("expectations"), list):
        raise GateError(f"{suite_file} is not a GX suite (an object with an 'expectations' list)")
    return spec


def _select(
    spec: dict[str, Any],
    gate_row: dict[str, int | float | None],
    parameters: dict[str, int | float | None],
    where: Path,
) -> list[dict[str, Any]]:
    """The suite's expectations that are gated; GateError for a missing column or parameter."""
    active = []
    for exp in spec["expectations"]:
        kwargs = exp.get("kwargs", {})
        column = kwargs.get("column")
        if column is not None and column not in gate_row:
            raise GateError(f"suite {where} checks column {column!r}, which the gate row lacks")
        names = [p for p in map(_param, kwargs.values()) if p is not None]
        missing = [p for p in names if p not in parameters]
        if missing:
            raise GateError(f"suite {where} needs parameter {missing[0]!r}, which was not given")
        if all(parameters[p] is not None for p in names):
            active.append({k: v for k, v in exp.items() if k != "id"})
    return active


def _frame(gate_row: dict[str, int | float | None]) -> Any:
    from pyspark.sql.types import DoubleType, LongType, StructField, StructType

    from audit.diff.spark import get_spark

    fields, values = [], []
    for column, value in gate_row.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise GateError(f"gate row column {column!r} is not a number: {value!r}")
        double = column.startswith("lag_") or isinstance(value, float)
        fields.append(StructField(column, DoubleType() if double else LongType(), nullable=True))
        values.append(None if value is None else float(value) if double else int(value))
    return get_spark().createDataFrame([tuple(values)], StructType(fields))


def _context(gate_dir: Path) -> Any:
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="file", project_root_dir=gate_dir)
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    site = {
        "class_name": "SiteBuilder",
        "show_how_to_buttons": False,
        "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(gate_dir / "data_docs")},
        "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
    }
    sites = context.list_data_docs_sites()
    if _SITE not in sites:
        context.add_data_docs_site(_SITE, site)  # type: ignore[arg-type]
    elif sites[_SITE] != site:
        context.update_data_docs_site(_SITE, site)  # type: ignore[arg-type]
    if "local_site" in context.list_data_docs_sites():  # the default site: one place for the docs is enough
        context.delete_data_docs_site("local_site")
    return context


def _validate(
    gate_dir: Path, name: str, spec: dict[str, Any], active: list[dict[str, Any]], df: Any, params: dict[str, Any]
) -> tuple[Any, str | None]:
    """Run the suite; return the GX validation result and the Data Docs index (None if rendering failed)."""
    import great_expectations as gx
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )

    context = _context(gate_dir)
    source = context.data_sources.add_or_update_spark(name=f"gate-{name}")
    if "row" in source.get_asset_names():
        source.delete_asset("row")
    batch = source.add_dataframe_asset(name="row").add_batch_definition_whole_dataframe("whole")
    suite_name = f"{spec.get('name') or 'gate'}-{name}"
    built = gx.ExpectationSuite(name=suite_name, expectations=active, notes=spec.get("notes"))
    if len(built.expectations) != len(active):  # GX logs and drops an expectation it cannot parse
        raise GateError(f"GX could not parse every expectation of suite {suite_name}")
    suite = context.suites.add_or_update(built)
    vd = context.validation_definitions.add_or_update(
        gx.ValidationDefinition(name=f"gate-{name}", data=batch, suite=suite)
    )
    run_id = RunIdentifier(run_name=name)
    result = vd.run(batch_parameters={"dataframe": df}, expectation_parameters=params, run_id=run_id)
    suite_id = ExpectationSuiteIdentifier(name=suite_name)
    result_id = ValidationResultIdentifier(suite_id, run_id, result.batch_id)
    try:
        context.build_data_docs(site_names=[_SITE], resource_identifiers=[result_id, suite_id])
    except Exception:
        logging.getLogger(__name__).warning("Data Docs for %s could not be rendered", name, exc_info=True)
        return result, None
    index = gate_dir / "data_docs" / "index.html"
    return result, str(index) if index.is_file() else None


def validate_gate(
    gate_row: dict[str, int | float | None],
    suite_file: Path,
    parameters: dict[str, int | float | None],
    gate_dir: Path,
    name: str,
) -> GateResult:
    """Validate one pair's gate row against `suite_file` with `parameters`; GateError if the gate cannot run."""
    if not _NAME.fullmatch(name):
        raise GateError(f"gate name {name!r} must match [A-Za-z0-9_.-]+")
    spec = _load_suite(suite_file)
    active = _select(spec, gate_row, parameters, suite_file)
    gate_dir = Path(gate_dir).resolve()
    gate_dir.mkdir(parents=True, exist_ok=True)
    params = {k: v for k, v in parameters.items() if v is not None}
    with _lock:
        try:
            df = _frame(gate_row)
            _import_gx_quietly()
            result, docs = _validate(gate_dir, name, spec, active, df, params)
        except GateError:
            raise
        except Exception as e:
            raise GateError(f"gate {name} could not run: {type(e).__name__}: {e}") from e

    by_key = {(exp["type"], exp.get("kwargs", {}).get("column")): exp for exp in active}
    failed = []
    for r in result.results:
        config = r.expectation_config
        column = config.kwargs.get("column")
        if error := _raised(r.exception_info):
            raise GateError(f"gate {name}: {config.type} on {column} could not be evaluated: {error}")
        if r.success:
            continue
        exp = by_key.get((config.type, column), {})
        max_value = exp.get("kwargs", {}).get("max_value")
        threshold = parameters.get(p) if (p := _param(max_value)) else max_value
        meaning = (exp.get("meta") or {}).get("notes") or exp.get("description") or exp.get("notes") or ""
        failed.append(FailedExpectation(config.type, str(column), gate_row.get(column), threshold, str(meaning)))

    results_path = gate_dir / f"validation_{name}.json"
    results_path.write_text(json.dumps(result.to_json_dict(), indent=2) + "\n", encoding="utf-8")
    return GateResult(
        success=bool(result.success),
        evaluated=int(result.statistics["evaluated_expectations"]),
        failed=tuple(failed),
        results_path=str(results_path),
        data_docs_index=docs,
    )
