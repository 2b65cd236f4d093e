"""Kind mysql, the recheck of differing rows while the master is written, on a real MariaDB GTID pair.

A round reads the master, waits until the replica has applied the master's position, reads the
replica, then the master again. Two master reads alike do not show that a row stood still between
them: it may have changed and come back (set and set back, deleted and inserted again) while the
replica, read in between, held the value it passed through. The writes here are made at the moments
that expose this, between the recheck's reads (real writes on the real master, replicated).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from audit.local.mariadb_server import mariadb_available
from audit.sources.mysql import catalog
from audit.sources.mysql.chunks import Sides, TableWork
from audit.sources.mysql.client import Server, connect_pair
from audit.sources.mysql.endpoint import MySQLEndpoint, MySQLSettings
from audit.sources.mysql.row_diff import RowDiff
from audit.sources.mysql.rows import RecheckResult, recheck
from audit.sources.mysql.values import TablePlan
from tests.integration.mysql_pair import FAST, Pair, start_module_pair

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not mariadb_available(), reason="mariadbd not installed (apt-get install mariadb-server)"),
]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    yield from start_module_pair(tmp_path_factory.mktemp("mysql-under-writes"))


@pytest.fixture()
def schema(pair: Pair) -> str:
    return pair.new_schema()


@pytest.fixture()
def sides(pair: Pair) -> Iterator[Sides]:
    ends = (MySQLEndpoint.from_url(pair.master_url), MySQLEndpoint.from_url(pair.replica_url))
    opened = Sides(*connect_pair(*ends))
    yield opened
    opened.close()


def plans_of(sides: Sides, schema: str, *tables: str) -> list[TablePlan]:
    names = [(schema, t) for t in tables]
    defs = (catalog.load_definitions(s, names, {}) for s in (sides.master, sides.replica))
    plans, _ = catalog.compare_catalogs(names, *defs)
    return plans


def around_replica_reads(monkeypatch: pytest.MonkeyPatch, act: Callable[[str], None]) -> None:
    """act("before") and act("after") around each recheck read of the replica's rows by key."""
    real = TableWork.rows_by_key

    def wrapped(self: TableWork, side: str, keys: Any, server: Server | None = None) -> Any:
        if side == "replica":
            act("before")
        try:
            return real(self, side, keys, server)  # type: ignore[arg-type]
        finally:
            if side == "replica":
                act("after")

    monkeypatch.setattr(TableWork, "rows_by_key", wrapped)


def keyed(pair: Pair, schema: str) -> None:
    pair.on_master(
        f"CREATE TABLE {schema}.k (id INT PRIMARY KEY, s VARCHAR(10))",
        f"INSERT INTO {schema}.k SELECT seq, 'orig' FROM {schema}.seq_1_to_100",
        f"CREATE TABLE {schema}.other (id INT PRIMARY KEY, n INT)",
        f"INSERT INTO {schema}.other VALUES (1, 0)",
    )


def run(sides: Sides, plans: list[TablePlan], diffs: list[RowDiff], rounds: int) -> RecheckResult:
    settings: MySQLSettings = FAST.model_copy(update={"recheck_rounds": rounds})
    return recheck(sides, plans, diffs, settings, check_replication=True)


def keys(diffs: list[RowDiff]) -> list[Any]:
    return sorted(d.key or () for d in diffs)


