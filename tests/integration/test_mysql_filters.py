"""Kind mysql on a replica with replication filters (replicate_ignore_table, replicate_wild_ignore_table),
through the real CLI on a real MariaDB GTID pair: the tables it does not replicate by design are
named with their filter and not compared; every other table is, divergences found."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from audit.local.mariadb_server import mariadb_available, wait_in_sync
from tests.integration.helpers import findings, latest_run, run_cli, summary, write_inventory
from tests.integration.mysql_pair import Pair, start_module_pair

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not mariadb_available(), reason="mariadbd not installed (apt-get install mariadb-server)"),
]
FAST = {"recheck_interval_s": 0.05, "gtid_wait_s": 5, "min_chunk_rows": 50, "max_chunk_rows": 400}
FILTERS = ("--replicate-ignore-table=s.ign", "--replicate-wild-ignore-table=s.skip%")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    yield from start_module_pair(tmp_path_factory.mktemp("mysql-filters"), FILTERS)


@pytest.fixture(scope="module")
def loaded(pair: Pair) -> Pair:
    pair.on_master(
        "CREATE DATABASE s",
        *(f"CREATE TABLE s.{t} (id INT PRIMARY KEY, v INT)" for t in ("t", "ign", "skip1")),
        *(f"INSERT INTO s.{t} SELECT seq, seq FROM s.seq_1_to_800" for t in ("t", "ign", "skip1")),
    )
    # a filtered table the replica holds too (made before the filter was set), its rows since then not
    pair.on_replica_only("CREATE TABLE s.skip2 (id INT PRIMARY KEY, v INT)")
    pair.on_master(
        "CREATE TABLE IF NOT EXISTS s.skip2 (id INT PRIMARY KEY, v INT)", "INSERT INTO s.skip2 VALUES (1, 1)"
    )
    return pair


def _run(pair: Pair, tmp_path, monkeypatch) -> tuple[int, dict, list[dict]]:  # type: ignore[no-untyped-def,type-arg]
    entry = {
        "name": "filtered",
        "kind": "mysql",
        "master": pair.master_url,
        "replica": pair.replica_url,
        "tables": ["s.*"],
        "settings": FAST,
    }
    inv = write_inventory(tmp_path / "inv.yaml", [entry])
    code = run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch)
    root = latest_run(tmp_path / "out")
    return code, summary(root)["pairs"][0], findings(root)


def test_filtered_tables_are_named_not_diverged_on_a_healthy_pair_under_writes(
    loaded: Pair, tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    stop = threading.Event()

    def write() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            loaded.master.execute(
                *(f"UPDATE s.{t} SET v = v + 1 WHERE id = {i % 800 + 1}" for t in ("t", "ign", "skip1", "skip2"))
            )

    writer = threading.Thread(target=write)
    writer.start()
    try:
        code, pair, found = _run(loaded, tmp_path, monkeypatch)
    finally:
        stop.set()
        writer.join()
    assert found == [] and code == 0, found
    assert pair["coverage"]["tables_filtered"] == 3 and pair["coverage"]["tables_compared"] == 1
    shown = " ".join(pair["not_covered"])
    assert "3 tables the replica's replication filters keep from it" in shown


def test_a_divergence_in_a_replicated_table_is_found_beside_filtered_ones(loaded: Pair, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    wait_in_sync(loaded.master, loaded.replica)
    loaded.on_replica_only("UPDATE s.t SET v = -1 WHERE id = 17", "DELETE FROM s.t WHERE id = 700")
    code, _pair, found = _run(loaded, tmp_path, monkeypatch)
    assert code == 1
    assert sorted((f["category"], f["key"]) for f in found) == [("missing_row", b"[700]"), ("row_mismatch", b"[17]")]


def test_a_pair_whose_every_table_is_filtered_compares_nothing_and_says_so(loaded: Pair) -> None:
    result = loaded.audit(["s.ign", "s.skip1"])
    assert result.findings == [] and result.metrics["tables_compared"] == 0
    assert result.filtered == [
        {"table": "s.ign", "filter": "the replica's replicate_ignore_table = s.ign: it does not replicate the table"},
        {
            "table": "s.skip1",
            "filter": "the replica's replicate_wild_ignore_table = s.skip%: it does not replicate the table",
        },
    ]
