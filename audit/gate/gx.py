"""Run the gate: one pair's row of counts, validated by a Great Expectations 1.x Checkpoint on pandas.

One file Data Context per output directory, `OUT/gx/`, created on first use and shared by every run:

- a suite per kind, loaded from its file (`audit/expectations/<kind>.json`, GX 1.x suite JSON whose thresholds
  are suite parameters: `{"$PARAMETER": "max_missing_on_replica"}`), refreshed from the file each time;
- a pandas data source `replica-audit-gate` whose dataframe asset `gate-row` is the one-row frame;
- a ValidationDefinition and a Checkpoint per suite, the Checkpoint with an UpdateDataDocsAction;
- every run's validation results (`uncommitted/validations/<suite>/<run>@<pair>/...`) and one Data Docs
  site, `OUT/gx/data_docs/`, whose index lists the latest runs (`INDEX_VALIDATIONS`; every run keeps
  its page), rendered by GX's views with their compiled templates kept (audit/gate/docs_views.py).

The gate's input is one row, so it is validated with pandas: no Spark session, no JVM. (Spark stays
the engine where the data is large: the diffs.) A parameter passed as None is not gated: its bound
is left open (`max_value: null`), so the expectation is evaluated and passes for any count.

Each run keeps its own copy of the result, `OUT/<run>/gate/validation_<pair>.json`, and a relative
symlink `OUT/<run>/gate/data_docs -> ../../gx/data_docs`, so links from the run's pages into the
Data Docs work where the output directory is served or copied as a whole (docs/gx.md).

Several Airflow tasks may validate at once: a lock file (`OUT/gx/.lock`, flock) serialises the
context's creation, the suite refresh, the checkpoint run and the Data Docs update.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from audit import layout
from audit.background import Preload
from audit.errors import ConfigError, GateError
from audit.kernel.suite import parameter_name
from audit.layout import flock_within, write_text

_NAME = re.compile(r"[A-Za-z0-9_.-]+")
SITE = "replica_audit"
"""The Data Docs site of the shared context (`OUT/gx/data_docs/`)."""
DATASOURCE, ASSET, BATCH = "replica-audit-gate", "gate-row", "whole-frame"
INDEX_VALIDATIONS = 100
"""How many of the latest validation results the Data Docs index lists. GX reads each listed result's
file at every gate: unbounded, a year of daily runs made each gate seconds slower (docs/gx.md)."""
# GX keeps a process-wide "current context"; one validation at a time per process keeps calls apart.
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
    """The Data Docs index through the run's `gate/data_docs` link (None when the docs could not be built)."""
    validation_page: str | None = None
    """This validation's Data Docs page, through the same link."""
    ungated: tuple[str, ...] = ()
    """Columns whose threshold parameter was None: evaluated, never failing."""


def run_name(run_id: str, pair: str) -> str:
    """The GX run name of one pair's validation in one run: `<run_id>@<pair>` (a directory of the Data Docs)."""
    return f"{run_id}@{pair}"


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


PRELOAD = Preload("gx-warm-up", _import_gx_quietly)
"""GX's modules (seconds of loading), started by `run` while the snapshots and the diff run."""


def _raised(info: Any) -> str | None:
    """The error an expectation raised, else None; GX keys metric errors by metric id instead of the flat form."""
    if not info:
        return None
    if isinstance(info, dict) and "raised_exception" in info:
        return str(info.get("exception_message")) if info["raised_exception"] else None
    return str(info)[:1000]


