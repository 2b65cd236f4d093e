"""An oracle for the mysql row audit, independent of it: random tables written on a master, divergences
planted on the replica alone, and what any sound audit of them must report, from both tables read whole
in plain Python (docs/mysql.md, "Rows").

Keyed tables are matched by key as the key's collation compares it ("Keys equal under their
collation"): text key columns by the server's WEIGHT_STRING of the value without trailing spaces (every
collation used here pads), other key columns by their text-protocol bytes. A key on the master only is a
`missing_row` (named by the master's spelling), on the replica only an `extra_row` (the replica's), on
both with other bytes in any column (the key's spelling included) a `row_mismatch` naming those columns.
A keyless table is a multiset of rows: the copies one side has beyond the other's.

The tables and divergences come from tests/mysql_scenarios.py.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pymysql

from tests.mysql_scenarios import BINARY_KINDS, HELD_BYTES, KEY_SHAPES, LONG_KINDS, SHOWN_CHARS, TEXT_KINDS, Table

# --- the oracle ------------------------------------------------------------------------------------------


def read_side(conn: pymysql.Connection[Any], schema: str, table: Table) -> list[tuple[Any, tuple[bytes | None, ...]]]:
    """(match key, row bytes) of every row: FLOAT read as DOUBLE (its text keeps 6 digits, the table
    holds more), text key columns' match key their collation's weight without trailing spaces."""
    exprs = [f"CAST(`{n}` AS DOUBLE)" if k == "float" else f"`{n}`" for n, _, k in table.columns]
    collated = table.matched_by == "collation"
    weights = [
        f"WEIGHT_STRING(TRIM(TRAILING ' ' FROM `{n}`))" if k in TEXT_KINDS and collated else f"`{n}`"
        for n, _, k in KEY_SHAPES[table.shape]
    ]
    with conn.cursor() as cur:
        cur.execute(f"SELECT {', '.join(exprs + weights)} FROM `{schema}`.`{table.name}`")
        rows = cur.fetchall()
    w = len(weights)
    return [(tuple(r[len(r) - w :]), tuple(r[: len(r) - w])) for r in rows]


def raw_connect(server: Any) -> pymysql.Connection[Any]:
    """A session reading every value as its text-protocol bytes (no decoding, no conversion)."""
    return server.connect(use_unicode=False, conv={}, charset="utf8mb4")


@dataclass
class Expected:
    master_rows: int
    replica_rows: int
    missing: Counter[Any]
    extra: Counter[Any]
    mismatch: dict[Any, list[str]]  # key -> differing columns


def expected(table: Table, master: list[Any], replica: list[Any]) -> Expected:
    if table.matched_by == "multiset":
        m, r = Counter(row for _, row in master), Counter(row for _, row in replica)
        shown: list[Counter[Any]] = [Counter(), Counter()]
        for out, surplus in zip(shown, (m - r, r - m), strict=True):
            for row, n in surplus.items():  # rows told apart by floats alone show alike: counted together
                out[_signature(table, row)] += n
        return Expected(len(master), len(replica), shown[0], shown[1], {})
    mk = {w: row for w, row in master}
    rk = {w: row for w, row in replica}
    assert len(mk) == len(master) and len(rk) == len(replica), "keys unique under their collation"
    n = len(table.key)
    missing = Counter(_key(table, mk[w][:n]) for w in mk.keys() - rk.keys())
    extra = Counter(_key(table, rk[w][:n]) for w in rk.keys() - mk.keys())
    mismatch = {
        _key(table, mk[w][:n]): [c for c, a, b in zip(table.names, mk[w], rk[w], strict=True) if a != b]
        for w in mk.keys() & rk.keys()
        if mk[w] != rk[w]
    }
    return Expected(len(master), len(replica), missing, extra, mismatch)


def _key(table: Table, raw: tuple[bytes | None, ...]) -> tuple[Any, ...]:
    out: list[Any] = []
    for (_, _, kind), v in zip(KEY_SHAPES[table.shape], raw, strict=True):
        assert v is not None
        text = v.decode(errors="surrogateescape")
        out.append(int(v) if kind == "int" else bytes(v) if kind == "bin" else Decimal(text) if kind == "dec" else text)
    return tuple(out)


def finding_key(table: Table, key: bytes) -> tuple[Any, ...]:
    """A finding's key (a JSON array: binary values as 0x<hex>) in the oracle's form."""
    out: list[Any] = []
    for (_, _, kind), v in zip(KEY_SHAPES[table.shape], json.loads(key), strict=True):
        out.append(bytes.fromhex(v[2:]) if kind == "bin" else Decimal(str(v)) if kind == "dec" else v)
    return tuple(out)


_HELD = re.compile(r"\((\d+) bytes, md5 ([0-9a-f]{32})\)")
_CUT = re.compile(r"(?s)(.*)\.\.\. \((\d+) characters\)")


def _signature(table: Table, raw: tuple[bytes | None, ...]) -> tuple[Any, ...]:
    """A keyless row as its finding shows it (long values as length and MD5, text cut at 200
    characters), floats left out (shown as the auditor reads them, which need not be their exact text)."""
    out: list[Any] = []
    for (_, _, kind), v in zip(table.columns, raw, strict=True):
        if kind in ("float", "double"):
            continue
        if v is None:
            out.append(None)
        elif kind in LONG_KINDS and len(v) > HELD_BYTES:
            out.append(("held", len(v), hashlib.md5(v).hexdigest()))
        elif kind in ("int", "bit"):
            out.append(int(v) if kind == "int" else int.from_bytes(v, "big"))
        else:
            text = "0x" + v.hex() if kind in BINARY_KINDS else v.decode()
            out.append(("cut", text[:SHOWN_CHARS], len(text)) if len(text) > SHOWN_CHARS else text)
    return tuple(out)


def shown_signature(table: Table, row: dict[str, Any]) -> tuple[Any, ...]:
    """A keyless finding's `detail.row` in the form of `_signature`."""
    out: list[Any] = []
    for name, _, kind in table.columns:
        v = row[name]
        if kind in ("float", "double"):
            continue
        if isinstance(v, str) and (m := _HELD.fullmatch(v)) and kind in LONG_KINDS:
            out.append(("held", int(m.group(1)), m.group(2)))
        elif isinstance(v, str) and (m := _CUT.fullmatch(v)):
            out.append(("cut", m.group(1), int(m.group(2))))
        else:
            out.append(str(v) if kind == "dec" and v is not None else v)
    return tuple(out)


