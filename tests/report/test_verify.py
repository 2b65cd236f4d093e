"""audit.verify without servers: the verification inventory, the content digest, the certificate's verdict;
and audit.report.offsets on the sample shapes each source kind leaves in a summary."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from audit.errors import ConfigError
from audit.report.offsets import REPLICATION_UNIT, run_offsets
from audit.sources.redis.content import snapshot_digest
from audit.sources.redis.snapshot import SNAPSHOT_SCHEMA
from audit.verify import (
    certificate_verdict,
    in_verification_prose,
    in_verification_terms,
    verification_gate_keys,
    verification_inventory,
)


def test_zero_tolerance_inventory_gates_everything_at_zero() -> None:
    inv = verification_inventory("redis://src:6379", "conn:target", "redis", dbs=[], settings={"qps": 500})
    (pair,) = inv.pairs
    assert pair.name == "migration" and pair.kind == "redis" and pair.check_replication is False
    assert pair.dbs is None  # empty: every db either side has keys in
    keys = verification_gate_keys("redis")
    assert pair.gate.model_fields_set == set(keys)  # the kind's own keys, no other kind's
    assert {"max_missing", "max_ttl_mismatch", "max_uncovered", "max_lag_bytes"} <= set(keys)
    assert all(getattr(pair.gate, k) == 0 for k in keys)
    assert pair.settings.qps == 500
    assert pair.master is not None and pair.master.get_secret_value() == "redis://src:6379"


@pytest.mark.parametrize(
    ("strictness", "relaxed"), [("allow_ttl_drift", "max_ttl_mismatch"), ("allow_extra_on_target", "max_extra")]
)
def test_strictness_levels_relax_one_threshold(strictness: str, relaxed: str) -> None:
    gate = verification_inventory("redis://a:1", "redis://b:2", "pika", strictness, [0, 2]).pairs[0].gate
    values = gate.model_dump(include=gate.model_fields_set)
    assert values.pop(relaxed) is None
    assert values and all(v == 0 for v in values.values())


def test_a_mysql_verification_gates_only_its_own_thresholds() -> None:
    gate = verification_inventory("mysql://u@a:3306", "mysql://u@b:3306", "mysql").pairs[0].gate
    assert gate.model_fields_set == set(verification_gate_keys("mysql"))
    assert {"max_missing_row", "max_extra_table", "max_errant_gtid"} <= gate.model_fields_set
    assert not {"max_missing", "max_ttl_mismatch", "max_lag_bytes"} & gate.model_fields_set


def test_allow_extra_on_target_lets_a_tables_extra_rows_and_tables_pass() -> None:
    gate = (
        verification_inventory("mysql://u@a:3306", "mysql://u@b:3306", "mysql", "allow_extra_on_target").pairs[0].gate
    )
    assert gate.max_extra_row is None and gate.max_extra_table is None
    assert gate.max_missing_row == 0 and gate.max_row_mismatch == 0


def test_a_level_that_loosens_nothing_of_the_kind_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"kind mysql reports no ttl_mismatch findings .*zero_tolerance, allow_extra"):
        verification_inventory("mysql://u@a:3306", "mysql://u@b:3306", "mysql", "allow_ttl_drift")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "memcached"}, "verification kind .memcached."),
        ({"strictness": "lenient"}, "verification strictness 'lenient'"),
        ({"source": " "}, "verification source"),
        ({"dbs": [70000]}, "dbs"),
        ({"settings": {"qsp": 1}}, "verification setting qsp: kind redis takes no such setting"),
        # a MySQL setting on a Redis verification was accepted, and dropped as `defaults:` drops another kind's
        ({"settings": {"fetch_rows": 5}}, r"setting fetch_rows: kind redis .*its settings: .*max_keys_per_s"),
        ({"target": {"url": "redis://b:2", "topology": "bogus"}}, r"^verification: target\.topology: "),
        ({"source": {"url": "redis://a:1", "topology": "bogus"}}, r"^verification: source\.topology: "),
    ],
)
def test_bad_verification_arguments_are_named(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"source": "redis://a:1", "target": "redis://b:2", "kind": "redis", **kwargs}
    with pytest.raises(ConfigError, match=message):
        verification_inventory(**args)


def _row(
    db: int, key: bytes, digest: str = "d", status: str = "ok", at: int = 1000, expire: int | None = None
) -> dict[str, Any]:
    return {
        "db": db,
        "key": key,
        "type": "string",
        "ttl_ms": None if expire is None else expire - at,
        "expire_at_ms": expire,
        "length": 1,
        "digest": digest if status == "ok" else None,
        "status": status,
        "error": None if status == "ok" else "boom",
        "read_at_ms": at,
    }


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows, schema=SNAPSHOT_SCHEMA), path)
    return path


def test_digest_is_order_independent_and_counts_a_rescanned_key_once(tmp_path: Path) -> None:
    rows = [
        _row(db, b"k%d" % i, digest=f"v{i}", expire=5000 if i % 3 == 0 else None) for db in (0, 1) for i in range(300)
    ]
    shuffled = rows[:]
    random.Random(4).shuffle(shuffled)
    a = snapshot_digest(_write(tmp_path / "a.parquet", rows), dedupe=False, batch_size=64)
    b = snapshot_digest(_write(tmp_path / "b.parquet", shuffled), dedupe=True, batch_size=50)
    assert a.digest == b.digest and a.keys == b.keys == 600
    assert a.keys_per_db == b.keys_per_db == {"0": 300, "1": 300}
    # SCAN returned k5 twice; the later read is the one that counts, as in the diff
    again = [*shuffled, _row(0, b"k5", digest="stale", at=10)]
    c = snapshot_digest(_write(tmp_path / "c.parquet", again), dedupe=True, batch_size=50)
    assert c.digest == a.digest and c.keys == 600 and c.scan_duplicates == 1


def test_digest_sees_values_expiry_and_unreadable_keys(tmp_path: Path) -> None:
    base = [_row(0, b"k%d" % i, digest=f"v{i}") for i in range(50)]
    ref = snapshot_digest(_write(tmp_path / "ref.parquet", base)).digest
    changed = [*base[:-1], _row(0, b"k49", digest="other")]
    expiring = [*base[:-1], _row(0, b"k49", digest="v49", expire=99_999)]
    unreadable = [*base[:-1], _row(0, b"k49", status="error")]
    assert snapshot_digest(_write(tmp_path / "1.parquet", changed)).digest != ref
    assert snapshot_digest(_write(tmp_path / "2.parquet", expiring)).digest != ref
    broken = snapshot_digest(_write(tmp_path / "3.parquet", unreadable))
    assert broken.digest != ref and broken.keys == 49 and broken.keys_unreadable == 1


def _sides(a: str | None, b: str | None) -> dict[str, Any]:
    return {"source": {"content": {"digest": a}}, "target": {"content": {"digest": b}}}


def test_certificate_verdict() -> None:
    passed = {"status": "passed", "metrics": {"recheck_in_flight": 0}}
    assert certificate_verdict(passed, _sides("x", "x"), "zero_tolerance") == ("passed", [])
    verdict, reasons = certificate_verdict(passed, _sides("x", "y"), "zero_tolerance")
    assert verdict == "failed" and "digests of source and target differ" in reasons[0]
    assert certificate_verdict(passed, _sides("x", "y"), "allow_ttl_drift") == ("passed", [])
    moving = {"status": "passed", "metrics": {"recheck_in_flight": 3}}
    verdict, reasons = certificate_verdict(moving, _sides("x", "x"), "zero_tolerance")
    assert verdict == "failed" and reasons[0].startswith("3 keys changed on the source")
    failed = {"status": "failed", "gate": {"failed": [{"column": "missing_on_replica", "observed": 2, "threshold": 0}]}}
    assert certificate_verdict(failed, _sides("x", "y"), "zero_tolerance") == (
        "failed",
        ["gate failed: missing_on_replica=2 (max 0)"],
    )
    error = {"status": "error", "not_covered": ["target unreachable"]}
    assert certificate_verdict(error, _sides(None, None), "zero_tolerance") == (
        "error",
        ["not verified (error): target unreachable"],
    )


def test_offsets_from_the_summary_or_the_metrics() -> None:
    offsets = {"unit": "log position (bytes)", "samples": [[1000, 500.0, 480.0], [2100, 700.0, 700.0]], "by_db": {}}
    shown = run_offsets({"offsets": offsets})
    assert shown is not None and shown.unit == "log position (bytes)"
    assert shown.samples == [(1000, 500.0, 480.0), (2100, 700.0, 700.0)] and shown.last == (700.0, 700.0)
    per_db = run_offsets({"offsets": {"by_db": {"db0": {"master": 10.0, "replica": 4.0}, "db1": {"master": 5.0}}}})
    assert per_db is not None and per_db.unit == REPLICATION_UNIT and per_db.last == (15.0, 4.0)

    measured = run_offsets({"metrics": {"master_max_offset": 9000, "replica_max_offset": 8000}})
    assert measured is not None and measured.last == (9000.0, 8000.0)
    assert run_offsets({"replication_samples": [{"master": None, "replica": {"role": "slave"}}]}) is None
    assert run_offsets({"offsets": "garbage"}) is None
    assert run_offsets({"offsets": {"samples": "garbage"}}) is None


@pytest.mark.parametrize(
    ("said", "shown"),
    [
        ("migration master 10.0.0.5:1 unreachable: refused", "migration source 10.0.0.5:1 unreachable: refused"),
        ("pair migration replica: 2 node(s) unreachable", "pair migration target: 2 node(s) unreachable"),
        ("master 10.0.0.5:3306: cannot reach the server", "source 10.0.0.5:3306: cannot reach the server"),
        (
            "replica h:1: READONLY You can't write against a read only replica.",
            "target h:1: READONLY You can't write against a read only replica.",
        ),
        ("checks skipped: the replica was not read", "checks skipped: the replica was not read"),
        ("other master h:1 unreachable", "other master h:1 unreachable"),
    ],
)
def test_a_verifications_errors_name_source_and_target(said: str, shown: str) -> None:
    assert in_verification_terms(said, "migration") == shown


def test_an_unverified_pair_says_which_side_failed_in_its_own_terms() -> None:
    pair = {"pair": "migration", "status": "error", "not_covered": ["migration replica h:2 unreachable: refused"]}
    verdict, reasons = certificate_verdict(pair, _sides("x", None), "zero_tolerance")
    assert verdict == "error"
    assert reasons[0] == "not verified (error): migration target h:2 unreachable: refused"


@pytest.mark.parametrize("suite", sorted((Path(__file__).parents[2] / "audit" / "expectations").glob("*.json")))
def test_every_gate_meaning_reads_in_source_and_target_words(suite: Path) -> None:
    import json
    import re

    meanings = [e["meta"]["notes"] for e in json.loads(suite.read_text())["expectations"]]
    worded = [in_verification_prose(m if isinstance(m, str) else json.dumps(m)) for m in meanings]
    assert not [w for w in worded if re.search(r"\b(master|replica)\b", w, re.I)]
    assert in_verification_prose("The replica's keys; the Master's.") == "The target's keys; the Source's."


def test_digest_covers_what_the_compare_mode_compares(tmp_path: Path) -> None:
    # `verify --option compare=keys` (or length) of two servers whose values differed at the same length:
    # no finding, the gate passed, and the certificate failed on the full-content digests
    base = [_row(0, b"k%d" % i, digest=f"v{i}") for i in range(50)]

    def digests(rows: list[dict[str, Any]], name: str) -> dict[str, str | None]:
        path = _write(tmp_path / f"{name}.parquet", rows)
        return {mode: snapshot_digest(path, compare=mode).digest for mode in ("full", "length", "keys")}

    ref = digests(base, "ref")
    same_length = digests([*base[:-1], _row(0, b"k49", digest="other")], "value")
    longer = digests([*base[:-1], {**_row(0, b"k49", digest="other"), "length": 2}], "length")
    expiring = digests([*base[:-1], _row(0, b"k49", digest="v49", expire=99_999)], "expiry")
    retyped = digests([*base[:-1], {**_row(0, b"k49", digest="v49"), "type": "hash"}], "type")
    missing = digests(base[:-1], "missing")
    differs = lambda d: {m for m in d if d[m] != ref[m]}  # noqa: E731
    assert differs(same_length) == {"full"}
    assert differs(longer) == differs(expiring) == differs(retyped) == {"full", "length"}
    assert differs(missing) == {"full", "length", "keys"}
