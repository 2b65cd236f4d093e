"""Random tables and replica-only divergences for the mysql oracle (tests/mysql_oracle.py): key shapes,
value columns with the values that trip row comparisons, sizes that cross chunk and fetch bounds, and
the replica definitions docs/mysql.md compares otherwise (another key collation, key order, no key).

Planting is loose on purpose (a keyless DELETE under a case-insensitive column may hit a row that only
equals the one meant): the oracle judges what the tables hold after it, never what was meant.
"""

from __future__ import annotations

import json
import random
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

# name -> (DDL, kind); a kind picks the value generator and how the oracle reads and shows values
VALUE_COLUMNS: dict[str, tuple[str, str]] = {
    "n": ("INT NULL", "int"),
    "s": ("VARCHAR(40) NULL", "str"),
    "t": ("TEXT NULL", "long_text"),
    "b": ("BLOB NULL", "long_bin"),
    "j": ("JSON NULL", "json"),
    "f": ("FLOAT NULL", "float"),
    "g": ("DOUBLE NULL", "double"),
    "bt": ("BIT(10) NULL", "bit"),
    "e": ("ENUM('a','b','c#') NULL", "enum"),
    "st": ("SET('x','y','z') NULL", "set"),
    "d": ("DECIMAL(20,6) NULL", "dec"),
    "dt": ("DATETIME(6) NULL", "dt"),
    "l": ("VARCHAR(20) CHARACTER SET latin1 NULL", "latin1"),
}
# key shape -> key columns (name, DDL, kind)
KEY_SHAPES: dict[str, list[tuple[str, str, str]]] = {
    "int": [("id", "INT NOT NULL", "int")],
    "neg": [("id", "INT NOT NULL", "int")],
    "bigu": [("id", "BIGINT UNSIGNED NOT NULL", "int")],
    "comp": [("a", "INT NOT NULL", "int"), ("k", "VARCHAR(20) NOT NULL", "str")],
    "vbin": [("k", "VARCHAR(30) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL", "str")],
    "vci": [("k", "VARCHAR(30) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL", "str")],
    # a legacy character set: MariaDB's row IN compared its 'é' with utf8mb4 literals byte for byte
    "l1comp": [
        ("a", "INT NOT NULL", "int"),
        ("k", "VARCHAR(20) CHARACTER SET latin1 COLLATE latin1_bin NOT NULL", "latin1"),
    ],
    "vbinary": [("k", "VARBINARY(16) NOT NULL", "bin")],
    "dec": [("k", "DECIMAL(20,6) NOT NULL", "dec")],
    "dt": [("k", "DATETIME(6) NOT NULL", "dt")],
    "uniq": [("u", "BIGINT NOT NULL", "int")],
    "none": [],
}
LONG_KINDS = {"long_text", "long_bin", "json"}
TEXT_KINDS = {"str", "latin1"}
"""Short text, a key's or a value's: collated, respelt, padded, NULL or empty."""
BINARY_KINDS = {"long_bin", "bin"}
HELD_BYTES = 8192  # the auditor's DIGESTED_BYTES, as docs/mysql.md states it
SHOWN_CHARS = 200


