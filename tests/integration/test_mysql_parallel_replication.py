"""Kind mysql against a MariaDB replica that applies in parallel, while the master is written.

The replica runs `slave_parallel_threads = 4`: its workers apply transactions at once (optimistic and
aggressive: any two of a domain, rolled back and retried on a conflict; conservative: those the master
group-committed together), and transactions of two GTID domains in any order between the domains.
Its `gtid_slave_pos` then holds one position per domain, each advanced when that domain's next
transaction commits (in order within a domain). The audit waits with MASTER_GTID_WAIT for the master's
`gtid_binlog_pos`, every domain of it. Four sessions write the master during the whole audit, two in
domain 0 (tables a and b, on overlapping rows, so optimistic apply conflicts), two in domain 1 (table c),
each transaction of one to four rows, while a replica session holds up one domain's apply now and
then; the healthy pair must give no finding, and planted differences (a changed, a missing and an
extra row, next to rows written all along) exactly those. The recheck's rounds forgive a wait that
misses a domain under constant writes, so a last test holds one domain's apply up on a quiet master:
there, a wait for one domain only (the first of the position) confirmed 51 healthy rows as row_mismatch.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from audit.local.mariadb_server import mariadb_available, wait_in_sync, wait_link_up
from tests.integration.helpers import findings, latest_run, run_cli, summary, write_inventory
from tests.integration.mysql_pair import FAST, Pair, start_module_pair

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not mariadb_available(), reason="mariadbd not installed (apt-get install mariadb-server)"),
]

PARALLEL = (
    "--slave-parallel-threads=4",
    "--slave-domain-parallel-threads=2",
    "--slave-parallel-mode=optimistic",
    "--log-slave-updates",
)
"""Four workers, at most two per domain (a domain held up leaves two to the other); the replica binlogs
what it applies, in the order it commits it (its gtid_binlog_state read by the errant_gtid check)."""
SETTINGS = {"gtid_wait_s": 10, "min_chunk_rows": 50, "max_chunk_rows": 150, "fetch_rows": 40, "max_rows_per_s": 4000}
"""Small chunks, paced: read over a few seconds, many of them while the replica is held up."""
TABLES = ("a", "b", "c")
ROWS = 3000
"""Each table holds the even ids 2..6000; the writers never touch a multiple of 20 (planted there)."""


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    yield from start_module_pair(tmp_path_factory.mktemp("mysql-parallel"), PARALLEL)


def set_mode(pair: Pair, mode: str) -> None:
    """The replica's slave_parallel_mode (its SQL thread stopped for the change)."""
    pair.replica.execute(
        "STOP SLAVE SQL_THREAD", f"SET GLOBAL slave_parallel_mode = '{mode}'", "START SLAVE SQL_THREAD"
    )
    wait_link_up(pair.replica)


# optimistic (MariaDB's default) in `make test`; the other two in `make test-slow`, for the suite's time
@pytest.fixture(
    params=[
        "optimistic",
        pytest.param("aggressive", marks=pytest.mark.slow),
        pytest.param("conservative", marks=pytest.mark.slow),
    ]
)
def mode(pair: Pair, request: pytest.FixtureRequest) -> Iterator[str]:
    mode: str = request.param
    set_mode(pair, mode)
    if mode == "conservative":  # only what the master group-commits together is applied in parallel
        pair.master.execute("SET GLOBAL binlog_commit_wait_count = 4", "SET GLOBAL binlog_commit_wait_usec = 5000")
    try:
        yield mode
    finally:
        pair.master.execute("SET GLOBAL binlog_commit_wait_count = 0", "SET GLOBAL binlog_commit_wait_usec = 100000")
        set_mode(pair, "optimistic")