def test_a_row_set_and_set_back_around_the_replica_read_is_not_confirmed(
    pair: Pair, schema: str, sides: Sides, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A healthy row the chunk compare saw differ (it was being written), re-read in one round: the
    master reads 'orig' twice, the replica, read in between, holds the 'tmp' the master passed
    through. It was confirmed as a row_mismatch (replica 'tmp'), though the replica was in step."""
    keyed(pair, schema)
    plans = plans_of(sides, schema, "k")

    def set_and_set_back(when: str) -> None:
        pair.on_master(f"UPDATE {schema}.k SET s = '{'tmp' if when == 'before' else 'orig'}' WHERE id = 7")

    around_replica_reads(monkeypatch, set_and_set_back)
    result = run(sides, plans, [RowDiff(0, (7,), None, None, None, None)], rounds=1)
    assert result.persisting == []
    assert keys(result.in_flight) == [(7,)]  # undecided: uncovered, never a pass


def test_divergences_are_confirmed_while_the_master_writes_other_rows(
    pair: Pair, schema: str, sides: Sides, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real divergences, re-read while the master writes elsewhere in every round: two rounds that find
    the same values on both sides confirm them; one such round alone leaves them undecided."""
    keyed(pair, schema)
    pair.on_replica_only(
        f"DELETE FROM {schema}.k WHERE id = 8",
        f"UPDATE {schema}.k SET s = 'x' WHERE id = 9",
        f"INSERT INTO {schema}.k VALUES (500, 'extra')",
    )
    plans = plans_of(sides, schema, "k")
    written = [0]

    def elsewhere(when: str) -> None:
        written[0] += 1
        pair.on_master(f"UPDATE {schema}.other SET n = {written[0]}")

    around_replica_reads(monkeypatch, elsewhere)
    diffs = [RowDiff(0, (k,), None, None, None, None) for k in (8, 9, 500)]
    confirmed = run(sides, plans, diffs, rounds=3)
    assert keys(confirmed.persisting) == [(8,), (9,), (500,)] and confirmed.in_flight == []
    once = run(sides, plans, diffs, rounds=1)
    assert once.persisting == [] and keys(once.in_flight) == [(8,), (9,), (500,)]
    monkeypatch.undo()  # a master written by no one: one round is exact, and confirms
    quiet = run(sides, plans, diffs, rounds=1)
    assert keys(quiet.persisting) == [(8,), (9,), (500,)] and quiet.in_flight == []


# --- keyless tables: compared as multisets ---------------------------------------------------------------


def around_snapshots(monkeypatch: pytest.MonkeyPatch, sides: Sides, act: Callable[[str], None]) -> None:
    """act(side) before each consistent snapshot the recheck's own sessions open (side: master or replica)."""
    real = Server.begin

    def wrapped(self: Server) -> None:
        if self is sides.master or self is sides.replica:
            act(self.side)
        real(self)

    monkeypatch.setattr(Server, "begin", wrapped)


def keyless(pair: Pair, schema: str, sides: Sides) -> tuple[list[TablePlan], list[RowDiff]]:
    """A keyless table and the surplus rows its multiset compare found while row 7 was being written."""
    pair.on_master(
        f"CREATE TABLE {schema}.bag (id INT, s VARCHAR(10))",
        f"INSERT INTO {schema}.bag SELECT seq, 'orig' FROM {schema}.seq_1_to_100",
        f"CREATE TABLE {schema}.other (id INT PRIMARY KEY, n INT)",
        f"INSERT INTO {schema}.other VALUES (1, 0)",
    )
    plans = plans_of(sides, schema, "bag")
    pair.on_replica_only(f"UPDATE {schema}.bag SET s = 'tmp' WHERE id = 7")  # as the master's next write
    work = TableWork(sides, plans[0], 0, FAST, check_replication=False)
    work.open_snapshots()
    candidates = list(work.multiset())
    work.close_snapshots()
    pair.on_replica_only(f"UPDATE {schema}.bag SET s = 'orig' WHERE id = 7")  # healthy again
    assert len(candidates) == 2
    return plans, candidates


def test_a_keyless_row_set_while_the_replica_was_read_and_set_back_is_not_confirmed(
    pair: Pair, schema: str, sides: Sides, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A healthy keyless row written in every round: 'orig' in the master's snapshot, 'tmp' by the time
    the replica's opens (the master's next write, replicated), set back before the next round. The same
    two surplus rows in every round were confirmed: a missing_row and an extra_row on a healthy pair."""
    plans, candidates = keyless(pair, schema, sides)

    def toggled(side: str) -> None:
        pair.on_master(f"UPDATE {schema}.bag SET s = '{'orig' if side == 'master' else 'tmp'}' WHERE id = 7")

    around_snapshots(monkeypatch, sides, toggled)
    result = run(sides, plans, candidates, rounds=3)
    assert result.persisting == [] and len(result.in_flight) == 2


def test_keyless_divergences_are_confirmed_while_the_master_writes_other_rows(
    pair: Pair, schema: str, sides: Sides, monkeypatch: pytest.MonkeyPatch
) -> None:
    plans, _ = keyless(pair, schema, sides)
    pair.on_replica_only(f"UPDATE {schema}.bag SET s = 'x' WHERE id = 9", f"DELETE FROM {schema}.bag WHERE id = 10")
    work = TableWork(sides, plans[0], 0, FAST, check_replication=False)
    work.open_snapshots()
    diffs = list(work.multiset())
    work.close_snapshots()
    written = [0]

    def elsewhere(side: str) -> None:
        written[0] += 1
        pair.on_master(f"UPDATE {schema}.other SET n = {written[0]}")

    around_snapshots(monkeypatch, sides, elsewhere)
    confirmed = run(sides, plans, diffs, rounds=3)
    assert len(confirmed.persisting) == 3 and confirmed.in_flight == []
    once = run(sides, plans, diffs, rounds=1)
    assert once.persisting == [] and len(once.in_flight) == 3


# --- coverage --------------------------------------------------------------------------------------------


def _table_of_2000_rows(pair: Pair, schema: str) -> None:
    pair.on_master(
        f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, v INT)",
        f"INSERT INTO {schema}.t SELECT seq, seq FROM {schema}.seq_1_to_2000",
    )


def test_rows_of_chunks_left_uncovered_are_not_counted_as_compared(pair: Pair, schema: str) -> None:
    """A replica whose SQL thread is stopped while the master writes the first rows: their chunks are
    uncovered, and rows_compared claimed them too (every row of the table, none of these compared)."""
    _table_of_2000_rows(pair, schema)
    with pair.sql_thread_stopped():
        pair.master.execute(f"UPDATE {schema}.t SET v = -v WHERE id <= 300")
        result = pair.audit([f"{schema}.t"], FAST.model_copy(update={"gtid_wait_s": 0.3}))
    m = result.metrics
    assert result.findings == [] and m["chunks_uncovered"] >= 1 and m["chunks_equal"] >= 1
    assert m["master_rows"] == 2000 and 0 < m["uncovered_rows"] < 2000
    assert m["rows_compared"] == 2000 - m["uncovered_rows"]


def test_chunks_keep_their_size_while_the_replica_is_behind(pair: Pair, schema: str) -> None:
    """Chunks are sized to a time target of their checksums. The wait for a stopped replica counted as
    checksum time: every chunk shrank to min_chunk_rows and waited again (40 chunks of 50 rows, each
    a wait; a second a chunk by default, hours for a large table)."""
    _table_of_2000_rows(pair, schema)
    with pair.sql_thread_stopped():
        pair.master.execute(f"UPDATE {schema}.t SET v = -v")
        settings = FAST.model_copy(update={"gtid_wait_s": 0.3, "chunk_time_s": 0.1})
        result = pair.audit([f"{schema}.t"], settings)
    m = result.metrics
    assert result.findings == [] and m["chunks_uncovered"] == m["chunks"] and m["uncovered_rows"] == 2000
    assert m["chunks"] <= 20, m["chunks"]


def test_rows_the_recheck_left_undecided_are_counted_in_uncovered_rows(
    pair: Pair, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows the recheck could not judge (the replica stopped before it) are uncovered, one entry each, and
    were counted as 0 rows: the summary said "2 table ranges or rows not compared (0 rows)"."""
    import audit.sources.mysql.engine as engine
    from audit.local.mariadb_server import wait_link_up

    keyed(pair, schema)
    pair.on_replica_only(f"UPDATE {schema}.k SET s = 'x' WHERE id IN (5, 6)")
    real = engine.recheck

    def replica_stopped_first(*args: Any, **kwargs: Any) -> Any:
        pair.replica.execute("STOP SLAVE SQL_THREAD")
        pair.master.execute(f"UPDATE {schema}.other SET n = 1")  # a position the replica will not reach
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "recheck", replica_stopped_first)
    try:
        result = pair.audit([f"{schema}.k"], FAST.model_copy(update={"gtid_wait_s": 0.3, "recheck_rounds": 1}))
    finally:
        pair.replica.execute("START SLAVE SQL_THREAD")
        wait_link_up(pair.replica)
    assert result.findings == [] and [u["row"] for u in result.uncovered] == [["5"], ["6"]]
    assert result.metrics["uncovered"] == 2 and result.metrics["uncovered_rows"] == 2
    assert result.metrics["rows_compared"] == 98


