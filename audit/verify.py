"""Post-migration verification: a source and a target audited as one pair, with zero tolerance by
default, and a verification certificate of what was compared.

    inv = verification_inventory("redis://old:6379", "conn:new_cache", kind="redis")
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

Content digest (:data:`DIGEST_ALGORITHM`): for every readable key of a snapshot, XXH3-128 of
`db (int32 LE) | key length (uint32 LE) | key | type | 0x00 | value digest | has-expiry byte`; the
digest is the sum of these modulo 2^128, so the order of SCAN does not matter and equal multisets give
equal digests. A key SCAN returned twice counts once (its later read, as the diff does). Expiry times
are compared by the diff with a tolerance (read skew) and are not part of the digest; whether a key
expires is.
"""

from __future__ import annotations

import json
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from audit.errors import ConfigError, StageInputError
from audit.inventory import Gate, Inventory, parse_inventory
from audit.layout import RunDir, write_json

STRICTNESS: dict[str, tuple[dict[str, int | None], str]] = {
    "zero_tolerance": ({}, "every difference fails the verification, and both sides' content digests must be equal"),
    "allow_ttl_drift": ({"max_ttl_mismatch": None}, "keys whose expiry differs are reported but do not fail"),
    "allow_extra_on_target": ({"max_extra": None}, "keys only on the target are reported but do not fail"),
}
"""strictness -> (gate thresholds that differ from 0, what it means). A level is one entry here."""

DEFAULT_STRICTNESS = "zero_tolerance"
VERIFIABLE_KINDS = ("redis", "pika")
"""Kinds whose sides are servers with a keyspace: what a migration moves."""
DEFAULT_NAME = "migration"
SIDE_NAMES = {"master": "source", "replica": "target"}
"""The pipeline's sides as a verification names them."""

CERTIFICATE_JSON = "certificate.json"
CERTIFICATE_HTML = "certificate.html"
CERTIFICATE_FORMAT = 1
DIGEST_ALGORITHM = "xxh3_128-sum"
_MASK = (1 << 128) - 1
_ROW_HEAD = struct.Struct("<iI")  # db, key length


def verification_inventory(
    source: str,
    target: str,
    kind: str = "redis",
    strictness: str = DEFAULT_STRICTNESS,
    dbs: list[int] | None = None,
    *,
    name: str = DEFAULT_NAME,
    settings: dict[str, Any] | None = None,
) -> Inventory:
    """A one-pair inventory: `source` as the master side, `target` as the replica side.

    `source` and `target` are URLs (`redis://user:pw@host:port`) or `conn:<airflow_conn_id>`; `dbs`
    None or empty means every db either side has keys in; `settings` are inventory settings (qps,
    recheck_rounds, ...). Raises ConfigError naming the bad argument.
    """
    if kind not in VERIFIABLE_KINDS:
        raise ConfigError(f"verification kind {kind!r}: expected one of {', '.join(VERIFIABLE_KINDS)}")
    if strictness not in STRICTNESS:
        raise ConfigError(f"verification strictness {strictness!r}: expected one of {', '.join(STRICTNESS)}")
    for label, value in (("source", source), ("target", target)):
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"verification {label}: give a URL (redis://host:port) or conn:<airflow_conn_id>")
    gate: dict[str, int | None] = {f: 0 for f in Gate.model_fields}
    gate.update(STRICTNESS[strictness][0])
    pair = {
        "name": name,
        "kind": kind,
        "master": source.strip(),
        "replica": target.strip(),
        "dbs": list(dbs) if dbs else None,
        "check_replication": False,
        "gate": gate,
    }
    raw = {"defaults": dict(settings or {}), "pairs": [pair]}
    return parse_inventory(json.dumps(raw), source="verification")  # JSON is YAML


# --- content digests ---------------------------------------------------------------------------------
@dataclass
class SideDigest:
    """What one side's snapshot held: readable keys per db, unreadable ones, and the content digest."""

    digest: str | None = None
    keys: int = 0
    keys_per_db: dict[str, int] = field(default_factory=dict)
    keys_unreadable: int = 0
    scan_duplicates: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "algorithm": DIGEST_ALGORITHM,
            "digest": self.digest,
            "keys": self.keys,
            "keys_per_db": self.keys_per_db,
            "keys_unreadable": self.keys_unreadable,
            "scan_duplicates": self.scan_duplicates,
        }