def load(pair: Pair) -> str:
    schema = pair.new_schema()
    statements = []
    for t in TABLES:
        statements += [
            f"CREATE TABLE {schema}.{t} (id INT PRIMARY KEY, v INT NOT NULL, s VARCHAR(40), n BIGINT NOT NULL)",
            f"INSERT INTO {schema}.{t} SELECT seq * 2, seq, CONCAT('r-', seq), 0 FROM {schema}.seq_1_to_{ROWS}",
        ]
    pair.on_master(*statements)
    return schema


class Writers:
    """Sessions writing the master from threads until stopped, each in its GTID domain, as root."""

    def __init__(self, pair: Pair, schema: str) -> None:
        self.pair, self.schema = pair, schema
        self.stop_event = threading.Event()
        self.commits = [0, 0, 0, 0]
        self.errors: list[BaseException] = []
        # (domain, tables): two sessions per domain, on the same rows of the same tables
        jobs = [(0, ("a", "b")), (0, ("a", "b")), (1, ("c",)), (1, ("c",))]
        self.threads = [
            threading.Thread(target=self._run, args=(i, domain, tables), daemon=True)
            for i, (domain, tables) in enumerate(jobs)
        ]
        self.threads.append(threading.Thread(target=self._stall, daemon=True))
        self.stalls = 0

    def __enter__(self) -> Writers:
        for t in self.threads:
            t.start()
        time.sleep(0.5)  # the replica's workers busy (and behind) before the audit starts
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(30)
        if self.errors:
            raise self.errors[0]
        wait_in_sync(self.pair.master, self.pair.replica)

    def _run(self, index: int, domain: int, tables: tuple[str, ...]) -> None:
        rnd = random.Random(index)
        inserted: list[tuple[str, int]] = []
        next_id = 2 * ROWS + index  # new rows above the loaded ones, each session its own (keys stay dense)
        try:
            with self.pair.master.connect(admin=True) as conn, conn.cursor() as cur:
                cur.execute(f"SET SESSION gtid_domain_id = {domain}")
                while not self.stop_event.is_set():
                    added: list[tuple[str, int]] = []
                    kept = list(inserted)
                    cur.execute("BEGIN")
                    try:
                        for _ in range(rnd.randint(1, 4)):
                            table = f"{self.schema}.{rnd.choice(tables)}"
                            op = rnd.random()
                            if op < 0.15:
                                next_id += len(self.commits)
                                cur.execute(f"INSERT INTO {table} VALUES ({next_id}, 0, 'new', {index})")
                                added.append((table, next_id))
                            elif op < 0.25 and kept:
                                gone_table, gone = kept.pop(rnd.randrange(len(kept)))
                                cur.execute(f"DELETE FROM {gone_table} WHERE id = {gone}")
                            elif (key := 2 * rnd.randint(1, ROWS)) % 20:
                                cur.execute(f"UPDATE {table} SET v = v + 1, n = n + {index + 1} WHERE id = {key}")
                        cur.execute("COMMIT")
                    except pymysql.err.OperationalError as e:
                        if e.args[0] not in (1205, 1213):  # the other session of the domain took the rows first
                            raise
                        cur.execute("ROLLBACK")
                        continue
                    inserted = kept + added
                    self.commits[index] += 1
                    time.sleep(0.002)
        except BaseException as e:  # raised in the test by __exit__
            self.errors.append(e)

    def _stall(self) -> None:
        """A replica session that locks a sixth of a table's rows for 0.3 s of every 0.4, again and again: the workers
        of that table's domain wait behind it, the other domain's go on (the replica's domains out of step
        with each other, and behind the master)."""
        rnd = random.Random(99)
        try:
            with self.pair.replica.connect(admin=True) as conn, conn.cursor() as cur:
                while not self.stop_event.wait(0.1):
                    low = 2 * rnd.randint(1, ROWS)
                    table = rnd.choice(("a", "c"))
                    cur.execute("BEGIN")
                    cur.execute(
                        f"SELECT v FROM {self.schema}.{table} WHERE id BETWEEN {low} AND {low + 1000} FOR UPDATE"
                    )
                    time.sleep(0.3)
                    cur.execute("COMMIT")
                    self.stalls += 1
        except BaseException as e:  # raised in the test by __exit__
            self.errors.append(e)


