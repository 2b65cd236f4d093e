"""Operators: each `execute()` builds its inputs and makes one replica-audit library call.

Failures and retries: a source that could not be audited (unreachable, unreadable) raises
:class:`SourceUnavailable`, the one exception :data:`SOURCE_RETRY_POLICY` retries (with the task's
exponential backoff). A failed gate, a configuration mistake or anything else raises
AirflowFailException or fails at once: the data diverges or the setup is wrong, and a retry would
only repeat the verdict later.

An inventory is given as a path (`inventory="/etc/replica-audit/inventory.yaml"`) or, for a
post-migration verification, as the arguments of :func:`audit.verify.verification_inventory` (a dict).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, ExceptionRetryPolicy, RetryAction, RetryRule
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from replica_audit_provider.assets import PAIR_VERDICTS, pair_asset
from replica_audit_provider.hooks import airflow_conn_resolver

if TYPE_CHECKING:
    from audit import Inventory
    from audit.kernel.state import GateVerdict


class SourceUnavailable(AirflowException):
    """A source could not be audited (unreachable, unreadable): worth another try later."""


SOURCE_RETRY_POLICY = ExceptionRetryPolicy(
    rules=[
        RetryRule(
            exception=SourceUnavailable,
            action=RetryAction.RETRY,
            reason="a source could not be audited; retrying with backoff",
        )
    ],
    default=RetryAction.FAIL,
)
"""Retry source errors only; a gate verdict, a bad inventory or a bug fails the task at once."""

SOURCE_RETRY_ARGS: dict[str, Any] = {
    "retries": 2,
    "retry_delay": timedelta(seconds=30),
    # a multiplier in Airflow 3.3 (True would mean 1.0); Airflow spreads each delay, so 30-60 s, then 60-120 s
    "retry_exponential_backoff": 2.0,
    "max_retry_delay": timedelta(minutes=10),
    "retry_policy": SOURCE_RETRY_POLICY,
}
"""The DAGs' default_args: every task retries an unreachable source twice, with backoff, and nothing else."""

STAGES = ("snapshot", "diff", "recheck", "gate")
"""The stages an AuditStageOperator runs (audit.pipeline.STAGES; named here so a DAG file's typo fails
when it is parsed, without importing the pipeline there)."""

InventorySpec = str | dict[str, Any]
PairsSpec = list[str] | str | None
"""Pair names, or a template that renders to them (`"{{ params.pairs }}"` with native rendering)."""


def safe_run_id(airflow_run_id: str) -> str:
    """`manual__2026-11-21T10:00:00+00:00` -> a directory name without `:` or `+`."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", as_text(airflow_run_id, "run_id"))


def as_text(value: Any, field: str) -> str:
    """A rendered field that must be text. Native rendering reads `48213` as a number, which cannot be
    turned back into what was typed (`1e3` -> 1000.0): render it with
    `replica_audit_provider.dags.templates.text`, as the DAGs here do."""
    if isinstance(value, str):
        return value
    raise AirflowFailException(
        f"{field} rendered as {type(value).__name__} {value!r}: native rendering read it as a literal; "
        f"render it with replica_audit_provider.dags.templates.text(...)"
    )


def load(spec: InventorySpec) -> Inventory:
    """An inventory file, or a verification's one-pair inventory built from its arguments."""
    from audit import load_inventory
    from audit.verify import verification_inventory

    if isinstance(spec, dict):
        text_args = ("source", "target", "kind", "strictness", "name")
        args: dict[str, Any] = {
            k: as_text(v, k) if k in text_args and not isinstance(v, dict) else v for k, v in spec.items()
        }
        return verification_inventory(**args)
    return load_inventory(as_text(spec, "inventory"))


def history_url(value: str | None = None) -> str | None:
    """The results store: `value`, else $REPLICA_AUDIT_HISTORY; `conn:<id>` read from Airflow's connections."""
    from audit.history import ENV_VAR

    url = value or os.environ.get(ENV_VAR) or None
    if url and url.startswith("conn:"):
        return airflow_conn_resolver(url.removeprefix("conn:"))
    return url