def spied_wait_bounds(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The bound, in seconds, of each MASTER_GTID_WAIT sent from now on (appended as sent)."""
    bounds: list[float] = []
    real_text = Server.text

    def text(self: Server, sql: str, doing: str = "a query") -> Any:
        if "MASTER_GTID_WAIT" in sql:
            bounds.append(float(sql.rsplit(",", 1)[1].rstrip(") ")))
        return real_text(self, sql, doing)

    monkeypatch.setattr(Server, "text", text)
    return bounds


def test_a_stopped_replica_costs_the_full_wait_once_not_per_batch(
    pair: Pair, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recheck waits for the replica before each batch of each table. With the SQL thread stopped,
    every wait ran the whole `gtid_wait_s` (10 s by default) and ended the same way: after the first
    that timed out, the next wait at most a second, until the replica reaches a position again."""
    import audit.sources.mysql.engine as engine
    from audit.local.mariadb_server import wait_link_up

    tables = ("k1", "k2", "k3")
    for t in tables:
        pair.on_master(
            f"CREATE TABLE {schema}.{t} (id INT PRIMARY KEY, s VARCHAR(10))",
            f"INSERT INTO {schema}.{t} VALUES (1, 'a'), (2, 'b'), (3, 'c')",
        )
        pair.on_replica_only(f"UPDATE {schema}.{t} SET s = 'x' WHERE id = 2")
    pair.on_master(
        f"CREATE TABLE {schema}.other (id INT PRIMARY KEY, n INT)", f"INSERT INTO {schema}.other VALUES (1, 0)"
    )
    bounds = spied_wait_bounds(monkeypatch)
    real_recheck = engine.recheck

    def replica_stopped_first(*args: Any, **kwargs: Any) -> Any:
        pair.replica.execute("STOP SLAVE SQL_THREAD")
        pair.master.execute(f"UPDATE {schema}.other SET n = 1")  # a position the replica will not reach
        bounds.clear()  # the recheck's waits only
        return real_recheck(*args, **kwargs)

    monkeypatch.setattr(engine, "recheck", replica_stopped_first)
    try:
        result = pair.audit(
            [f"{schema}.{t}" for t in tables], FAST.model_copy(update={"gtid_wait_s": 2, "recheck_rounds": 1})
        )
    finally:
        pair.replica.execute("START SLAVE SQL_THREAD")
        wait_link_up(pair.replica)
    assert bounds == [2.0, 1.0, 1.0], bounds
    assert result.findings == [] and result.metrics["uncovered_rows"] == 3


def test_a_wait_is_whole_again_once_the_replica_reaches_a_position(
    pair: Pair, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shortened wait lasts only while the replica stays behind: once one is reached, the next is whole."""
    from audit.local.mariadb_server import wait_link_up

    bounds = spied_wait_bounds(monkeypatch)
    pair.on_master(
        f"CREATE TABLE {schema}.other (id INT PRIMARY KEY, n INT)", f"INSERT INTO {schema}.other VALUES (1, 0)"
    )
    master, replica = connect_pair(MySQLEndpoint.from_url(pair.master_url), MySQLEndpoint.from_url(pair.replica_url))
    try:
        pair.replica.execute("STOP SLAVE SQL_THREAD")
        try:
            pair.master.execute(f"UPDATE {schema}.other SET n = 1")
            ahead = master.gtid_position()
            assert not replica.wait_for(ahead, 2) and not replica.wait_for(ahead, 2)
        finally:
            pair.replica.execute("START SLAVE SQL_THREAD")
            wait_link_up(pair.replica)
        assert replica.wait_for(ahead, 2) and replica.wait_for(ahead, 2)
    finally:
        master.close()
        replica.close()
    assert bounds == [2.0, 1.0, 1.0, 2.0], bounds