def _load_suite(suite_file: Path) -> dict[str, Any]:
    # suites of the operator's own (REPLICA_AUDIT_EXPECTATIONS) are configuration: a mistake there is exit 2
    bad = ConfigError if os.environ.get("REPLICA_AUDIT_EXPECTATIONS") else GateError
    try:
        spec = json.loads(Path(suite_file).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        hint = " (REPLICA_AUDIT_EXPECTATIONS names the suites' directory)" if isinstance(e, OSError) else ""
        raise bad(f"cannot read expectation suite {suite_file}: {e}{hint}") from e
    if not isinstance(spec, dict) or not isinstance(spec.get("expectations"), list):
        raise bad(f"{suite_file} is not a GX suite (an object with an 'expectations' list)")
    if not _NAME.fullmatch(str(spec.get("name") or "")):
        raise bad(f"{suite_file}: the suite needs a `name` matching [A-Za-z0-9_.-]+")
    return spec


def _check(spec: dict[str, Any], gate_row: dict[str, Any], parameters: dict[str, Any], where: Path) -> list[str]:
    """GateError for a column the row lacks or a parameter not given; returns the ungated columns."""
    ungated = []
    for exp in spec["expectations"]:
        kwargs = exp.get("kwargs", {})
        column = kwargs.get("column")
        if column is not None and column not in gate_row:
            raise GateError(f"suite {where} checks column {column!r}, which the gate row lacks")
        names = [p for p in map(parameter_name, kwargs.values()) if p is not None]
        missing = [p for p in names if p not in parameters]
        if missing:
            raise GateError(f"suite {where} needs parameter {missing[0]!r}, which was not given")
        if any(parameters[p] is None for p in names):
            ungated.append(str(column))
    return ungated


def _frame(gate_row: dict[str, int | float | None]) -> Any:
    """The one-row pandas frame: counts as int64, lags (and any column holding None or a float) as float64."""
    import pandas as pd

    columns: dict[str, Any] = {}
    for column, value in gate_row.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise GateError(f"gate row column {column!r} is not a number: {value!r}")
        double = value is None or column.startswith("lag_") or isinstance(value, float)
        columns[column] = pd.Series([float("nan") if value is None else value], dtype="float64" if double else "int64")
    return pd.DataFrame(columns)


@contextmanager
def _locked(context_dir: Path) -> Iterator[None]:
    """This process's threads and other processes (parallel Airflow tasks) one at a time in the context."""
    context_dir.mkdir(parents=True, exist_ok=True)
    with _lock, open(context_dir / ".lock", "a+b") as lock_file:
        flock_within(lock_file, context_dir / ".lock", layout.GX_LOCK_WAIT_S, "a gate or a prune", GateError)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def _site() -> dict[str, Any]:
    """The Data Docs site: GX's builders with this project's cached views (audit/gate/docs_views.py), and
    an index of the latest INDEX_VALIDATIONS results (every result's own page stays)."""

    def view(name: str) -> dict[str, str]:
        return {"module_name": "audit.gate.docs_views", "class_name": name}

    return {
        "class_name": "SiteBuilder",
        "show_how_to_buttons": False,
        "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": "data_docs/"},
        "site_index_builder": {
            "class_name": "DefaultSiteIndexBuilder",
            "validation_results_limit": INDEX_VALIDATIONS,
            "view": view("CachedIndexPageView"),
        },
        "site_section_builders": {
            section: {"view": view("CachedPageView")} for section in ("expectations", "validations", "profiling")
        },
    }


def open_context(context_dir: Path) -> Any:
    """The file Data Context at `context_dir` (created when missing), with its one Data Docs site. Call under lock."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    from audit.gate import docs_views

    docs_views.use_cache_dir(context_dir / ".jinja_cache")
    context = gx.get_context(mode="file", project_root_dir=context_dir.parent)
    if Path(context.root_directory).resolve() != context_dir.resolve():  # GX puts the context in <root>/gx
        raise GateError(f"GX context directory {context_dir} must be named gx/")
    if context.variables.progress_bars != ProgressBarsConfig(globally=False, metric_calculations=False):
        context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
        context.variables.save()
    sites = context.list_data_docs_sites()
    if SITE not in sites:
        context.add_data_docs_site(SITE, _site())  # type: ignore[arg-type]
    elif sites[SITE] != _site():
        context.update_data_docs_site(SITE, _site())  # type: ignore[arg-type]
    if "local_site" in context.list_data_docs_sites():  # GX's default site: one place for the docs is enough
        context.delete_data_docs_site("local_site")
    return context


def checkpoint_for(context: Any, spec: dict[str, Any]) -> Any:
    """The suite's Checkpoint (suite refreshed from its file; validation definition on the gate-row asset)."""
    import great_expectations as gx
    from great_expectations.checkpoint.actions import UpdateDataDocsAction

    name = str(spec["name"])
    expectations = [{k: v for k, v in exp.items() if k != "id"} for exp in spec["expectations"]]
    built = gx.ExpectationSuite(name=name, expectations=expectations, notes=spec.get("notes"), meta=spec.get("meta"))
    if len(built.expectations) != len(expectations):  # GX logs and drops an expectation it cannot parse
        raise GateError(f"GX could not parse every expectation of suite {name}")
    suite = context.suites.add_or_update(built)
    source = context.data_sources.add_or_update_pandas(name=DATASOURCE)
    asset = source.get_asset(ASSET) if ASSET in source.get_asset_names() else source.add_dataframe_asset(name=ASSET)
    names = [b.name for b in asset.batch_definitions]
    batch = asset.get_batch_definition(BATCH) if BATCH in names else asset.add_batch_definition_whole_dataframe(BATCH)
    vd = context.validation_definitions.add_or_update(gx.ValidationDefinition(name=name, data=batch, suite=suite))
    checkpoint = gx.Checkpoint(
        name=name, validation_definitions=[vd], actions=[UpdateDataDocsAction(name="data_docs", site_names=[SITE])]
    )
    return context.checkpoints.add_or_update(checkpoint)