def workers_running(pair: Pair) -> int:
    rows = pair.replica.execute("SHOW PROCESSLIST")
    return sum(1 for r in rows if r[4] == "Slave_worker")


def audit_cli(pair: Pair, schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, Path]:
    entry: dict[str, Any] = {
        "name": "parallel",
        "kind": "mysql",
        "master": pair.master_url,
        "replica": pair.replica_url,
        "tables": [f"{schema}.*"],
        "settings": SETTINGS,
    }
    inv = write_inventory(tmp_path / "inv.yaml", [entry], recheck_interval_s=0.1)
    code = run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch)
    return code, latest_run(tmp_path / "out")


def test_the_replica_applies_in_parallel_in_two_domains(pair: Pair) -> None:
    """The setting the other tests rely on: four workers, and a gtid_slave_pos of two domains."""
    schema = load(pair)
    behind_in_one_domain_only = 0
    with Writers(pair, schema) as writers:
        for _ in range(30):
            (master,) = pair.master.execute("SELECT @@GLOBAL.gtid_binlog_pos")[0]
            (replica,) = pair.replica.execute("SELECT @@GLOBAL.gtid_slave_pos")[0]
            behind = [m > r for m, r in zip(seqs(master), seqs(replica), strict=True)]
            behind_in_one_domain_only += behind.count(True) == 1
            time.sleep(0.1)
        assert workers_running(pair) == 4
    assert min(writers.commits) > 10
    (slave_pos,) = pair.replica.execute("SELECT @@GLOBAL.gtid_slave_pos")[0]
    assert sorted(g.split("-")[0] for g in slave_pos.split(",")) == ["0", "1"]
    assert behind_in_one_domain_only >= 3  # one domain held up while the other went on


def seqs(position: str) -> list[int]:
    """The seq of each domain of a MariaDB position, by domain."""
    return [int(seq) for _, seq in sorted((int(d), s) for d, _, s in (g.split("-") for g in position.split(",")))]


def gtid_waits(pair: Pair) -> tuple[int, int]:
    """MASTER_GTID_WAIT calls on the replica so far, and how many of them timed out."""
    status = dict(pair.replica.execute("SHOW GLOBAL STATUS LIKE 'Master_gtid_wait_%'"))
    return int(status["Master_gtid_wait_count"]), int(status["Master_gtid_wait_timeouts"])