def _row_hash(db: int, key: bytes, type_: str | None, digest: str | None, expires: bool) -> int:
    import xxhash

    data = b"".join(
        (
            _ROW_HEAD.pack(db, len(key)),
            key,
            (type_ or "").encode(),
            b"\0",
            (digest or "").encode(),
            b"\1" if expires else b"\0",
        )
    )
    return int(xxhash.xxh3_128_intdigest(data))


_COLUMNS = ["db", "key", "type", "digest", "expire_at_ms", "status", "read_at_ms"]


def snapshot_digest(path: Path, dedupe: bool = True, batch_size: int = 50_000) -> SideDigest:
    """The content digest of a keyspace snapshot (`keys.parquet`), streamed batch by batch.

    With `dedupe` (needed when SCAN returned some key twice) one 8-byte key hash, one read time and
    the 16-byte row hash are kept per row until the end, instead of only running sums.
    """
    import numpy as np
    import pyarrow.dataset as ds
    import xxhash

    result = SideDigest()
    total = 0
    kept: list[tuple[Any, ...]] = []
    for batch in ds.dataset(path, format="parquet").to_batches(columns=_COLUMNS, batch_size=batch_size):
        cols = [batch.column(c).to_pylist() for c in _COLUMNS]
        hashes, key_ids, read_at, ok, db_of = [], [], [], [], []
        for db, key, type_, digest, expire_at, status, at in zip(*cols, strict=True):
            good = status == "ok"
            hashes.append(_row_hash(db, key, type_, digest, expire_at is not None) if good else 0)
            if dedupe:
                key_ids.append(xxhash.xxh3_64_intdigest(_ROW_HEAD.pack(db, len(key)) + key))
                read_at.append(at or 0)
                ok.append(good)
                db_of.append(db)
            elif good:
                total = (total + hashes[-1]) & _MASK
                result.keys += 1
                result.keys_per_db[str(db)] = result.keys_per_db.get(str(db), 0) + 1
            else:
                result.keys_unreadable += 1
        if dedupe:
            kept.append(
                (
                    np.array(key_ids, np.uint64),
                    np.array(read_at, np.int64),
                    np.array([h >> 64 for h in hashes], np.uint64),
                    np.array([h & ((1 << 64) - 1) for h in hashes], np.uint64),
                    np.array(ok, bool),
                    np.array(db_of, np.int64),
                )
            )
    if dedupe and kept:
        key_id, at, hi, lo, good, dbs = (np.concatenate(parts) for parts in zip(*kept, strict=True))
        order = np.lexsort((at, key_id))  # by key, then read time: the last row of each key is its later read
        last = np.ones(len(order), bool)
        last[:-1] = key_id[order][1:] != key_id[order][:-1]
        chosen = order[last]
        result.scan_duplicates = int(len(order) - len(chosen))
        ok_rows = chosen[good[chosen]]
        result.keys = len(ok_rows)
        result.keys_unreadable = int(len(chosen) - len(ok_rows))
        total = ((sum(int(v) for v in hi[ok_rows]) << 64) + sum(int(v) for v in lo[ok_rows])) & _MASK
        for db, n in zip(*np.unique(dbs[ok_rows], return_counts=True), strict=True):
            result.keys_per_db[str(int(db))] = int(n)
    result.digest = f"{total:032x}"
    return result


