"""Kind mysql on tables whose engine reads no snapshot (MyISAM, Aria, MEMORY), on a real MariaDB GTID
pair: START TRANSACTION WITH CONSISTENT SNAPSHOT does not hold them still, so a chunk's digests and
its rows are read at different moments while the master is written. A healthy copy must give neither
a finding nor an uncovered chunk; a planted divergence is still found."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator

import pytest

from audit.local.mariadb_server import mariadb_available, wait_in_sync
from audit.sources.mysql.chunks import TableWork
from tests.integration.mysql_pair import FAST, Pair, start_module_pair

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not mariadb_available(), reason="mariadbd not installed (apt-get install mariadb-server)"),
]
ENGINES = ("MyISAM", "Aria", "MEMORY")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    yield from start_module_pair(tmp_path_factory.mktemp("mysql-nontransactional"))


@pytest.fixture()
def schema(pair: Pair) -> str:
    name = pair.new_schema()
    pair.on_master(
        *(f"CREATE TABLE {name}.{e} (id INT PRIMARY KEY, v INT, c VARCHAR(20)) ENGINE={e}" for e in ENGINES),
        *(f"INSERT INTO {name}.{e} SELECT seq, seq, 'x' FROM {name}.seq_1_to_2000" for e in ENGINES),
    )
    return name


def test_a_chunk_written_between_its_digests_and_its_rows_is_read_again_not_uncovered(
    pair: Pair, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replica's row 5 differs when the chunk's digests are read, and is the master's again by the time
    its rows are (what an unisolated read of a table being written sees): it was uncovered, 'no row read
    by key differed', and failed the gate of a healthy pair."""
    pair.on_replica_only(f"UPDATE {schema}.MyISAM SET v = -5 WHERE id = 5")
    real = TableWork._differing_rows

    def set_right_first(self, lower, upper, m, r):  # type: ignore[no-untyped-def]
        pair.on_replica_only(f"UPDATE {schema}.MyISAM SET v = 5 WHERE id = 5")
        return real(self, lower, upper, m, r)

    monkeypatch.setattr(TableWork, "_differing_rows", set_right_first)
    result = pair.audit([f"{schema}.MyISAM"])
    assert result.findings == [] and result.uncovered == [] and result.tables[0]["equal"]


def test_healthy_non_transactional_tables_under_writes_give_nothing_and_planted_rows_are_found(
    pair: Pair, schema: str
) -> None:
    stop = threading.Event()
    writes = [0]

    def write(seed: int) -> None:
        rnd = random.Random(seed)
        with pair.master.connect(admin=True) as conn, conn.cursor() as cur:
            while not stop.is_set():
                table, i = f"{schema}.{rnd.choice(ENGINES)}", rnd.randint(1, 1990)
                op = rnd.random()
                if op < 0.6:
                    cur.execute(f"UPDATE {table} SET v = v + 1 WHERE id = {i}")
                elif op < 0.8:
                    cur.execute(f"DELETE FROM {table} WHERE id = {i}")
                else:
                    cur.execute(f"INSERT IGNORE INTO {table} VALUES ({i}, 0, 'y')")
                writes[0] += 1

    def audit_under_writes(seed: int):  # type: ignore[no-untyped-def]
        stop.clear()
        writers = [threading.Thread(target=write, args=(seed + k,)) for k in range(2)]
        for w in writers:
            w.start()
        try:
            return pair.audit([f"{schema}.*"])
        finally:
            stop.set()
            for w in writers:
                w.join()

    for seed in (1, 10, 20):
        result = audit_under_writes(seed)
        assert result.findings == [] and result.uncovered == [], (result.findings, result.uncovered)
    assert writes[0] > 300  # the master was written during each audit
    wait_in_sync(pair.master, pair.replica)
    pair.on_replica_only(*(f"UPDATE {schema}.{e} SET c = 'planted' WHERE id = 1995" for e in ENGINES))
    result = audit_under_writes(30)
    found = sorted(((f.evidence or {}).get("table"), f.category, f.key) for f in result.findings)
    assert found == [(f"{schema}.{e}", "row_mismatch", b"[1995]") for e in sorted(ENGINES)]


def test_a_keyless_myisam_row_written_during_the_recheck_scans_is_not_confirmed_at_once(
    pair: Pair, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recheck judged the master quiet from its position when its 'snapshots' opened, before the
    scans; a MyISAM scan sees what is written during it: a copy the master wrote mid-scan, not yet
    applied by the replica, was a missing_row at once. Now the master's position is read after the
    scans too: written, the row is undecided in its one round (uncovered), never a divergence."""
    from audit.sources.mysql import recheck_keyless

    pair.on_master(
        f"CREATE TABLE {schema}.kl (id INT, v INT) ENGINE=MyISAM",
        f"INSERT INTO {schema}.kl SELECT seq % 50, 1 FROM {schema}.seq_1_to_500",
    )
    pair.on_replica_only(f"DELETE FROM {schema}.kl WHERE id = 7 LIMIT 1")  # a candidate for the recheck
    real_copies, real_recheck = TableWork.copies, recheck_keyless.recheck_keyless
    state = {"recheck": False, "done": False}

    def recheck(*args, **kw):  # type: ignore[no-untyped-def]
        state["recheck"] = True
        return real_recheck(*args, **kw)

    def copies(self):  # type: ignore[no-untyped-def]
        if state["recheck"] and not state["done"]:
            state["done"] = True  # the replica is healthy again; the master writes one more copy as the scans run
            pair.on_replica_only(f"INSERT INTO {schema}.kl VALUES (7, 1)")
            pair.replica.execute("STOP SLAVE SQL_THREAD")
            pair.master.execute(f"INSERT INTO {schema}.kl VALUES (7, 1)")
        try:
            return real_copies(self)
        finally:
            if state["done"]:
                pair.replica.execute("START SLAVE SQL_THREAD")

    monkeypatch.setattr(recheck_keyless, "recheck_keyless", recheck)
    monkeypatch.setattr("audit.sources.mysql.rows.recheck_keyless", recheck)
    monkeypatch.setattr(TableWork, "copies", copies)
    result = pair.audit([f"{schema}.kl"], FAST.model_copy(update={"recheck_rounds": 1}))  # one round: judged at once
    assert state["done"] and result.findings == [], result.findings
    assert [(u["rows"], u["reason"][:34]) for u in result.uncovered] == [(1, "differed while the master was bein")]