@dataclass
class Table:
    name: str
    shape: str
    columns: list[tuple[str, str, str]]  # (name, DDL, kind), key columns first
    rows: list[list[Any]] = field(default_factory=list)  # Python values, in column order
    variant: str = "same"
    """How the replica's definition differs (`VARIANTS`): how docs/mysql.md says rows are then matched."""

    @property
    def key(self) -> list[str]:
        return [c[0] for c in KEY_SHAPES[self.shape]]

    def ddl(self, schema: str) -> str:
        cols = [f"`{n}` {d}" for n, d, _ in self.columns]
        if self.shape == "uniq":  # a nullable UNIQUE first: not a key the auditor may use
            cols += ["UNIQUE KEY nu (n)" if "n" in self.names else "", "UNIQUE KEY uk (u)"]
        elif self.key:
            cols.append("PRIMARY KEY (" + ", ".join(f"`{k}`" for k in self.key) + ")")
        return f"CREATE TABLE `{schema}`.`{self.name}` (" + ", ".join(c for c in cols if c) + ")"

    @property
    def matched_by(self) -> str:
        """collation (one collation, key ranges), bytes ("compared by key digests": the key's bytes),
        multiset (no unique key on the replica)."""
        if not self.key or self.variant == "no_key":
            return "multiset"
        return "bytes" if self.variant == "key_collation" else "collation"

    def alter(self, schema: str, rng: random.Random) -> str | None:
        """The replica-only ALTER of the table's variant (None: the same definition)."""
        t = f"`{schema}`.`{self.name}`"
        if self.variant == "key_collation":
            name, ddl, _ = KEY_SHAPES[self.shape][-1]
            other = "utf8mb4_bin" if "general_ci" in ddl or "COLLATE" not in ddl else "utf8mb4_general_ci"
            return f"ALTER TABLE {t} MODIFY `{name}` VARCHAR({30 if name == 'k' and self.shape != 'comp' else 20}) " + (
                f"CHARACTER SET utf8mb4 COLLATE {other} NOT NULL"
            )
        if self.variant == "reordered":
            return f"ALTER TABLE {t} DROP PRIMARY KEY, ADD PRIMARY KEY (`k`, `a`)"
        if self.variant == "no_key":
            drop = "DROP INDEX uk" if self.shape == "uniq" else "DROP PRIMARY KEY"
            cols = ", ".join(f"`{k}`" for k in self.key)
            return f"ALTER TABLE {t} {drop}" + (f", ADD INDEX plain ({cols})" if rng.random() < 0.5 else "")
        return None

    @property
    def names(self) -> list[str]:
        return [c[0] for c in self.columns]

    def kind(self, name: str) -> str:
        return next(k for n, _, k in self.columns if n == name)


# --- values ----------------------------------------------------------------------------------------------

_WORDS = ["", "abc", "abc ", "Abc", "ABC", "😀x", "é", "a#b", "O'Brien", "back\\slash", "tab\tx", "z" * 40]
_LATIN1_WORDS = ["", "é", "É", "e", "abc ", "Ü#x", "O'Brien", "back\\slash", "ÿ" * 20]