# --- the certificate ---------------------------------------------------------------------------------
def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise StageInputError(f"{path.parent}: no {path.name}; finish the run (`replica-audit report`) first")
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def _side(root: Path, pair: dict[str, Any], side: str, metrics: dict[str, Any], given: str | None) -> dict[str, Any]:
    from audit.sources.redis.snapshot import KEYS_FILE, META_FILE

    server = (pair.get("servers") or {}).get(side) or {}
    snap_dir = root / "snapshots" / pair["pair"] / side
    meta = json.loads((snap_dir / META_FILE).read_text()) if (snap_dir / META_FILE).is_file() else {}
    info_server = (meta.get("start") or {}).get("info_server") or {}
    info_keyspace = (meta.get("start") or {}).get("info_keyspace") or {}
    out: dict[str, Any] = {
        "given": given,
        "endpoint": server.get("endpoint"),
        "version": server.get("version") or info_server.get("pika_version") or info_server.get("redis_version"),
        "role": server.get("role"),
        "server_run_id": info_server.get("run_id"),
        "keys_reported_by_server": {
            db: int(v["keys"])
            for db, v in sorted(info_keyspace.items())
            if isinstance(v, dict) and str(v.get("keys", "")).isdigit()
        },
        "snapshot_started_at_ms": meta.get("started_at_ms"),
        "snapshot_ended_at_ms": meta.get("ended_at_ms"),
    }
    keys_file = snap_dir / KEYS_FILE
    if keys_file.exists():
        duplicates = metrics.get(f"{side}_scan_duplicates")
        out["content"] = snapshot_digest(keys_file, dedupe=duplicates is None or int(duplicates) > 0).as_dict()
    else:
        out["content"] = None
    return out


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
        reasons.append(f"not verified ({status}): " + "; ".join(why))
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
    run_dir: Path, *, strictness: str | None = None, thresholds: dict[str, Any] | None = None
) -> Path:
    """Write certificate.json and certificate.html for a finished one-pair run; returns the JSON's path."""
    from audit.report.html import environment

    root = Path(run_dir)
    manifest = _read_json(root / "manifest.json")
    summary = _read_json(root / "summary.json")
    if len(summary.get("pairs", [])) != 1:
        raise ConfigError(
            f"{root}: a verification certificate covers one pair; this run has {len(summary.get('pairs', []))}"
        )
    pair = summary["pairs"][0]
    metrics = pair.get("metrics") or {}
    given = (manifest.get("pairs") or {}).get(pair["pair"]) or {}  # as the inventory named it, redacted
    sides = {SIDE_NAMES[s]: _side(root, pair, s, metrics, given.get(s)) for s in ("master", "replica")}
    verdict, reasons = certificate_verdict(pair, sides, strictness)
    digests = [(sides[s].get("content") or {}).get("digest") for s in ("source", "target")]
    gate = pair.get("gate") or {}
    cert = {
        "certificate": "replica-audit post-migration verification",
        "format": CERTIFICATE_FORMAT,
        "run_id": summary["run_id"],
        "issued_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
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
        "compared": {
            "dbs": pair.get("dbs"),
            "keys_compared": metrics.get("keys_compared"),
            "source_keys": metrics.get("master_keys"),
            "target_keys": metrics.get("replica_keys"),
            "recheck_candidates": metrics.get("recheck_candidates"),
            "recheck_converged": metrics.get("recheck_converged"),
            "recheck_in_flight": metrics.get("recheck_in_flight"),
            "not_covered": pair.get("not_covered") or [],
            "skipped_checks": pair.get("skipped_checks") or {},
        },
        "digests_equal": None not in digests and digests[0] == digests[1],
        "findings": pair.get("counts") or {},
        "gate": {
            "status": pair.get("status"),
            "success": gate.get("success"),
            "evaluated": gate.get("evaluated"),
            "failed": gate.get("failed", []),
            "results": gate.get("results_path"),
            "data_docs": gate.get("data_docs"),
        },
        "error": pair.get("error"),
        "report": "report.html",
    }
    path = root / CERTIFICATE_JSON
    write_json(path, cert)
    (root / CERTIFICATE_HTML).write_text(environment().get_template("certificate.html.j2").render(c=cert))
    return path


def finish_verification(
    inventory: Inventory, run: RunDir, *, strictness: str | None, history: str | None = None
) -> dict[str, Any]:
    """summary.json, report.html and the history entry (:func:`audit.pipeline.finish_run`), then the
    certificate; returns the certificate."""
    from audit.pipeline import finish_run

    if len(inventory.pairs) != 1:
        raise ConfigError("a verification inventory holds exactly one pair")
    finish_run(inventory, run, list(inventory.pairs), history)
    path = write_certificate(run.root, strictness=strictness, thresholds=inventory.pairs[0].gate.model_dump())
    cert: dict[str, Any] = json.loads(path.read_text())
    return cert