def run_history_url(log: Any) -> str | None:
    """:func:`history_url` for a run's report: a store that cannot be named is said and left out, as one
    that cannot be written is (the verdict never depends on the history)."""
    from audit import AuditError
    from audit.history import ENV_VAR

    try:
        return history_url()
    except AuditError as e:
        log.warning("results history: not written: %s", e)
        # as given: the run's own attempt then fails the same way and says so in its manifest
        return os.environ.get(ENV_VAR) or None


def pair_names(value: PairsSpec) -> list[str] | None:
    """The rendered `pairs`: a list as it is, a string as comma-separated names; empty means every pair."""
    if isinstance(value, str):
        value = [name.strip() for name in value.split(",") if name.strip()]
    return list(value) if value else None


def _failed_checks(verdict: GateVerdict) -> str:
    return ", ".join(f"{f.column}={f.observed} (max {f.threshold})" for f in verdict.failed)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


class _AuditOperator(BaseOperator):
    """Masks the passwords of the URLs its rendered fields hold (a verification's source and target, a
    history store's URL) before Airflow stores the rendered fields and shows them in its UI."""

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        super().render_template_fields(context, jinja_env)
        from airflow.sdk.log import mask_secret

        from audit.urls import url_secrets

        for field in self.template_fields:
            for text in _strings(getattr(self, field, None)):
                for secret in url_secrets(text):
                    mask_secret(secret)


