"""Kind mysql through the real CLI on a real MariaDB GTID pair: rows and GTIDs, the gate, the report's
repair plan, a healthy pair, a post-migration verification and bad input, end to end."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from audit.layout import RunDir
from audit.local.mariadb_server import MariaDBServer, free_port, mariadb_available, start_pair, wait_in_sync
from audit.report.summary import pair_verdict
from tests.integration.helpers import findings, latest_run, run_cli, summary, write_inventory

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not mariadb_available(), reason="mariadbd not installed (apt-get install mariadb-server)"),
]
FAST = {"recheck_interval_s": 0.05, "gtid_wait_s": 5, "min_chunk_rows": 50, "max_chunk_rows": 400}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MariaDBServer, MariaDBServer]]:
    master, replica = start_pair(tmp_path_factory.mktemp("mysql-cli"))
    try:
        yield master, replica
    finally:
        replica.stop()
        master.stop()


def load(master: MariaDBServer, replica: MariaDBServer, schema: str, rows: int = 2000) -> None:
    master.execute(
        f"CREATE DATABASE {schema}",
        f"CREATE TABLE {schema}.orders (id INT PRIMARY KEY, sku VARCHAR(20), total DECIMAL(10,2), note TEXT NULL)",
        f"INSERT INTO {schema}.orders SELECT seq, CONCAT('A-', seq), seq * 1.25, NULL FROM {schema}.seq_1_to_{rows}",
    )
    wait_in_sync(master, replica)


def pair_entry(name: str, master: MariaDBServer, replica: MariaDBServer, schema: str, **extra: object) -> dict:  # type: ignore[type-arg]
    return {
        "name": name,
        "kind": "mysql",
        "master": master.create_auditor(),
        "replica": replica.create_auditor(),
        "tables": [f"{schema}.*"],
        "settings": FAST,
        **extra,
    }


def test_planted_rows_and_an_errant_transaction_fail_the_gate(servers, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    master, replica = servers
    load(master, replica, "shop")
    replica.execute(
        "SET SESSION sql_log_bin = 0",
        "DELETE FROM shop.orders WHERE id = 7",
        "UPDATE shop.orders SET total = 0 WHERE id = 1500",
        "SET SESSION sql_log_bin = 1",
        "CREATE DATABASE errant_on_replica",  # written on the replica with binlog on: an errant GTID
    )
    inv = write_inventory(tmp_path / "inv.yaml", [pair_entry("shop-db", master, replica, "shop")])
    try:
        assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 1
    finally:
        # the errant GTID stays reported while the replica's binlog holds it (even once the master's seq
        # has passed it): clear that binlog (the replica serves no one) so the next tests see a clean pair
        replica.execute("RESET MASTER")
    root = latest_run(tmp_path / "out")
    got = {(f["check"], f["category"], f["key"]) for f in findings(root)}
    assert {("rows", "missing_row", b"[7]"), ("rows", "row_mismatch", b"[1500]")} <= got
    assert {c for _, c, _ in got} == {"missing_row", "row_mismatch", "errant_gtid"}
    mismatch = next(f for f in findings(root) if f["category"] == "row_mismatch")
    assert json.loads(mismatch["detail"])["columns"] == ["total"]
    s = summary(root)["pairs"][0]
    assert s["status"] == "failed" and s["coverage"]["rows_compared"] == 2000
    verdict = pair_verdict(RunDir(root.parent, root.name), "shop-db")  # an asset event's extra
    assert verdict["compared"]["rows_compared"] == 2000 and verdict["keys_compared"] is None
    assert {f["column"] for f in s["gate"]["failed"]} == {"missing_row", "row_mismatch", "errant_gtid"}
    plan = root / s["artifacts"]["repair plan"]
    text = plan.read_text()
    assert "INSERT INTO `shop`.`orders`" in text and "UPDATE `shop`.`orders` SET `total`" in text
    assert "repair" in (root / "report.html").read_text()


def test_a_healthy_pair_passes(servers, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    master, replica = servers
    load(master, replica, "healthy")
    inv = write_inventory(tmp_path / "inv.yaml", [pair_entry("ok", master, replica, "healthy")])
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 0
    root = latest_run(tmp_path / "out")
    assert [f for f in findings(root) if f["check"] == "rows"] == []
    assert summary(root)["pairs"][0]["checks"]["rows"]["status"] == "done"
    # no plan for nothing to repair, as for a Redis pair: an empty one read as if something needed repair
    assert not (root / "repair" / "ok.sql").exists() and summary(root)["pairs"][0]["artifacts"] == {}


def test_post_migration_verification_certifies_tables_rows_and_digests(servers, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    master, replica = servers
    load(master, replica, "moved", rows=300)
    load(master, replica, "stays", rows=10)  # a schema that is not migrated
    target = MariaDBServer(free_port(), tmp_path / "target").start()
    try:
        target.execute(
            "CREATE DATABASE moved",
            "CREATE TABLE moved.orders (id INT PRIMARY KEY, sku VARCHAR(20), total DECIMAL(10,2), note TEXT NULL)",
            "INSERT INTO moved.orders SELECT seq, CONCAT('A-', seq), seq * 1.25, NULL FROM moved.seq_1_to_300",
        )
        args = [
            "verify",
            "--kind",
            "mysql",
            "--source",
            master.create_auditor(),
            "--target",
            target.create_auditor(),
            "--table",
            "moved.*",  # the migrated schema only
            "-o",
            str(tmp_path / "v"),
            "--setting",
            "recheck_interval_s=0.05",
        ]
        code = run_cli(args, monkeypatch)
        # every table: `stays` was not migrated, so the verification fails on it
        every = [a for a in args if a not in ("--table", "moved.*")] + ["-o", str(tmp_path / "all")]
        unfiltered = run_cli(every, monkeypatch)
    finally:
        target.stop()
    everything = json.loads((latest_run(tmp_path / "all") / "certificate.json").read_text())
    assert unfiltered == 1 and everything["verdict"] == "failed"
    assert any("missing_table" in r for r in everything["reasons"]), everything["reasons"]
    cert = json.loads((latest_run(tmp_path / "v") / "certificate.json").read_text())
    assert code == 0 and cert["verdict"] == "passed", cert["reasons"]
    assert cert["digests_equal"] and cert["source"]["content"]["rows"] >= 300
    assert "moved.orders" in cert["source"]["content"]["rows_per_table"]
    html = (latest_run(tmp_path / "v") / "certificate.html").read_text()
    digest = cert["source"]["content"]["digest_per_table"]["moved.orders"]
    assert 'data-table="moved.orders"' in html and digest in html  # what was certified, table by table
    assert f"rows compared: {cert['compared']['rows_compared']:,}" in html and "keys (readable" not in html


def test_bad_input_names_the_table_or_the_host(servers, tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    master, replica = servers
    missing = write_inventory(
        tmp_path / "a.yaml", [{**pair_entry("m", master, replica, "x"), "tables": ["shop.no_such_table"]}]
    )
    assert run_cli(["run", "-i", str(missing), "-o", str(tmp_path / "a")], monkeypatch) == 2
    assert "no_such_table" in capsys.readouterr().err
    dead = f"mysql://auditor:pw@127.0.0.1:{free_port()}"
    down = write_inventory(
        tmp_path / "b.yaml", [{**pair_entry("d", master, replica, "x"), "replica": dead, "check_replication": False}]
    )
    assert run_cli(["run", "-i", str(down), "-o", str(tmp_path / "b")], monkeypatch) == 3
    err = capsys.readouterr().err
    assert "127.0.0.1" in err and "Traceback" not in err and "pw@" not in err


def test_one_server_given_as_both_sides_is_refused(servers, tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    # compared with itself a server agrees on every row: a verification certified it, exit 0
    master, _ = servers
    load_once = "CREATE DATABASE IF NOT EXISTS selfie", "CREATE TABLE IF NOT EXISTS selfie.t (id INT PRIMARY KEY)"
    master.execute(*load_once)
    source = master.create_auditor()
    target = source.replace("127.0.0.1", "localhost")  # another URL, the same server
    args = ["verify", "--kind", "mysql", "--source", source, "--target", target, "--table", "selfie.*"]
    assert run_cli([*args, "-o", str(tmp_path / "v")], monkeypatch) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "both endpoints reach one server (server id" in err, err
    (certificate,) = (tmp_path / "v").glob("*/certificate.json")
    assert json.loads(certificate.read_text())["verdict"] == "error"