def _page(context: Any, result_id: Any) -> Path | None:
    """The file of a validation's Data Docs page (None when the site does not list it)."""
    for site in context.get_docs_sites_urls(resource_identifier=result_id, site_name=SITE):
        url = site.get("site_url")
        if url and url.startswith("file://"):
            path = Path(unquote(urlparse(url).path))
            return path if path.is_file() else None
    return None


def _link_docs(gate_dir: Path, context_dir: Path) -> Path:
    """`gate_dir/data_docs` -> the shared site, as a relative symlink (the run's pages link through it)."""
    link = gate_dir / "data_docs"
    target = Path(os.path.relpath(context_dir / "data_docs", gate_dir))
    if link.is_symlink() and Path(os.readlink(link)) == target:
        return link
    if link.is_symlink():
        link.unlink()
    if not link.exists():
        link.symlink_to(target, target_is_directory=True)
    return link


def validate_gate(
    gate_row: dict[str, int | float | None],
    suite_file: Path,
    parameters: dict[str, int | float | None],
    gate_dir: Path,
    name: str,
    *,
    context_dir: Path | None = None,
    run_id: str | None = None,
) -> GateResult:
    """Validate one pair's gate row against `suite_file` with `parameters`; GateError if the gate cannot run.

    `gate_dir` is the run's gate directory (`OUT/<run_id>/gate`); the context defaults to `OUT/gx` and
    the run id to the run directory's name.
    """
    if not _NAME.fullmatch(name):
        raise GateError(f"gate name {name!r} must match [A-Za-z0-9_.-]+")
    spec = _load_suite(suite_file)
    ungated = _check(spec, gate_row, parameters, suite_file)
    gate_dir = Path(gate_dir).resolve()
    context_dir = Path(context_dir).resolve() if context_dir else gate_dir.parent.parent / "gx"
    run = run_name(run_id or gate_dir.parent.name, name)
    gate_dir.mkdir(parents=True, exist_ok=True)
    frame = _frame(gate_row)
    params = dict(parameters)
    try:
        PRELOAD.wait()
        _import_gx_quietly()
        with _locked(context_dir):
            result, page, index = _run_checkpoint(context_dir, spec, frame, params, run)
    except GateError:
        raise
    except OSError as e:  # the output directory (OUT/gx) is not writable: the operator's to fix, not a source's
        raise ConfigError(f"gate {name}: cannot write the GX context in {context_dir}: {e.strerror or e}") from e
    except Exception as e:
        raise GateError(f"gate {name} could not run: {type(e).__name__}: {e}") from e
    failed = _failed(result, spec, gate_row, parameters, name)
    results_path = gate_dir / f"validation_{name}.json"
    write_text(results_path, json.dumps(result.to_json_dict(), indent=2) + "\n")
    link = _link_docs(gate_dir, context_dir) if index else None
    return GateResult(
        success=bool(result.success),
        evaluated=int(result.statistics["evaluated_expectations"]),
        failed=failed,
        results_path=str(results_path),
        data_docs_index=str(link / "index.html") if link else None,
        validation_page=str(link / page.relative_to(context_dir / "data_docs")) if link and page else None,
        ungated=tuple(ungated),
    )


def _run_checkpoint(
    context_dir: Path, spec: dict[str, Any], frame: Any, params: dict[str, Any], run: str
) -> tuple[Any, Path | None, Path | None]:
    """(validation result, its Data Docs page, the site index); the docs' absence is logged, not fatal."""
    from great_expectations.core.run_identifier import RunIdentifier

    context = open_context(context_dir)
    checkpoint = checkpoint_for(context, spec)
    run_id = RunIdentifier(run_name=run)
    kwargs = {"batch_parameters": {"dataframe": frame}, "expectation_parameters": params, "run_id": run_id}
    try:
        [(result_id, result)] = checkpoint.run(**kwargs).run_results.items()
    except Exception:
        # a failing action (Data Docs rendering) must not lose the verdict: validate without the actions
        logging.getLogger(__name__).warning("checkpoint %s failed; validating without Data Docs", run, exc_info=True)
        result = checkpoint.validation_definitions[0].run(**kwargs)
        return result, None, None
    index = context_dir / "data_docs" / "index.html"
    return result, _page(context, result_id), index if index.is_file() else None


def _failed(
    result: Any, spec: dict[str, Any], gate_row: dict[str, Any], parameters: dict[str, Any], name: str
) -> tuple[FailedExpectation, ...]:
    by_key = {(exp["type"], exp.get("kwargs", {}).get("column")): exp for exp in spec["expectations"]}
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
        threshold = parameters.get(p) if (p := parameter_name(max_value)) else max_value
        meaning = (exp.get("meta") or {}).get("notes") or exp.get("description") or exp.get("notes") or ""
        failed.append(FailedExpectation(config.type, str(column), gate_row.get(column), threshold, str(meaning)))
    return tuple(failed)
