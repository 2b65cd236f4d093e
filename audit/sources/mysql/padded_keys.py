"""Key columns one side's type pads or trims: such a table is compared as a multiset of rows.

A BINARY(n) holds a VARBINARY's 'ab' as 'ab' and n - 2 0x00 bytes; a CHAR holds a VARCHAR's 'a ' as 'a',
another key under a NO PAD collation. No key lookup undoes that ('ab' and 'ab\\0' are two VARBINARY
keys, one BINARY key), so the side that may hold such keys is asked whether it does (catalog.py plans
the table first, as if it did not).
"""

from __future__ import annotations

from collections.abc import Sequence

from audit.findings import Finding
from audit.sources.mysql.catalog import TableName, in_master_spelling, plan_table
from audit.sources.mysql.client import Server, TableGone
from audit.sources.mysql.sql import TEXT_TYPES, binary_length, pads_spaces, quote_ident, table_ref
from audit.sources.mysql.values import Column, TableDef, TablePlan

_SIDES = ("master", "replica")


def _padding(master: Column, replica: Column) -> tuple[int, str, str] | None:
    """When a key column's type on one side pads or trims what the other side's may hold: (0 master / 1
    replica, the side that may hold such keys; an SQL condition, `{k}` the column, true of one; why).

    A BINARY(n) pads a VARBINARY's (or a narrower BINARY's) 'ab' with n - 2 0x00 bytes; a CHAR drops
    the trailing spaces of a VARCHAR's 'a ', another key under a NO PAD collation (under PAD SPACE
    ones on both sides the key is compared without them: sql.column_expr)."""
    pads = (binary_length(master), binary_length(replica))
    if pads[0] != pads[1] and not {master.data_type, replica.data_type} - {"binary", "varbinary"}:
        n = max(p or 0 for p in pads)
        side = 0 if pads[0] != n else 1
        why = f"is BINARY({n}) on the {_SIDES[1 - side]} and holds keys shorter than {n} bytes on the {_SIDES[side]}"
        return side, f"LENGTH({{k}}) < {n}", f"{why}, which a BINARY pads with 0x00"
    types = (master.data_type, replica.data_type)
    texts = types[0] in TEXT_TYPES and types[1] in TEXT_TYPES and types[0] != types[1]
    if texts and "char" in types and not (pads_spaces(master) and pads_spaces(replica)):
        side = 1 if types[0] == "char" else 0
        why = f"is CHAR on the {_SIDES[1 - side]} and holds keys with trailing spaces on the {_SIDES[side]}"
        return side, "LENGTH({k}) <> LENGTH(TRIM(TRAILING ' ' FROM {k}))", f"{why}, which a CHAR drops"
    return None


def probe(
    servers: tuple[Server, Server],
    plans: Sequence[TablePlan],
    findings: Sequence[Finding],
    master: dict[TableName, TableDef],
    replica: dict[TableName, TableDef],
) -> list[TablePlan]:
    """The plans, a table whose key one side's type pads or trims (_padding) compared as a multiset instead.

    A VARBINARY key 'ab' reads 'ab' and six 0x00 bytes in a BINARY(8) copy (a NO PAD VARCHAR's 'a ' reads
    'a' in a CHAR): matched by key, each such row was a missing_row and an extra_row. Padding cannot be
    undone key by key: 'ab' and 'ab\\0' are two VARBINARY keys and one BINARY key. So the side that may
    hold such keys is asked whether it does (one query; a scan when it holds none): if so the table is
    a multiset of rows, each value in the form both types hold (sql.column_expr), and its
    schema_mismatch says why; if not, every key is the same on both sides and the table is compared by
    key as before (BINARY(16) UUIDs)."""
    by_table = {f.evidence.get("table"): f for f in findings if f.category == "schema_mismatch"}
    out = []
    for plan in plans:
        name = (plan.schema, plan.name)
        m, r = master[name], in_master_spelling(master[name], replica[name])
        m_cols, r_cols = {c.name: c for c in m.columns}, {c.name: c for c in r.columns}
        for k in plan.key:
            padding = _padding(m_cols[k], r_cols[k])
            if padding is None:
                continue
            side, condition, why = padding
            sql = f"SELECT 1 FROM {table_ref(*name)} WHERE {condition.format(k=quote_ident(k))} LIMIT 1"
            try:
                held = servers[side].query(sql, "looking for keys the other side's type pads or trims")
            except TableGone:
                break  # dropped since it was listed: the chunk reads report it
            if held:
                plan = plan_table(m, replica[name], keyless=True)
                by_table[plan.display].evidence["compared"] = f"as a multiset of rows: key column {k} {why}"
                break
        out.append(plan)
    return out
