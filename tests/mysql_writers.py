"""Writers for the mysql oracle under writes (tests/integration/test_mysql_oracle_writes.py): sessions
that write the master of a random table (tests/mysql_scenarios.py) while the audit runs, and the few
rows they never touch, where divergences are planted on the replica.

A keyed table's writer updates values (long TEXT/BLOB ones too, and bytes deep inside them), sets a
value and sets it back, deletes a key and inserts it again, moves rows to another key (another chunk),
respells case-insensitive keys (`'abc'` to `'ABC'`: the same key), inserts new keys, and writes
several rows in one transaction, now and then hundreds at once (the replica lags behind it). A keyless
table's writer inserts and deletes copies of its rows, changes one copy, sets one and sets it back.

Every statement names its rows (by key, or by every value and `LIMIT 1`), never a range: a range
would reach the rows only the replica holds, which replication (ROW format) then stops on. New keys
avoid the reserved ones (planted as extra rows on the replica) as the key's collation compares them;
a failed statement (a duplicate key, a deadlock) is rolled back and skipped: the oracle judges what
the tables hold once the writers stop, never what the writers meant.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pymysql

from tests.mysql_scenarios import KEY_SHAPES, Table, keys, literal, norm, value

MAX_COMMITS = 4000
"""Commits per writer: past them it stops (a full-speed writer binlogged 24 GB over a sweep of 40 seeds)."""

MARKS = {"n": 2_000_000_000, "s": "PROTECTED-", "d": Decimal("123456789.424242"), "dt": "1990-01-0{}"}
"""A protected keyless row's mark, by column: a value no writer writes (`value()` draws none of them)."""


@dataclass
class Guard:
    """What the writers leave alone: protected keys (as the collation compares them), reserved new keys."""

    protected: set[Any] = field(default_factory=set)
    reserved: set[Any] = field(default_factory=set)
    marked: list[list[Any]] = field(default_factory=list)
    """A keyless table's protected rows (their copies included)."""


def mark(table: Table, i: int) -> tuple[str, Any]:
    """(column, value) that tells the i-th protected row of a keyless table from every written one."""
    name = next(c for c in ("n", "s", "d", "dt") if c in table.names)
    base = MARKS[name]
    v = base + i if name in ("n", "d") else f"{base}{i}" if name == "s" else f"1990-01-{i + 1:02d} 00:00:00"
    return name, v


def protect(rng: random.Random, table: Table, guard: Guard, n: int) -> list[list[Any]]:
    """n rows the writers leave alone: for a keyed table, n of its keys; for a keyless one, n new marked
    rows (returned, to be inserted on the master); and, keyed, n new keys reserved for extra rows."""
    if not table.key:
        out = []
        for i in range(n):
            row = [value(rng, k) for _, _, k in table.columns]
            name, v = mark(table, i)
            row[table.names.index(name)] = v
            out += [row] * rng.choice([1, 1, 2])
        guard.marked += out
        return out
    width = len(table.key)
    current = [tuple(r[:width]) for r in table.rows]
    for k in rng.sample(current, min(n, len(current))):
        guard.protected.add(norm(table.shape, k))
    taken = {norm(table.shape, k) for k in current}
    for k in keys(rng, table.shape, n + len(current) + 5):
        if len(guard.reserved) >= n:
            break
        if norm(table.shape, k) not in taken:
            guard.reserved.add(norm(table.shape, k))
    return []


