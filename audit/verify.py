"""Post-migration verification: a source and a target audited as one pair, with zero tolerance by
default, and a verification certificate of what was compared.

    inv = verification_inventory("<source URL>", "conn:new_cache", kind="<a verifiable kind>")
    ... the usual stages on inv.pairs[0] ...
    finish_verification(inv, run, strictness="zero_tolerance")   # summary, report, certificate.json/.html

The target is not a replica of the source, so replication is not checked (`check_replication:
false`) and the keyspace is compared in full (every db either side has keys in, unless `dbs` says
otherwise). Under `zero_tolerance` every gate threshold is 0, unreadable keys included.

The certificate (`certificate.json`, and `certificate.html` for people) holds the run id and times,
both endpoints (redacted) with their server versions, key counts per side and per db, the number of
keys compared, an order-independent content digest of each side's snapshot, the tool version, the
gate's verdict and its failed expectations. Its own verdict is `passed` only when the gate passed,
no key changed on the source while it was verified (a moving source cannot be certified), and, under
`zero_tolerance`, both digests are equal.

The content digest of each side is the kind's to state (a check's `certify`; for a keyspace see
audit/sources/redis/content.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from audit.errors import ConfigError, StageInputError
from audit.inventory import Inventory, Pair, parse_inventory, settings_keys
from audit.kernel.kind import kind_spec, registered_kinds
from audit.kernel.pair import gate_fields_of, suite_parameter
from audit.kernel.suite import suite_parameters
from audit.layout import RunDir, read_json_object, utc_now_text, write_json, write_text

STRICTNESS: dict[str, tuple[frozenset[str], str]] = {
    "zero_tolerance": (
        frozenset(),
        "every difference fails the verification, and both sides' content digests must be equal",
    ),
    "allow_ttl_drift": (frozenset({"ttl_mismatch"}), "keys whose expiry differs are reported but do not fail"),
    "allow_extra_on_target": (
        frozenset({"extra_on_replica", "extra_row", "extra_table"}),
        "keys (rows, tables) only on the target are reported but do not fail",
    ),
}
"""strictness -> (finding categories it does not gate, what it means); every other threshold of the
kind's suite is 0. A level is one entry here."""

DEFAULT_STRICTNESS = "zero_tolerance"
DEFAULT_NAME = "migration"
SIDE_NAMES = {"master": "source", "replica": "target"}
"""The pipeline's sides as a verification names them."""

CERTIFICATE_JSON = "certificate.json"
CERTIFICATE_HTML = "certificate.html"
CERTIFICATE_FORMAT = 1


def verifiable_kinds() -> list[str]:
    """Kinds whose two sides a post-migration verification can certify (KindSpec.verifiable)."""
    return [name for name, spec in registered_kinds().items() if spec.verifiable]


