"""Kind mysql: the repair plan applied to a real replica whose tables a migration or its own schema made
unlike the master's (a column only the replica has, children that cascade, triggers), then audited again:
the pair passes, and what the plan was not asked to change is as it was.

One MariaDB pair serves the module; each table is created on each side on its own (sql_log_bin = 0)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from audit.local.mariadb_server import mariadb_available
from tests.integration.mysql_pair import Pair, start_module_pair, statements

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not mariadb_available(), reason="mariadbd not installed (apt-get install mariadb-server)"),
]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    yield from start_module_pair(tmp_path_factory.mktemp("mysql-repair"))


@pytest.fixture()
def schema(pair: Pair) -> str:
    return pair.new_schema()


def test_plan_keeps_replica_only_columns_children_and_delete_triggers(pair: Pair, schema: str, tmp_path: Path) -> None:
    """The plan wrote every missing or changed row as `REPLACE INTO` the master's values: REPLACE deletes
    the replica's row and inserts a new one, so a column only the replica has (added after a migration)
    went back to its default on every changed row (a second audit passed all the same: the column is
    not compared), and the table's DELETE triggers fired for rows nobody deleted. The plan now UPDATEs
    the columns that differ and INSERTs missing rows: the replica-only column and the trigger's log are
    as they were, bar the one extra row deleted; a TIMESTAMP ON UPDATE CURRENT_TIMESTAMP is written with
    the master's value, not the repair's time; children under ON DELETE CASCADE stay (the plan's
    foreign_key_checks = 0 stops InnoDB's cascades: each table's rows are repaired by its own findings)."""
    p, c = f"{schema}.p", f"{schema}.c"
    at = "at TIMESTAMP NOT NULL DEFAULT '2024-01-01 00:00:00' ON UPDATE CURRENT_TIMESTAMP"
    parent = f"CREATE TABLE {{p}} (id INT PRIMARY KEY, v INT, note VARCHAR(20), {at}{{added}})"
    cascade = f"FOREIGN KEY (pid) REFERENCES {p} (id) ON DELETE CASCADE"
    child = f"CREATE TABLE {c} (id INT PRIMARY KEY, pid INT NOT NULL, w INT, {cascade})"
    load = (
        f"INSERT INTO {p} (id, v, note) SELECT seq, seq, CONCAT('n', seq) FROM {schema}.seq_1_to_50",
        f"INSERT INTO {c} SELECT seq, seq % 50 + 1, seq FROM {schema}.seq_1_to_100",
    )
    pair.master.execute("SET SESSION sql_log_bin = 0", parent.format(p=p, added=""), child, *load)
    replica_only = ", added INT NOT NULL DEFAULT 0"
    filled = f"UPDATE {p} SET added = id * 10, at = at"  # `at = at`: kept, not set to now
    pair.on_replica_only(parent.format(p=p, added=replica_only), child, *load, filled)
    pair.on_replica_only(
        f"UPDATE {p} SET v = -1, at = at WHERE id = 7",  # children 6 and 56
        f"UPDATE {p} SET note = 'x', at = at WHERE id = 8",
        f"DELETE FROM {p} WHERE id = 9",  # and, by cascade, its children 8 and 58
        f"INSERT INTO {p} (id, v, note, added) VALUES (1000, 1, 'extra', 5)",
        f"UPDATE {c} SET w = -1 WHERE id = 3",
        f"CREATE TABLE {schema}.gone (id INT)",
        f"CREATE TRIGGER {schema}.logged AFTER DELETE ON {p} FOR EACH ROW INSERT INTO {schema}.gone VALUES (OLD.id)",
    )
    first = pair.audit([p, c], repair_path=tmp_path / "fix.sql")
    assert sorted((f.category, f.evidence["table"], f.key) for f in first.findings) == [
        ("extra_row", p, b"[1000]"),
        ("missing_row", c, b"[58]"),
        ("missing_row", c, b"[8]"),
        ("missing_row", p, b"[9]"),
        ("row_mismatch", c, b"[3]"),
        ("row_mismatch", p, b"[7]"),
        ("row_mismatch", p, b"[8]"),
        ("schema_mismatch", p, None),
    ]

    pair.on_replica_only(*statements(tmp_path / "fix.sql"))

    again = pair.audit([p, c])
    assert [f.category for f in again.findings] == ["schema_mismatch"] and all(t["equal"] for t in again.tables)
    assert pair.replica.execute(f"SELECT id, added FROM {p} WHERE id IN (7, 8, 9) ORDER BY id") == [
        (7, 70),
        (8, 80),
        (9, 0),
    ]
    assert pair.replica.execute(f"SELECT COUNT(*) FROM {c}") == [(100,)]
    assert pair.replica.execute(f"SELECT id FROM {schema}.gone") == [(1000,)]


def test_plan_deletes_a_surplus_copy_whose_columns_a_migration_retyped(pair: Pair, schema: str, tmp_path: Path) -> None:
    """A keyless table whose columns a migration retyped (VARBINARY(4) into BINARY(4), FLOAT into DOUBLE)
    is compared in the form both types hold ('ab', the FLOAT's 1.100000023841858); the plan deleted a
    surplus copy by those values, `b <=> X'6162'`, which the BINARY's 'ab\\0\\0' never equals: nothing
    was deleted, the INSERT after it added a row, and the second audit found one more difference."""
    t = f"{schema}.bag"
    load = f"INSERT INTO {t} VALUES (X'6162', 1.1, 1), (X'6163', 2.5, 2), (X'6164', 0.1, 3)"
    pair.master.execute("SET SESSION sql_log_bin = 0", f"CREATE TABLE {t} (b VARBINARY(4), f FLOAT, n INT)", load)
    pair.on_replica_only(f"CREATE TABLE {t} (b BINARY(4), f DOUBLE, n INT)", load, f"UPDATE {t} SET n = 0 WHERE n = 1")
    first = pair.audit([t], repair_path=tmp_path / "fix.sql")
    assert sorted(f.category for f in first.findings) == ["extra_row", "missing_row", "schema_mismatch"]

    pair.on_replica_only(*statements(tmp_path / "fix.sql"))

    assert pair.replica.execute(f"SELECT COUNT(*) FROM {t}") == [(3,)]
    assert [f.category for f in pair.audit([t]).findings] == ["schema_mismatch"]


def test_plan_writes_a_binary_value_with_the_bytes_the_master_holds(pair: Pair, schema: str, tmp_path: Path) -> None:
    """A BINARY(4) on the master, VARBINARY(4) on the replica: values are compared without the 0x00
    padding the BINARY adds, and the plan wrote them in that form: the master's 'ab\\0\\0' became 'ab'
    on the replica (a second audit passed; the bytes an application reads differed). The plan now
    writes the master's n bytes, padding and all."""
    t = f"{schema}.bin"
    load = f"INSERT INTO {t} VALUES (1, X'6162'), (2, X'6364'), (3, X'65666768')"
    pair.master.execute("SET SESSION sql_log_bin = 0", f"CREATE TABLE {t} (id INT PRIMARY KEY, b BINARY(4))", load)
    pair.on_replica_only(f"CREATE TABLE {t} (id INT PRIMARY KEY, b VARBINARY(4))", load)
    pair.on_replica_only(f"UPDATE {t} SET b = X'7A' WHERE id = 1", f"DELETE FROM {t} WHERE id = 2")
    first = pair.audit([t], repair_path=tmp_path / "fix.sql")
    assert sorted(f.category for f in first.findings) == ["missing_row", "row_mismatch", "schema_mismatch"]

    pair.on_replica_only(*statements(tmp_path / "fix.sql"))

    assert pair.replica.execute(f"SELECT id, HEX(b) FROM {t} ORDER BY id") == [
        (1, "61620000"),
        (2, "63640000"),
        (3, "65666768"),
    ]
    assert [f.category for f in pair.audit([t]).findings] == ["schema_mismatch"]