class TableWriter:
    """One session writing one table from a thread, until `stop` is set."""

    def __init__(self, server: Any, schema: str, table: Table, guard: Guard, seed: int, pace_s: float) -> None:
        self.server, self.schema, self.table, self.guard = server, schema, table, guard
        # a replica whose key is case-insensitive where the master's is not: new keys distinct under it too
        self.shape = "vci" if table.shape == "vbin" and table.variant == "key_collation" else table.shape
        self.rng = random.Random(seed)
        self.pace_s = pace_s
        self.t = f"`{schema}`.`{table.name}`"
        width = len(table.key)
        if table.key:
            self.rows = {
                norm(self.shape, tuple(r[:width])): list(r)
                for r in table.rows
                if norm(table.shape, tuple(r[:width])) not in guard.protected
            }
        self.bag = [list(r) for r in table.rows if r not in guard.marked]  # a keyless table's unmarked rows
        self.commits = 0
        self.failures = 0
        self.ops: dict[str, int] = {}

    # --- SQL pieces --------------------------------------------------------------------------------------
    def _kind(self, name: str) -> str:
        return self.table.kind(name)

    def _where_key(self, row: list[Any]) -> str:
        return " AND ".join(
            f"`{n}` = {literal(k, v)}"
            for (n, _, k), v in zip(KEY_SHAPES[self.table.shape], row[: len(self.table.key)], strict=True)
        )

    def _match(self, row: list[Any]) -> str:
        return " AND ".join(f"`{n}` <=> {literal(k, v)}" for (n, _, k), v in zip(self.table.columns, row, strict=True))

    def _insert(self, row: list[Any]) -> str:
        cols = ", ".join(f"`{c}`" for c in self.table.names)
        vals = ", ".join(literal(k, v) for (_, _, k), v in zip(self.table.columns, row, strict=True))
        return f"INSERT INTO {self.t} ({cols}) VALUES ({vals})"

    def _value_column(self) -> tuple[str, str] | None:
        width = len(self.table.key)
        cols = [(n, k) for n, _, k in self.table.columns[width:] if not (self.table.shape == "uniq" and n == "n")]
        return self.rng.choice(cols) if cols else None

    def _new_value(self, kind: str) -> Any:
        if kind in ("long_text", "long_bin") and self.rng.random() < 0.4:  # a value held as its digest
            n = self.rng.randint(8200, 12000)
            return "L" * n if kind == "long_text" else self.rng.randbytes(n)
        return value(self.rng, kind)

    def _new_key(self) -> tuple[Any, ...] | None:
        for k in keys(self.rng, self.table.shape, 3):
            nk, own = norm(self.shape, k), norm(self.table.shape, k)  # guarded keys are in the table's own form
            folded = {norm(self.shape, g) for g in self.guard.reserved | self.guard.protected}
            if own not in self.guard.reserved and nk not in folded and nk not in self.rows:
                return k
        return None

    def _new_row(self) -> list[Any] | None:
        k = self._new_key() if self.table.key else ()
        if k is None:
            return None
        width = len(k)
        row = list(k) + [value(self.rng, kind) for _, _, kind in self.table.columns[width:]]
        if self.table.shape == "uniq":  # its nullable UNIQUE column: NULL, never a value the replica holds
            row[self.table.names.index("n")] = None
        return row

    # --- transactions ------------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        conn = self.server.connect(admin=True, charset="utf8mb4")
        try:
            with conn.cursor() as cur:
                cur.execute("SET SESSION innodb_lock_wait_timeout = 2")
            # bounded: a writer at full speed binlogs gigabytes in a minute (long values, hundreds of rows)
            while not stop.is_set() and self.commits < MAX_COMMITS:
                op = self.rng.choice(self.OPS if self.table.key else self.BAG_OPS)
                txns = getattr(self, op)()
                for statements in txns or []:
                    self._commit(conn, statements, op)
                time.sleep(self.rng.uniform(0, self.pace_s))
        finally:
            conn.close()

    def _commit(self, conn: Any, statements: list[str], op: str) -> None:
        try:
            with conn.cursor() as cur:
                cur.execute("BEGIN")
                for s in statements:
                    cur.execute(s)
                cur.execute("COMMIT")
            self.commits += 1
            self.ops[op] = self.ops.get(op, 0) + 1
        except pymysql.MySQLError:
            self.failures += 1
            conn.rollback()

    OPS = (
        *("update", "update", "multi", "move_key", "delete_reinsert", "set_back", "set_back"),
        *("long", "respell", "insert", "delete", "big"),
    )
    BAG_OPS = ("dup", "delete_copy", "change_copy", "set_back_copy", "insert_copy", "big_copies")

    def _pick(self) -> list[Any] | None:
        return self.rows[self.rng.choice(list(self.rows))] if self.rows else None

    def _update_sql(self, row: list[Any], name: str, kind: str, v: Any) -> str:
        row[self.table.names.index(name)] = v
        return f"UPDATE {self.t} SET `{name}` = {literal(kind, v)} WHERE {self._where_key(row)}"

    def update(self) -> list[list[str]]:
        row, col = self._pick(), self._value_column()
        if row is None or col is None:
            return []
        return [[self._update_sql(row, *col, self._new_value(col[1]))]]

    def multi(self) -> list[list[str]]:
        out: list[str] = []
        for _ in range(self.rng.randint(2, 5)):
            for txn in getattr(self, self.rng.choice(["update", "insert", "delete", "move_key"]))():
                out += txn
        return [out]

    def big(self) -> list[list[str]]:
        """Hundreds of rows in one transaction, by key: the replica lags while it applies them."""
        col = self._value_column()
        if not self.rows or col is None:
            return []
        chosen = self.rng.sample(list(self.rows.values()), min(len(self.rows), self.rng.randint(50, 200)))
        return [[self._update_sql(r, *col, self._new_value(col[1])) for r in chosen]]

    def set_back(self) -> list[list[str]]:
        row, col = self._pick(), self._value_column()
        if row is None or col is None:
            return []
        old = row[self.table.names.index(col[0])]
        first = self._update_sql(row, *col, self._new_value(col[1]))
        return [[first], [self._update_sql(row, *col, old)]]

    def long(self) -> list[list[str]]:
        longs = [c for c in ("t", "b", "j") if c in self.table.names]
        row = self._pick()
        if not longs or row is None:
            return self.update()
        name = self.rng.choice(longs)
        if name == "b" and self.rng.random() < 0.5:  # one byte deep inside a held value: only its MD5 shows it
            expr = "INSERT(`b`, 9000, 1, IF(SUBSTRING(`b`, 9000, 1) = X'41', X'42', X'41'))"
            return [[f"UPDATE {self.t} SET `b` = {expr} WHERE {self._where_key(row)} AND LENGTH(`b`) > 9000"]]
        if name == "j":
            v: Any = '{"big": "' + "x" * self.rng.randint(8200, 10000) + '"}'
            return [[self._update_sql(row, name, "json", v)]]
        return [[self._update_sql(row, name, self._kind(name), self._new_value(self._kind(name)))]]

    def respell(self) -> list[list[str]]:
        """A case-insensitive (or padding) key column spelt otherwise: the same key, other bytes."""
        row = self._pick()
        if row is None or self.table.shape not in ("vci", "comp", "vbin"):
            return self.update()
        name = self.table.key[-1]
        i = self.table.names.index(name)
        old = row[i]
        new = old + " " if self.table.shape == "vbin" else old.swapcase()
        if self.table.shape == "vbin" and len(new) > 30:
            return []
        sql = f"UPDATE {self.t} SET `{name}` = {literal('str', new)} WHERE {self._where_key(row)}"
        row[i] = new
        return [[sql]]

    def insert(self) -> list[list[str]]:
        row = self._new_row()
        if row is None:
            return []
        self.rows[norm(self.shape, tuple(row[: len(self.table.key)]))] = row
        return [[self._insert(row)]]

    def delete(self) -> list[list[str]]:
        row = self._pick()
        if row is None:
            return []
        self.rows.pop(norm(self.shape, tuple(row[: len(self.table.key)])), None)
        return [[f"DELETE FROM {self.t} WHERE {self._where_key(row)}"]]

    def delete_reinsert(self) -> list[list[str]]:
        row = self._pick()
        if row is None:
            return []
        first = f"DELETE FROM {self.t} WHERE {self._where_key(row)}"
        if self.rng.random() < 0.5:  # the same values again, or other ones
            col = self._value_column()
            if col is not None:
                row[self.table.names.index(col[0])] = self._new_value(col[1])
        return [[first], [self._insert(row)]]

    def move_key(self) -> list[list[str]]:
        row, k = self._pick(), self._new_key()
        if row is None or k is None:
            return []
        width = len(self.table.key)
        sets = ", ".join(
            f"`{n}` = {literal(kind, v)}" for (n, _, kind), v in zip(KEY_SHAPES[self.table.shape], k, strict=True)
        )
        sql = f"UPDATE {self.t} SET {sets} WHERE {self._where_key(row)}"
        self.rows.pop(norm(self.shape, tuple(row[:width])), None)
        row[:width] = list(k)
        self.rows[norm(self.shape, k)] = row
        return [[sql]]

    # --- keyless -----------------------------------------------------------------------------------------
    def _copy(self) -> list[Any] | None:
        return self.rng.choice(self.bag) if self.bag else None

    def dup(self) -> list[list[str]]:
        row = self._copy()
        if row is None:
            return self.insert_copy()
        self.bag.append(list(row))
        return [[self._insert(row)] * self.rng.randint(1, 2)]

    def insert_copy(self) -> list[list[str]]:
        row = self._new_row()
        if row is None:
            return []
        self.bag.append(row)
        return [[self._insert(row)]]

    def delete_copy(self) -> list[list[str]]:
        row = self._copy()
        if row is None:
            return []
        self.bag.remove(row)
        return [[f"DELETE FROM {self.t} WHERE {self._match(row)} LIMIT 1"]]

    def _change(self, row: list[Any], name: str, kind: str, v: Any) -> str:
        sql = f"UPDATE {self.t} SET `{name}` = {literal(kind, v)} WHERE {self._match(row)} LIMIT 1"
        row[self.table.names.index(name)] = v
        return sql

    def _bag_column(self) -> tuple[str, str]:
        return self.rng.choice([(n, k) for n, _, k in self.table.columns if k not in ("float", "double")])

    def change_copy(self) -> list[list[str]]:
        row = self._copy()
        if row is None:
            return []
        name, kind = self._bag_column()
        return [[self._change(row, name, kind, self._new_value(kind))]]

    def set_back_copy(self) -> list[list[str]]:
        row = self._copy()
        if row is None:
            return []
        name, kind = self._bag_column()
        old = row[self.table.names.index(name)]
        return [[self._change(row, name, kind, self._new_value(kind))], [self._change(row, name, kind, old)]]

    def big_copies(self) -> list[list[str]]:
        out: list[str] = []
        for _ in range(self.rng.randint(5, 60)):
            for txn in getattr(self, self.rng.choice(["dup", "delete_copy", "change_copy"]))():
                out += txn
        return [out]