def verification_inventory(
    source: str | dict[str, Any],
    target: str | dict[str, Any],
    kind: str,
    strictness: str = DEFAULT_STRICTNESS,
    dbs: list[int] | None = None,
    *,
    tables: list[str] | None = None,
    name: str = DEFAULT_NAME,
    settings: dict[str, Any] | None = None,
    options: dict[str, Any] | None = None,
) -> Inventory:
    """A one-pair inventory: `source` as the master side, `target` as the replica side.

    `source` and `target` are URLs of the kind's servers or `conn:<airflow_conn_id>`; `dbs`
    None or empty means every db either side has keys in (kinds with dbs; Pika: db 0, as it lists none);
    `tables` likewise for kinds with tables (every base table outside the system schemas); `settings` are
    inventory settings (max_keys_per_s, recheck_rounds, ...); `options` other fields of the kind's pair
    (e.g. redis' `compare`, `keys`). A `source` or `target` starting with `{` is a YAML/JSON mapping: an
    endpoint of the kind's own form (e.g. ``{url: redis://h:7000, topology: cluster}``). Raises ConfigError
    naming the bad argument.
    """
    if kind not in verifiable_kinds():
        raise ConfigError(f"verification kind {kind!r}: expected one of {', '.join(verifiable_kinds())}")
    if strictness not in STRICTNESS:
        raise ConfigError(f"verification strictness {strictness!r}: expected one of {', '.join(STRICTNESS)}")
    for label, value in (("source", source), ("target", target)):
        if not isinstance(value, dict) and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(f"verification {label}: give a server URL or conn:<airflow_conn_id>")
    gate = _strict_gate(kind, strictness)
    pair: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "master": _endpoint(source, "source"),
        "replica": _endpoint(target, "target"),
        "check_replication": False,
        "gate": gate,
    }
    for key, value in (options or {}).items():
        if key in pair or key not in kind_spec(kind).pair_model.model_fields:
            raise ConfigError(f"verification option {key}: kind {kind} takes no such option (or it is fixed)")
        pair[key] = value
    takes = settings_keys(kind_spec(kind))
    for key in settings or {}:  # in `defaults:` a setting of another kind would be dropped, not applied
        if key not in takes:
            known = ", ".join(sorted(takes))
            raise ConfigError(f"verification setting {key}: kind {kind} takes no such setting (its settings: {known})")
    fields = kind_spec(kind).pair_model.model_fields
    selection: dict[str, list[Any]] = {"dbs": list(dbs or []), "tables": list(tables or [])}
    for field_name, chosen in selection.items():
        if chosen and field_name not in fields:
            raise ConfigError(f"verification {field_name}: kind {kind} does not take {field_name}")
        if chosen:
            pair[field_name] = chosen
    raw = {"defaults": dict(settings or {}), "pairs": [pair]}
    try:
        return parse_inventory(json.dumps(raw), source="verification")  # JSON is YAML
    except ConfigError as e:  # say it in the verification's own terms: source and target, not the pair's sides
        said = re.sub(r"pairs\[0\] \([^)]*\)\.master", "source", str(e))
        raise ConfigError(re.sub(r"pairs\[0\] \([^)]*\)\.replica", "target", said)) from None


def _strict_gate(kind: str, strictness: str) -> dict[str, int | None]:
    """Every threshold the kind's suite reads at 0, but those of the categories `strictness` lets pass."""
    loosened = _loosened(kind, strictness)
    if strictness != DEFAULT_STRICTNESS and not loosened:
        levels = [name for name in STRICTNESS if name == DEFAULT_STRICTNESS or _loosened(kind, name)]
        raise ConfigError(
            f"verification strictness {strictness!r}: kind {kind} reports no"
            f" {' or '.join(sorted(STRICTNESS[strictness][0]))} findings (its levels: {', '.join(levels)})"
        )
    return {k: None if suite_parameter(k) in loosened else 0 for k in verification_gate_keys(kind)}


def _loosened(kind: str, strictness: str) -> set[str]:
    """The suite parameters of the kind that `strictness` leaves ungated."""
    parameters = {suite_parameter(k) for k in verification_gate_keys(kind)}
    return parameters & {f"max_{c}" for c in STRICTNESS[strictness][0]}


def verification_gate_keys(kind: str) -> list[str]:
    """The `gate:` keys the kind's suite reads."""
    return gate_fields_of(suite_parameters(kind_spec(kind).suite))


def _endpoint(value: str | dict[str, Any], label: str) -> Any:
    """A URL as given, or an endpoint mapping (given as one, or written as YAML/JSON: `{...}`)."""
    if isinstance(value, dict):
        return value
    text = value.strip()
    if not text.startswith("{"):
        return text
    import yaml

    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError:
        loaded = None
    if not isinstance(loaded, dict):
        raise ConfigError(f"verification {label}: expected a URL or a mapping such as {{url: ..., topology: ...}}")
    return loaded


# --- the certificate ---------------------------------------------------------------------------------
def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise StageInputError(f"{path.parent}: no {path.name}; finish the run (`replica-audit report`) first")
    return read_json_object(path)