class PlanPairsOperator(_AuditOperator):
    """Returns the names of the inventory's pairs (all, or `pairs`), for dynamic task mapping."""

    template_fields: Sequence[str] = ("inventory", "pairs")

    def __init__(self, *, inventory: str, pairs: PairsSpec = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.inventory = inventory
        self.pairs = pairs

    def execute(self, context: Any) -> list[str]:
        from audit import AuditError

        try:
            return [p.name for p in load(self.inventory).select(pair_names(self.pairs))]
        except AuditError as e:
            raise AirflowFailException(str(e)) from None


def out_path(out_dir: str) -> Path:
    """The operator's `out_dir` as a local path: a URI (s3a://...) is refused with a ConfigError saying why."""
    from audit.storage import local_out_dir

    return local_out_dir(out_dir)


class AuditStageOperator(_AuditOperator):
    """One stage (snapshot, diff, recheck, gate) of one pair."""

    template_fields: Sequence[str] = ("inventory", "out_dir", "run_id", "pair")

    def __init__(
        self, *, stage: str, pair: str, inventory: InventorySpec, out_dir: str, run_id: str, **kwargs: Any
    ) -> None:
        if stage not in STAGES:
            raise ValueError(f"AuditStageOperator stage {stage!r}: expected one of {', '.join(STAGES)}")
        super().__init__(**kwargs)
        self.stage, self.pair, self.inventory, self.out_dir, self.run_id = stage, pair, inventory, out_dir, run_id

    def execute(self, context: Any) -> Any:
        from audit import AuditError, SourceError, run_stage, start_run

        try:
            inv = load(self.inventory)
            run = start_run(inv, out_path(self.out_dir), safe_run_id(self.run_id))
            pair = inv.pair(as_text(self.pair, "pair"))
            verdict = run_stage(self.stage, pair, run, resolver=airflow_conn_resolver)
        except SourceError as e:
            raise SourceUnavailable(f"{self.pair}: could not be audited: {e}") from None
        except AuditError as e:
            raise AirflowFailException(f"{self.pair}: {e}") from None
        if verdict is not None and not verdict.success:
            raise AirflowFailException(f"{self.pair}: gate failed: {_failed_checks(verdict)}")
        return verdict.model_dump() if verdict is not None else None


class PairVerdictOperator(_AuditOperator):
    """Publishes the pair's verdict in this run as an event of its asset `replica-audit://<pair>`.

    Runs whatever the stages did (trigger rule ALL_DONE in the DAG), so a failed or unaudited pair
    is published too; the run's failure comes from the gate and report tasks, not from here.
    """

    template_fields: Sequence[str] = ("pair", "out_dir", "run_id")

    def __init__(self, *, pair: str, out_dir: str, run_id: str, **kwargs: Any) -> None:
        kwargs.setdefault("outlets", [PAIR_VERDICTS])
        super().__init__(**kwargs)
        self.pair, self.out_dir, self.run_id = pair, out_dir, run_id

    def execute(self, context: Any) -> dict[str, Any]:
        from audit import AuditError
        from audit.layout import RunDir
        from audit.report.summary import pair_verdict

        try:
            run = RunDir(out_path(self.out_dir), safe_run_id(self.run_id))
        except AuditError as e:
            raise AirflowFailException(str(e)) from None
        pair = as_text(self.pair, "pair")
        # run_id names the run's directory under out_dir; airflow_run_id the DAG run it came from
        verdict = {**pair_verdict(run, pair), "airflow_run_id": context.get("run_id")}
        context["outlet_events"][PAIR_VERDICTS].add(pair_asset(pair), extra=verdict)
        self.log.info("%s: %s (%s divergences)", pair, verdict["status"], verdict["divergences"])
        return verdict


class AuditReportOperator(_AuditOperator):
    """summary.json and report.html for the run; fails when any pair failed its gate or was not audited."""

    template_fields: Sequence[str] = ("inventory", "out_dir", "run_id", "pairs")

    def __init__(self, *, inventory: str, out_dir: str, run_id: str, pairs: PairsSpec = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.inventory, self.out_dir, self.run_id, self.pairs = inventory, out_dir, run_id, pairs

    def execute(self, context: Any) -> dict[str, Any]:
        from audit import AuditError, finish_run, start_run

        try:
            inv = load(self.inventory)
            selected = inv.select(pair_names(self.pairs))
            run = start_run(inv, out_path(self.out_dir), safe_run_id(self.run_id))
            store_url = run_history_url(self.log)
        except AuditError as e:
            raise AirflowFailException(str(e)) from None
        summary = finish_run(inv, run, selected, store_url)
        history = summary.pop("history", None) or {}
        if history.get("status") == "error":
            self.log.warning("results history %s: not written: %s", history.get("store"), history.get("message"))
        verdicts = {p["pair"]: p["status"] for p in summary["pairs"]}
        self.log.info("run %s: %s %s; report %s", run.run_id, summary["verdict"], verdicts, run.report)
        if summary["exit_code"] != 0:
            raise AirflowFailException(f"audit {summary['verdict']}: {verdicts}; report: {run.report}")
        return {"verdict": summary["verdict"], "pairs": verdicts, "report": str(run.report)}


class VerificationCertificateOperator(_AuditOperator):
    """summary, report and the verification certificate; fails unless the certificate's verdict is `passed`."""

    template_fields: Sequence[str] = ("verification", "out_dir", "run_id")

    def __init__(self, *, verification: dict[str, Any], out_dir: str, run_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.verification, self.out_dir, self.run_id = verification, out_dir, run_id

    def execute(self, context: Any) -> dict[str, Any]:
        from audit import AuditError, start_run
        from audit.verify import finish_verification

        try:
            inv = load(self.verification)
            run = start_run(inv, out_path(self.out_dir), safe_run_id(self.run_id))
            store_url = run_history_url(self.log)
            cert = finish_verification(inv, run, strictness=self.verification.get("strictness"), history=store_url)
        except AuditError as e:
            raise AirflowFailException(str(e)) from None
        history = cert.pop("history", None) or {}
        if history.get("status") == "error":
            self.log.warning("results history %s: not written: %s", history.get("store"), history.get("message"))
        where = run.root / "certificate.json"
        self.log.info(
            "verification %s: %s, digests %s; certificate %s",
            run.run_id,
            cert["verdict"],
            "equal" if cert["digests_equal"] else "differ",
            where,
        )
        if cert["verdict"] != "passed":
            raise AirflowFailException(
                f"verification {cert['verdict']}: {'; '.join(cert['reasons'])}; certificate: {where}"
            )
        return {"verdict": cert["verdict"], "certificate": str(where), "digests_equal": cert["digests_equal"]}


class DailyReportOperator(_AuditOperator):
    """Renders `<out>/reports/daily-<date>.html` from the results history."""

    template_fields: Sequence[str] = ("out_dir", "history", "days", "as_of")

    def __init__(
        self, *, out_dir: str, history: str | None = None, days: int | str = 7, as_of: str | None = None, **kwargs: Any
    ) -> None:
        if not isinstance(days, int) and "{{" not in str(days) and not str(days).strip().isdigit():
            raise ValueError(f"DailyReportOperator days {days!r}: expected a whole number of days (or a template)")
        super().__init__(**kwargs)
        self.out_dir, self.history, self.days, self.as_of = out_dir, history, days, as_of

    def execute(self, context: Any) -> str:
        from audit import AuditError, SourceError
        from audit.report.daily import render_daily_report

        try:
            days = int(self.days)
        except (TypeError, ValueError):
            raise AirflowFailException(f"days rendered as {self.days!r}: expected a whole number of days") from None
        try:
            history = history_url(self.history or None)
            path = render_daily_report(out_path(self.out_dir), history, days, self.as_of or None)
        except SourceError as e:
            raise SourceUnavailable(f"history store: {e}") from None
        except AuditError as e:
            raise AirflowFailException(str(e)) from None
        self.log.info("daily report: %s", path)
        return str(path)


def _setting(value: Any, name: str, whole: bool = False) -> Any:
    """A rendered retention setting: None or empty for "not set", else a number (a whole one for `whole`)."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "null")):
        return None
    try:
        return int(value) if whole else float(value)
    except (TypeError, ValueError, OverflowError):
        raise AirflowFailException(f"{name} rendered as {value!r}: expected a number") from None


class PruneOperator(_AuditOperator):
    """Deletes old runs under `out_dir` by a retention policy (`replica-audit prune`, audit/retention.py):
    whole runs past `keep_days`, the snapshots and work files of runs past `keep_snapshot_days`, never the
    `keep_last` newest finished runs nor an unfinished one; `out_dir/verifications` (verification runs) alike.
    With neither age set it deletes nothing."""

    template_fields: Sequence[str] = ("out_dir", "keep_days", "keep_snapshot_days", "keep_last")

    def __init__(
        self,
        *,
        out_dir: str,
        keep_days: float | str | None = None,
        keep_snapshot_days: float | str | None = None,
        keep_last: int | str = 1,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.out_dir, self.keep_days, self.keep_snapshot_days, self.keep_last = (
            out_dir,
            keep_days,
            keep_snapshot_days,
            keep_last,
        )

    def execute(self, context: Any) -> dict[str, Any]:
        from audit import AuditError
        from audit.prune import NOTE, apply_prune, describe, describe_total, plan_prunes
        from audit.retention import Policy

        keep_days = _setting(self.keep_days, "keep_days")
        keep_snapshot_days = _setting(self.keep_snapshot_days, "keep_snapshot_days")
        keep_last = _setting(self.keep_last, "keep_last", whole=True)
        if keep_days is None and keep_snapshot_days is None:
            self.log.info("retention is off (no keep_days or keep_snapshot_days): nothing pruned")
            return {"deleted": [], "trimmed": [], "freed_bytes": 0}
        try:
            policy = Policy(keep_days=keep_days, keep_snapshot_days=keep_snapshot_days, keep_last=keep_last or 0)
            plans = plan_prunes(out_path(self.out_dir), policy)
        except AuditError as e:
            raise AirflowFailException(str(e)) from None
        done: dict[str, Any] = {"deleted": [], "trimmed": [], "freed_bytes": 0}
        failed = []
        for plan in plans:
            result = apply_prune(plan)
            for kind, sentence in describe(plan, result):  # what `replica-audit prune` prints
                (self.log.warning if kind == NOTE else self.log.info)("%s", sentence)
            for run_id, freed in result.freed.items():
                done["deleted" if run_id in plan.decision.delete else "trimmed"].append(plan.name(run_id))
                done["freed_bytes"] += freed
            failed += result.failed
        self.log.info("%s", describe_total(done["freed_bytes"], plans[0].out))
        if failed:
            raise AirflowFailException("could not delete: " + "; ".join(f"{path}: {why}" for path, why in failed))
        return done