def stall(replica: Any, schema: str, table: Table, seed: int, stop: threading.Event) -> None:
    """A replica session that now and then holds a lock on a written row for up to 1.5 s: the replica's
    SQL thread waits on it, and falls behind the master while it does (no write: nothing binlogged)."""
    rng = random.Random(seed)
    conn = replica.connect(admin=True, charset="utf8mb4")
    try:
        while not stop.is_set():
            try:
                with conn.cursor() as cur:
                    cur.execute("BEGIN")
                    cur.execute(f"SELECT COUNT(*) FROM `{schema}`.`{table.name}` LOCK IN SHARE MODE")
                    time.sleep(rng.uniform(0.1, 1.5))
                    cur.execute("COMMIT")
            except pymysql.MySQLError:  # chosen as a deadlock's victim: the SQL thread goes on
                conn.rollback()
            time.sleep(rng.uniform(0.1, 1.0))
    finally:
        conn.close()


class Writers:
    """A TableWriter per table (two on some), in threads, from `start()` until `stop()`; `stalls`: tables
    whose replica rows a session locks now and then (see `stall`)."""

    def __init__(self, writers: list[TableWriter], replica: Any = None, stalls: tuple[Table, ...] = ()) -> None:
        self.writers = writers
        self.stop_event = threading.Event()
        self.threads = [threading.Thread(target=w.run, args=(self.stop_event,), daemon=True) for w in writers]
        for i, t in enumerate(stalls):
            schema = writers[0].schema
            args = (replica, schema, t, i, self.stop_event)
            self.threads.append(threading.Thread(target=stall, args=args, daemon=True))

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(30)

    @property
    def commits(self) -> int:
        return sum(w.commits for w in self.writers)