def _side(run: RunDir, inventory_pair: Pair, pair: dict[str, Any], side: str, given: str | None) -> dict[str, Any]:
    """What the certificate says of one side: the endpoint as given, the server, and what the kind's
    checks certify of its content."""
    server = (pair.get("servers") or {}).get(side) or {}
    out: dict[str, Any] = {
        "given": given,
        "endpoint": server.get("endpoint"),
        "version": server.get("version"),
        "role": server.get("role"),
    }
    state = run.load_state(inventory_pair.name)
    if state is not None:
        for check in kind_spec(inventory_pair.kind).checks(inventory_pair):
            if not state.skipped(check.name):
                out.update(check.certify(run, state, side))
    return out


def _compared(pair: dict[str, Any]) -> dict[str, Any]:
    """The pair's coverage in the certificate's words: source and target for master and replica."""
    renamed = {
        k.replace("master_", "source_", 1).replace("replica_", "target_", 1): v
        for k, v in (pair.get("coverage") or {}).items()
    }
    return {
        "dbs": pair.get("dbs"),
        **renamed,
        "not_covered": [in_verification_terms(w, pair.get("pair")) for w in pair.get("not_covered") or []],
        "skipped_checks": {k: in_verification_prose(v) for k, v in (pair.get("skipped_checks") or {}).items()},
    }


def in_verification_terms(message: str, pair_name: str | None = None) -> str:
    """A message of the audit's, with the side it starts with named as a verification names it.

    Sources say which side failed first (`migration master 10.0.0.5:6379 unreachable: ...`, `master
    10.0.0.5:3306: cannot reach ...`). Only that leading side is renamed: a server's own words after it
    (`... a read only replica`) are quoted as they were.
    """
    name = rf"(?:pair )?{re.escape(pair_name)} " if pair_name else ""
    leading = re.match(rf"^((?:{name})?)(master|replica)\b", message)
    if leading is None:
        return message
    return leading[1] + SIDE_NAMES[leading[2]] + message[leading.end() :]


_SIDE_WORD = re.compile(r"\b(master|replica|Master|Replica)\b")
_NO_REPLICATION = "check_replication: false"


def in_verification_prose(text: str) -> str:
    """The audit's own prose (a gate expectation's meaning, a skipped check's reason) as a verification
    says it: every master is the source, every replica the target.

    Only for words the auditor wrote: what a server or a file said goes through
    :func:`in_verification_terms`, which renames the leading side only.
    """
    if text == _NO_REPLICATION:
        return "a verification compares content only (the target is not a replica of the source)"
    return _SIDE_WORD.sub(lambda m: _VERIFICATION_WORD[m[1]], text)


_VERIFICATION_WORD = {"master": "source", "replica": "target", "Master": "Source", "Replica": "Target"}


def certificate_verdict(pair: dict[str, Any], sides: dict[str, Any], strictness: str | None) -> tuple[str, list[str]]:
    """The certificate's verdict and the reasons it is not `passed` (module docstring)."""
    status = pair.get("status", "incomplete")
    reasons = []
    if status == "failed":
        failed = ", ".join(
            f"{f['column']}={f['observed']} (max {f['threshold']})" for f in (pair.get("gate") or {}).get("failed", [])
        )
        reasons.append(f"gate failed: {failed}")
    elif status != "passed":
        why = pair.get("not_covered") or ["the audit did not finish"]
        reasons.append(
            f"not verified ({status}): " + "; ".join(in_verification_terms(w, pair.get("pair")) for w in why)
        )
    in_flight = int((pair.get("metrics") or {}).get("recheck_in_flight") or 0)
    if in_flight:
        reasons.append(
            f"{in_flight} keys changed on the source while they were verified: the source was not "
            "quiescent, so its content cannot be certified"
        )
    digests = [((sides.get(s) or {}).get("content") or {}).get("digest") for s in ("source", "target")]
    if strictness == "zero_tolerance" and status == "passed" and (None in digests or digests[0] != digests[1]):
        reasons.append(
            "the content digests of source and target differ (keys that differed when snapshotted "
            "agreed only when re-read)"
            if None not in digests
            else "no content digest for a side"
        )
    if status in ("error", "incomplete"):
        return status, reasons
    return ("passed" if not reasons else "failed"), reasons