def value(rng: random.Random, kind: str, *, nulls: bool = True) -> Any:
    if nulls and rng.random() < 0.12:
        return None
    if kind == "int":
        return rng.choice([0, -1, 1, rng.randint(-(2**31), 2**31 - 1)])
    if kind == "str":
        return rng.choice(_WORDS) if rng.random() < 0.6 else _text(rng, rng.randint(0, 40))
    if kind == "latin1":
        return rng.choice(_LATIN1_WORDS) if rng.random() < 0.6 else _text(rng, rng.randint(0, 20), "abé Ü#'ÿ")
    if kind == "long_text":
        return _text(rng, rng.randint(HELD_BYTES // 4 + 1, 5000)) if rng.random() < 0.1 else _text(rng, 30)
    if kind == "long_bin":
        n = rng.randint(HELD_BYTES + 1, 12000) if rng.random() < 0.1 else rng.randint(0, 300)
        return rng.randbytes(n)
    if kind == "json":
        if rng.random() < 0.05:
            return json.dumps({"big": "x" * rng.randint(HELD_BYTES, 10000)})
        return rng.choice(['{"a": 1}', '{"a":1}', "[1, null]", '"😀"', "null", f'{{"n": {rng.randint(0, 9)}}}'])
    if kind == "float":  # an exact FLOAT: its double text is what the table holds
        return struct.unpack("f", struct.pack("f", rng.uniform(-1e6, 1e6)))[0]
    if kind == "double":
        return rng.choice([0.0, -0.0, 0.1, 1e300, rng.uniform(-1e9, 1e9)])
    if kind == "bit":
        return rng.randint(0, 1023)
    if kind == "enum":
        return rng.choice(["a", "b", "c#"])
    if kind == "set":
        return ",".join(x for x in "xyz" if rng.random() < 0.5)
    if kind == "dec":
        return Decimal(rng.randint(-(10**19), 10**19)) / 10**6 if rng.random() < 0.5 else Decimal(rng.randint(-99, 99))
    if kind == "dt":
        return f"20{rng.randint(0, 38):02d}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} " + (
            f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}.{rng.randint(0, 999999):06d}"
        )
    if kind == "bin":
        return rng.randbytes(rng.randint(1, 12)) + rng.choice([b"", b"\x00", b"\xff"])
    raise ValueError(kind)


def _text(rng: random.Random, n: int, alphabet: str = "abcXYZ 09-_#'é😀") -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def literal(kind: str, v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bytes):
        return "X'" + v.hex() + "'"
    if kind == "float" or kind == "double":
        return repr(float(v)) if v == v else "NULL"
    if isinstance(v, int | Decimal):
        return str(v)
    return "_utf8mb4 X'" + str(v).encode().hex() + "'"  # every byte as written, whatever sql_mode


# --- keys ------------------------------------------------------------------------------------------------


def keys(rng: random.Random, shape: str, n: int) -> list[tuple[Any, ...]]:
    """n keys of the shape, distinct as the key's collation compares them (see `norm`)."""
    out: dict[Any, tuple[Any, ...]] = {}
    layout = rng.choice(["dense", "sparse", "skewed"])
    base = rng.randint(-(2**31), 2**31 - 10**6)
    while len(out) < n:
        i = len(out)
        if shape in ("int", "neg", "uniq"):
            lo = -(2**31) if shape == "neg" else 0
            if layout == "dense":
                k: tuple[Any, ...] = ((base if shape != "int" else 1) + i,)
            elif layout == "sparse":
                k = (rng.randint(lo, 2**31 - 1) if shape != "neg" else rng.randint(lo, -1),)
            else:  # most rows in one cluster, a few far away
                k = (base + rng.randint(0, n * 2),) if rng.random() < 0.9 else (rng.randint(lo, 2**31 - 1),)
        elif shape == "bigu":
            top = 2**64 - 1
            near_top = top - (i if layout == "dense" else rng.randint(0, n * 3))
            k = (near_top,) if rng.random() < 0.9 else (rng.randint(0, 2**63),)
        elif shape == "comp":
            k = (rng.randint(-3, max(1, n // 15)), _key_text(rng, ci=True))
        elif shape == "l1comp":
            k = (rng.randint(-3, max(1, n // 15)), _key_text(rng, ci=False, alphabet="aAbéÉü09#"))
        elif shape in ("vbin", "vci"):
            k = (_key_text(rng, ci=shape == "vci"),)
        elif shape == "vbinary":
            k = (value(rng, "bin", nulls=False),)
        elif shape == "dec":
            k = (value(rng, "dec", nulls=False),)
        elif shape == "dt":
            k = (value(rng, "dt", nulls=False),)
        else:
            raise ValueError(shape)
        out.setdefault(norm(shape, k), k)
    return list(out.values())


def _key_text(rng: random.Random, *, ci: bool, alphabet: str = "") -> str:
    # a case-insensitive key stays ASCII: its Python upper() is then the collation's equality
    alphabet = alphabet or ("aAbBcZ09-_" if ci else "aAbBcZ09-_é😀#")
    text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8)))
    return text + " " if rng.random() < 0.1 else text  # a trailing space: the same key under PAD SPACE


def norm(shape: str, key: tuple[Any, ...]) -> Any:
    if shape in ("vci", "comp"):
        return tuple(x.upper().rstrip(" ") if isinstance(x, str) else x for x in key)
    if shape == "vbin":
        return (key[0].rstrip(" "),)
    if shape == "l1comp":
        return (key[0], key[1].rstrip(" "))
    if shape == "dec":
        return (Decimal(key[0]).quantize(Decimal("0.000001")),)
    return key


# --- tables ----------------------------------------------------------------------------------------------


def variants(shape: str) -> list[str]:
    """The replica definitions a shape can take besides its own."""
    out = ["no_key"] if shape != "none" else []
    if shape in ("vci", "vbin", "comp"):  # not l1comp: 'é' and 'e' are one key in the other collation
        out.append("key_collation")
    if shape in ("comp", "l1comp"):
        out.append("reordered")
    return out


def vary_replica(
    rng: random.Random, schema: str, table: Table, on_replica: Callable[[str], None], chance: float
) -> None:
    """With `chance`, the replica's definition of `table` made another of its variants (compared by key
    digests or as a multiset, as docs/mysql.md says); one the replica refuses (a collation under which two
    keys are one) leaves it as it was."""
    if variants(table.shape) and rng.random() < chance:
        table.variant = rng.choice(variants(table.shape))
        try:
            on_replica(str(table.alter(schema, rng)))
        except Exception:
            table.variant = "same"


def random_table(rng: random.Random, name: str, shape: str | None = None, n: int | None = None) -> Table:
    shape = shape or rng.choice(list(KEY_SHAPES))
    chosen = rng.sample(sorted(VALUE_COLUMNS), rng.randint(2, 6))
    if shape == "uniq" and "n" not in chosen:
        chosen.append("n")
    if shape == "none" and not {"n", "s", "d", "dt"} & set(chosen):
        chosen.append("n")  # a keyless row is told apart by what shows in findings, not by floats alone
    columns = [*KEY_SHAPES[shape], *((c, *VALUE_COLUMNS[c]) for c in chosen)]
    if n is None:
        n = rng.choice([0, 1, 2, 7, 49, 51, 120, 401, 800, 1500, 3000])
    table = Table(name, shape, columns)
    key_list = keys(rng, shape, n) if shape != "none" else [()] * n
    used_n: set[int] = set()
    for k in key_list:
        row = list(k) + [value(rng, kind) for _, _, kind in columns[len(k) :]]
        if shape == "uniq":  # its nullable UNIQUE column: distinct or NULL
            i = table.names.index("n")
            if row[i] in used_n:
                row[i] = None
            elif row[i] is not None:
                used_n.add(row[i])
        table.rows.append(row)
    if shape == "none" and table.rows:  # a multiset: some rows twice or more
        table.rows += [list(rng.choice(table.rows)) for _ in range(rng.randint(0, max(1, n // 10)))]
    return table


def inserts(schema: str, table: Table, batch: int = 200) -> list[str]:
    out = []
    cols = ", ".join(f"`{c}`" for c in table.names)
    for i in range(0, len(table.rows), batch):
        values = ", ".join(
            "(" + ", ".join(literal(k, v) for (_, _, k), v in zip(table.columns, row, strict=True)) + ")"
            for row in table.rows[i : i + batch]
        )
        out.append(f"INSERT INTO `{schema}`.`{table.name}` ({cols}) VALUES {values}")
    return out


# --- divergences (replica only) -----------------------------------------------------------------------------


def plant(rng: random.Random, schema: str, table: Table, events: int) -> tuple[list[str], list[str]]:
    """Statements that make the replica's table differ, and what they meant (for reports)."""
    t, sql, notes = f"`{table.name}`", [f"USE `{schema}`"], []
    n = len(table.rows)
    order = ", ".join(f"`{k}`" for k in table.key)
    using = "(" + order + ")"

    def at(offset: int, count: int = 1, where: str = "") -> str:
        cond = f"WHERE {where} " if where else ""
        return f"JOIN (SELECT {order} FROM {t} {cond}ORDER BY {order} LIMIT {count} OFFSET {offset}) AS p USING {using}"

    for _ in range(events):
        ops = ["delete", "extra", "change", "null_empty", "space", "case", "deep_byte", "first_last", "run"]
        if not table.key:
            ops = ["delete_copy", "dup", "extra_row", "change_copy"]
        if table.shape in ("vci", "comp", "vbin", "l1comp"):
            ops.append("respell_key")
        op = rng.choice(ops)
        value_cols = [c for c in table.columns if c[0] not in table.key]
        if op == "extra" or op == "extra_row" or n == 0:
            row = [value(rng, k) for _, _, k in table.columns]
            if table.key:
                row[: len(table.key)] = keys(rng, table.shape, 1)[0]
            values = ", ".join(literal(k, v) for (_, _, k), v in zip(table.columns, row, strict=True))
            sql.append(f"INSERT IGNORE INTO {t} VALUES ({values})")  # IGNORE: a key it may already hold
            notes.append(f"extra {row[: len(table.key)]}")
        elif op == "delete":
            sql.append(f"DELETE t0 FROM {t} AS t0 {at(rng.randrange(n))}")
            notes.append("delete one")
        elif op == "first_last":
            sql.append(f"DELETE FROM {t} ORDER BY {order} {rng.choice(['', 'DESC'])} LIMIT {rng.randint(1, 3)}")
            notes.append("delete first/last")
        elif op == "run":  # adjacent rows, often across a chunk's bounds (50..400 rows each)
            size = rng.randint(2, 120)
            sql.append(f"DELETE t0 FROM {t} AS t0 {at(rng.randrange(n), size)}")
            notes.append(f"delete run of {size}")
        elif op in ("change", "null_empty", "space", "case", "deep_byte"):
            name, _, kind = rng.choice(value_cols)
            c = f"t0.`{name}`"
            where = ""
            if op == "change":
                expr = literal(kind, value(rng, kind))
            elif op == "null_empty" and kind in (*TEXT_KINDS, "long_text"):
                expr = f"IF({c} IS NULL, '', NULL)"
            elif op == "space" and kind in (*TEXT_KINDS, "long_text"):
                expr = f"CONCAT({c}, ' ')"
            elif op == "case" and kind in (*TEXT_KINDS, "long_text"):
                expr = f"IF(BINARY UPPER({c}) = BINARY {c}, LOWER({c}), UPPER({c}))"
            elif op == "deep_byte" and "b" in table.names:
                name, c, where = "b", "t0.`b`", "LENGTH(`b`) > 9000"
                expr = f"INSERT({c}, 9000, 1, IF(SUBSTRING({c}, 9000, 1) = X'41', X'42', X'41'))"
            else:
                expr = literal(kind, value(rng, kind))
            offset = rng.randrange(3) if where else rng.randrange(n)
            sql.append(f"UPDATE IGNORE {t} AS t0 {at(offset, 1, where)} SET {c} = {expr}")
            notes.append(f"{op} {name}")
        elif op == "respell_key":
            k = f"t0.`{table.key[-1]}`"
            expr = rng.choice([f"IF(BINARY UPPER({k}) = BINARY {k}, LOWER({k}), UPPER({k}))", f"CONCAT({k}, ' ')"])
            if table.shape in ("vbin", "l1comp"):
                expr = f"CONCAT({k}, ' ')"  # a _bin collation pads: the same key to the replica's index
            sql.append(f"UPDATE IGNORE {t} AS t0 {at(rng.randrange(n))} SET {k} = {expr}")
            notes.append("respell key")
        elif op == "delete_copy" or op == "change_copy":
            row = rng.choice(table.rows)
            match = " AND ".join(f"`{c}` <=> {literal(k, v)}" for (c, _, k), v in zip(table.columns, row, strict=True))
            if op == "delete_copy":
                sql.append(f"DELETE FROM {t} WHERE {match} LIMIT 1")
            else:
                name, _, kind = rng.choice(table.columns)
                sql.append(f"UPDATE {t} SET `{name}` = {literal(kind, value(rng, kind))} WHERE {match} LIMIT 1")
            notes.append(op)
        elif op == "dup":
            row = rng.choice(table.rows) if table.rows else [value(rng, k) for _, _, k in table.columns]
            values = ", ".join(literal(k, v) for (_, _, k), v in zip(table.columns, row, strict=True))
            sql.append(f"INSERT INTO {t} VALUES " + ", ".join([f"({values})"] * rng.randint(1, 3)))
            notes.append("duplicate")
    return sql, notes