def test_a_healthy_pair_written_in_two_domains_passes(
    pair: Pair, mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = load(pair)
    with Writers(pair, schema) as writers:
        before, (waits, timeouts) = sum(writers.commits), gtid_waits(pair)
        code, root = audit_cli(pair, schema, tmp_path, monkeypatch)
        during, (waits_after, timeouts_after) = sum(writers.commits) - before, gtid_waits(pair)
    assert during > 100, during  # the audit ran under writes (10,000-16,000 commits on this machine)
    # the audit waited for the replica, none of the waits timed out: 5-15 waits here, loaded or not, but
    # 2 in one CI run (how far behind the replica is when a chunk is read is up to the scheduler); the wait
    # and re-read themselves are pinned down in test_mysql_under_writes.py
    assert waits_after - waits >= 1 and timeouts_after == timeouts
    assert [(f["check"], f["category"], f["key"]) for f in findings(root)] == []
    s = summary(root)["pairs"][0]
    assert code == 0 and s["status"] == "passed", s
    coverage = s["coverage"]
    assert coverage["rows_unrechecked"] == 0 and coverage["chunks_uncovered"] == 0, coverage
    # each chunk counts its larger side: one chunk the replica read with a row inserted after the
    # master's snapshot, another with a row deleted after it, count one more than either side's sum
    most = max(coverage["master_rows"], coverage["replica_rows"])
    assert 3 * ROWS <= most <= coverage["rows_compared"] <= most * 1.01, coverage


def test_planted_differences_are_found_exactly_under_writes_in_two_domains(
    pair: Pair, mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A changed row in a (domain 0), a missing one in c (domain 1), an extra one in b, each between
    rows the writers change all along: those three findings, nothing else."""
    schema = load(pair)
    pair.on_replica_only(
        f"UPDATE {schema}.a SET s = 'changed' WHERE id = 1500",
        f"DELETE FROM {schema}.c WHERE id = 3000",
        f"INSERT INTO {schema}.b VALUES (4501, 7, 'extra', 0)",
    )
    with Writers(pair, schema) as writers:
        before = sum(writers.commits)
        code, root = audit_cli(pair, schema, tmp_path, monkeypatch)
        during = sum(writers.commits) - before
    assert during > 100, during
    got = sorted((f["category"], f["key"], f["detail"]) for f in findings(root) if f["check"] == "rows")
    assert [(c, k) for c, k, _ in got] == [
        ("extra_row", b"[4501]"),
        ("missing_row", b"[3000]"),
        ("row_mismatch", b"[1500]"),
    ]
    assert [f for f in findings(root) if f["check"] != "rows"] == []
    s = summary(root)["pairs"][0]
    assert code == 1 and s["status"] == "failed"
    assert s["coverage"]["rows_in_flight"] == 0 and s["coverage"]["chunks_uncovered"] == 0, s["coverage"]


def test_a_replica_behind_in_one_domain_only_is_waited_for_in_that_domain(pair: Pair, mode: str) -> None:
    """Domain 1's apply held up on the replica (a session there locks the rows of c its next transaction
    changes) while domain 0's goes on: the replica is at the master's position in domain 0, behind it
    in domain 1, and the master is written by no one during the audit. The chunk of c differs; the
    replica must be waited for in domain 1 too before it is read again (released after 1.5 s). Waiting
    for one domain only read it still behind, and a quiet master confirms at once: 51 row_mismatch."""
    schema = load(pair)
    pair.on_master("SET SESSION gtid_domain_id = 1", f"UPDATE {schema}.c SET n = 1 WHERE id = 2")  # domain 1 known
    (before,) = pair.master.execute("SELECT @@GLOBAL.gtid_binlog_pos")[0]
    with pair.replica.connect(admin=True) as hold, hold.cursor() as held:
        held.execute("BEGIN")
        held.execute(f"SELECT v FROM {schema}.c WHERE id BETWEEN 100 AND 200 FOR UPDATE")
        with pair.master.connect(admin=True) as conn, conn.cursor() as cur:
            cur.execute("SET SESSION gtid_domain_id = 1")
            cur.execute(f"UPDATE {schema}.c SET v = -v WHERE id BETWEEN 100 AND 200")
            cur.execute("SET SESSION gtid_domain_id = 0")
            cur.execute(f"UPDATE {schema}.a SET v = -v WHERE id BETWEEN 100 AND 200")
        (master,) = pair.master.execute("SELECT @@GLOBAL.gtid_binlog_pos")[0]
        deadline = time.time() + 10
        while time.time() < deadline:
            (replica,) = pair.replica.execute("SELECT @@GLOBAL.gtid_slave_pos")[0]
            if seqs(replica)[0] == seqs(master)[0]:
                break
            time.sleep(0.05)
        assert seqs(replica) == [seqs(master)[0], seqs(before)[1]]  # domain 0 applied, domain 1 not
        release = threading.Timer(1.5, held.execute, ("COMMIT",))
        release.start()
        try:
            t0 = time.perf_counter()
            result = pair.audit([f"{schema}.a", f"{schema}.c"], FAST.model_copy(update={"max_chunk_rows": 150}))
            seconds = time.perf_counter() - t0
        finally:
            release.join()
    assert result.findings == [], result.counts
    assert result.metrics["rows_compared"] == 2 * ROWS and result.metrics["uncovered"] == 0
    assert seconds >= 1.0  # the audit waited for domain 1