def write_certificate(
    run: RunDir, inventory_pair: Pair, *, strictness: str | None = None, thresholds: dict[str, Any] | None = None
) -> Path:
    """Write certificate.json and certificate.html for a finished one-pair run; returns the JSON's path."""
    from audit.report.html import environment

    root = run.root
    manifest = _read_json(root / "manifest.json")
    summary = _read_json(root / "summary.json")
    if len(summary.get("pairs", [])) != 1:
        raise ConfigError(
            f"{root}: a verification certificate covers one pair; this run has {len(summary.get('pairs', []))}"
        )
    pair = summary["pairs"][0]
    given = (manifest.get("pairs") or {}).get(pair["pair"]) or {}  # as the inventory named it, redacted
    sides = {SIDE_NAMES[s]: _side(run, inventory_pair, pair, s, given.get(s)) for s in ("master", "replica")}
    verdict, reasons = certificate_verdict(pair, sides, strictness)
    digests = [(sides[s].get("content") or {}).get("digest") for s in ("source", "target")]
    gate = pair.get("gate") or {}
    failed = gate.get("failed", [])
    cert = {
        "certificate": "replica-audit post-migration verification",
        "format": CERTIFICATE_FORMAT,
        "run_id": summary["run_id"],
        "issued_at": utc_now_text(),
        "started_at": manifest.get("started_at"),
        "ended_at": manifest.get("ended_at"),
        "tool_version": manifest.get("tool_version"),
        "inventory_digest": manifest.get("inventory_digest"),
        "pair": pair["pair"],
        "kind": pair.get("kind"),
        "strictness": strictness,
        "strictness_meaning": STRICTNESS[strictness][1] if strictness in STRICTNESS else None,
        "thresholds": thresholds,
        "verdict": verdict,
        "reasons": reasons,
        "source": sides["source"],
        "target": sides["target"],
        "compared": _compared(pair),
        "digests_equal": None not in digests and digests[0] == digests[1],
        "findings": pair.get("counts") or {},
        "gate": {
            "status": pair.get("status"),
            "success": gate.get("success"),
            "evaluated": gate.get("evaluated"),
            "failed": [{**f, "meaning": in_verification_prose(str(f.get("meaning") or ""))} for f in failed],
            "results": gate.get("results_path"),
            "data_docs": gate.get("data_docs"),
        },
        "error": pair.get("error"),
        "report": "report.html",
    }
    path = root / CERTIFICATE_JSON
    write_json(path, cert)
    write_text(root / CERTIFICATE_HTML, environment().get_template("certificate.html.j2").render(c=cert))
    return path


def finish_verification(
    inventory: Inventory, run: RunDir, *, strictness: str | None, history: str | None = None
) -> dict[str, Any]:
    """summary.json, report.html and the history entry (:func:`audit.pipeline.finish_run`), then the
    certificate; returns the certificate, with the history's outcome under `history` (not in the file), which
    the caller says when the store could not be written, as for a run."""
    from audit.pipeline import finishing_run

    if len(inventory.pairs) != 1:
        raise ConfigError("a verification inventory holds exactly one pair")
    pair = inventory.pairs[0]
    # the run is finished only once its certificate is written: until then no prune may trim the snapshots
    # the certificate's digests read
    with finishing_run(inventory, run, list(inventory.pairs), history) as summary:
        path = write_certificate(
            run,
            pair,
            strictness=strictness,
            thresholds=pair.gate.model_dump(include=set(verification_gate_keys(pair.kind))),
        )
    cert: dict[str, Any] = json.loads(path.read_text())
    return {**cert, "history": summary["history"]}