def problems(table: Table, want: Expected, findings: list[Any], summary: dict[str, Any]) -> list[str]:
    """What the audit's findings for one table and its summary line get wrong against the oracle."""
    out = []
    got_missing: Counter[Any] = Counter()
    got_extra: Counter[Any] = Counter()
    got_mismatch: dict[Any, list[str]] = {}
    for f in findings:
        if f.category == "schema_mismatch" and table.variant != "same":
            continue
        if f.category not in ("missing_row", "extra_row", "row_mismatch"):
            out.append(f"unexpected {f.category}: {f.evidence}")
            continue
        if table.matched_by != "multiset":
            if f.key is None:
                out.append(f"{f.category} without a key")
                continue
            k = finding_key(table, f.key)
        else:
            k = shown_signature(table, f.evidence.get("row", {}))
        if f.category == "missing_row":
            got_missing[k] += int(f.count)
        elif f.category == "extra_row":
            got_extra[k] += int(f.count)
        else:
            if k in got_mismatch:
                out.append(f"row_mismatch {k} twice")
            got_mismatch[k] = list(f.evidence.get("columns", []))
    for what, got, exp in (("missing", got_missing, want.missing), ("extra", got_extra, want.extra)):
        if got != exp:
            out.append(f"{what}: audit-only {dict(got - exp)}, oracle-only {dict(exp - got)}")
    if got_mismatch != want.mismatch:
        diff = {k: (got_mismatch.get(k), want.mismatch.get(k)) for k in got_mismatch.keys() | want.mismatch.keys()}
        out.append(f"row_mismatch (audit, oracle): { {k: v for k, v in diff.items() if v[0] != v[1]} }")
    if (summary["master_rows"], summary["replica_rows"]) != (want.master_rows, want.replica_rows):
        got = f"{summary['master_rows']}/{summary['replica_rows']}"
        out.append(f"rows {got}, oracle {want.master_rows}/{want.replica_rows}")
    schema = sum(f.category == "schema_mismatch" for f in findings)
    if schema != (table.variant != "same"):
        out.append(f"{schema} schema_mismatch findings for a replica definition {table.variant!r}")
    clean = not (want.missing or want.extra or want.mismatch)
    if summary["equal"] != clean or summary["uncovered"]:
        out.append(f"equal={summary['equal']} uncovered={summary['uncovered']}, oracle equal={clean}")
    return [f"{table.name} ({table.shape}/{table.variant}, {len(table.rows)} rows): {p}" for p in out]
