"""What each side holds (information_schema), which tables to audit, and how to compare each one.

A table's chunking key is its PRIMARY KEY, else its first UNIQUE key whose columns are all NOT NULL
and unprefixed (fewest columns first), taken only when the replica holds a unique key over the same
columns too (in any order); without one the table is compared as a multiset. When no index of the
replica starts with the key's first column (each chunk would scan the replica's table) or a key column
sorts differently there (another collation), it is compared by key digests (unordered.py).
Definitions are compared column by column (type, nullability, character set, collation, generated):
a difference is a `schema_mismatch` and the rows are still compared over the columns both sides have,
each normalised to a form both definitions share (sql.column_expr).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import replace

from audit.errors import ConfigError
from audit.findings import Finding
from audit.sources.mysql.client import Server, TableGone, decode_texts
from audit.sources.mysql.endpoint import SYSTEM_SCHEMAS, TablePattern
from audit.sources.mysql.sql import column_expr, key_order, literal, may_hold_separator, table_ref
from audit.sources.mysql.values import Column, SideSql, TableDef, TablePlan, UniqueKey

TableName = tuple[str, str]
_TABLE_TYPES = ("BASE TABLE", "SYSTEM VERSIONED")


def _in_list(values: Iterable[str]) -> str:
    return "(" + ", ".join(literal(v) for v in values) + ")"


def list_tables(server: Server) -> dict[TableName, int]:
    """Every base table outside the system schemas, with InnoDB's row estimate."""
    rows = server.query(
        "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_ROWS FROM information_schema.TABLES "
        f"WHERE TABLE_TYPE IN {_in_list(_TABLE_TYPES)} AND TABLE_SCHEMA NOT IN {_in_list(sorted(SYSTEM_SCHEMAS))}",
        "listing tables",
    )
    out = {}
    for schema, name, estimate in (decode_texts(r) for r in rows):
        assert schema is not None and name is not None
        out[(schema, name)] = int(estimate or 0)
    return out


def folds_case(server: Server) -> bool:
    """Whether the server compares schema and table names case-insensitively (lower_case_table_names
    1, stored in lower case, or 2, as created)."""
    return server.text("SELECT @@lower_case_table_names", "reading lower_case_table_names") not in ("", "0")


Spellings = dict[TableName, TableName]
"""A table's name as the pair spells it -> as one server spells it, where the two differ."""


def align_names(
    master: dict[TableName, int], replica: dict[TableName, int], folds: tuple[bool, bool]
) -> tuple[dict[TableName, int], dict[TableName, int], Spellings, Spellings]:
    """Both sides' tables under one spelling, and each side's own spelling where it differs.

    A server with lower_case_table_names (`folds`) lists the master's `Shop.Orders` as `shop.orders`:
    a migration onto it made the table a missing_table (and an extra_table), its rows never compared.
    A name such a side spells otherwise is taken in the other side's spelling when they match but for
    case: the one a case-sensitive server needs (the master's when both fold); the folding side accepts
    it in its statements, and its information_schema is read in its own spelling (load_definitions)."""
    if not any(folds):
        return master, replica, {}, {}
    # the side whose names are renamed: one that folds, the master only when the replica does not
    rename_master = folds[0] and not folds[1]
    source, target = (replica, master) if rename_master else (master, replica)
    by_lower = {(s.lower(), t.lower()): (s, t) for s, t in source}
    renamed: dict[TableName, int] = {}
    own: Spellings = {}
    for name, estimate in target.items():
        pair_name = by_lower.get((name[0].lower(), name[1].lower()), name)
        renamed[pair_name] = estimate
        if pair_name != name:
            own[pair_name] = name
    return (renamed, replica, own, {}) if rename_master else (master, renamed, {}, own)


def select_tables(
    patterns: Sequence[TablePattern],
    master: Iterable[TableName],
    replica: Iterable[TableName],
    field: str = "tables",
    *,
    fold: bool = False,
) -> list[TableName]:
    """The tables the patterns name on either side, in order; ConfigError for a name no side has.
    `fold` (a side with lower_case_table_names): a pattern no name matches as spelt may match but for
    case (`shop.orders` as the folding master lists it, the pair spelling it `Shop.Orders`)."""
    known = sorted(set(master) | set(replica))
    if not patterns:
        return known
    chosen: dict[TableName, None] = {}
    for i, pattern in enumerate(patterns):
        hits = [t for t in known if pattern.matches(*t)]
        if not hits and fold:
            lower = replace(pattern, schema=pattern.schema.lower(), table=pattern.table.lower())
            hits = [t for t in known if lower.matches(t[0].lower(), t[1].lower())]
        if not hits:
            what = "matches no table" if pattern.is_glob else "does not exist (or is not visible to the auditor)"
            raise ConfigError(f"{field}[{i}]: {pattern.text} {what} on the master or the replica")
        chosen.update(dict.fromkeys(hits))
    return list(chosen)


def probe_missing(servers: Sequence[Server], patterns: Sequence[TablePattern], visible: set[TableName]) -> None:
    """A table named outright that no side lists: SourceError if the auditor may not read it (MySQL and
    MariaDB hide such tables from information_schema), ConfigError if it is no base table (a VIEW or a
    SEQUENCE: it was said not to exist), else left to select_tables (does not exist)."""
    for i, pattern in enumerate(patterns):
        if pattern.is_glob or (pattern.schema, pattern.table) in visible:
            continue
        for server in servers:
            readable = _probe(server, (pattern.schema, pattern.table))
            kind = _table_type(server, (pattern.schema, pattern.table)) if readable else None
            # readable but not listed: a VIEW or SEQUENCE, or a base table under a case-folding server
            # (lower_case_table_names), found by another spelling, which select_tables matches as such
            if kind in NOT_ROWS:
                raise ConfigError(
                    f"tables[{i}]: {pattern.text} is a {kind} on the {server.side}: only base tables are "
                    "compared (a view's rows are its base tables', a sequence's state is not rows)"
                )


NOT_ROWS = ("VIEW", "SEQUENCE")
"""information_schema's TABLE_TYPEs that are no base table: named in `tables:`, refused as such."""


def _table_type(server: Server, name: TableName) -> str | None:
    row = server.one(
        f"SELECT TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = {literal(name[0])} "
        f"AND TABLE_NAME = {literal(name[1])}",
        "reading a table's type",
    )
    return str(decode_texts(row)[0]) if row else None


def probe_one_sided(
    servers: tuple[Server, Server], names: Sequence[TableName], listed: tuple[Iterable[TableName], Iterable[TableName]]
) -> None:
    """A table only one side lists is looked for on the other: SourceError when the auditor may not
    read it there (hidden from information_schema, it would otherwise be called missing_table or
    extra_table), else it is absent there indeed."""
    for server, seen in zip(servers, (set(listed[0]), set(listed[1])), strict=True):
        for name in names:
            if name not in seen:
                _probe(server, name)


def _probe(server: Server, name: TableName) -> bool:
    """Read `name` (no row): SourceError when the auditor may not, False when it does not exist there."""
    try:
        server.query(f"SELECT 1 FROM {table_ref(*name)} LIMIT 0", "reading a table")
    except TableGone:
        return False  # no such table there
    return True


def load_definitions(
    server: Server, names: Sequence[TableName], estimates: dict[TableName, int], own: Spellings | None = None
) -> dict[TableName, TableDef]:
    """Columns and usable unique keys of `names` (absent ones are left out); `own`: the server's own
    spelling of a name the pair spells otherwise (align_names), which its information_schema shows."""
    own = own or {}
    back = {own.get(n, n): n for n in names}
    schemas = sorted({s for s, _ in back})
    if not schemas:
        return {}
    wanted = set(back)
    columns: dict[TableName, list[Column]] = {}
    for row in server.dicts(  # `*`: GENERATION_EXPRESSION is missing before MySQL 5.7 / MariaDB 10.2
        f"SELECT * FROM information_schema.COLUMNS WHERE TABLE_SCHEMA IN {_in_list(schemas)} "
        "ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION",
        "reading column definitions",
    ):
        table = (str(row["TABLE_SCHEMA"]), str(row["TABLE_NAME"]))
        if table in wanted:
            columns.setdefault(table, []).append(_column(row))
    indexes = _indexes(server, schemas, wanted)
    keys = _unique_keys(indexes, columns)
    indexed = _leading_columns(indexes)
    return {
        back[t]: TableDef(
            *back[t], tuple(cols), tuple(keys.get(t, ())), estimates.get(back[t], 0), indexed.get(t, frozenset())
        )
        for t, cols in columns.items()
    }


Index = list[dict[str, str | None]]


_GENERATED = re.compile(r"\b(?:VIRTUAL|STORED|PERSISTENT)\b")
"""EXTRA of a generated column: `VIRTUAL GENERATED`, `STORED GENERATED` (MariaDB before 10.2:
`VIRTUAL`, `PERSISTENT`). Not MySQL 8's `DEFAULT_GENERATED`, a column with an expression default
(`created_at ... DEFAULT CURRENT_TIMESTAMP`): taken for generated, it was never compared."""


def _column(row: dict[str, str | None]) -> Column:
    generated = _GENERATED.search((row.get("EXTRA") or "").upper()) is not None
    return Column(
        name=str(row["COLUMN_NAME"]),
        data_type=(row.get("DATA_TYPE") or "").lower(),
        column_type=row.get("COLUMN_TYPE") or "",
        nullable=row.get("IS_NULLABLE") == "YES",
        charset=row.get("CHARACTER_SET_NAME"),
        collation=row.get("COLLATION_NAME"),
        generated=generated,
        # generated columns are not compared as data (a repair cannot write them): their expression is
        expression=(row.get("GENERATION_EXPRESSION") or None) if generated else None,
    )


def _indexes(server: Server, schemas: list[str], wanted: set[TableName]) -> dict[tuple[str, str, str], Index]:
    """Every index of the wanted tables, by (schema, table, index): its STATISTICS rows in column order."""
    rows = server.dicts(
        f"SELECT * FROM information_schema.STATISTICS WHERE TABLE_SCHEMA IN {_in_list(schemas)} "
        "ORDER BY TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX",
        "reading indexes",
    )
    parts: dict[tuple[str, str, str], Index] = {}
    for r in rows:
        t = (str(r["TABLE_SCHEMA"]), str(r["TABLE_NAME"]))
        if t in wanted:
            parts.setdefault((*t, str(r["INDEX_NAME"])), []).append(r)
    return parts


def _ignored(cols: Index) -> bool:
    """An index the optimizer may not use: MariaDB's IGNORED, MySQL 8's invisible (IS_VISIBLE NO, as a
    DBA leaves one before dropping it), which FORCE INDEX names in an error that stopped the audit."""
    first = cols[0]
    return str(first.get("IGNORED") or "NO").upper() == "YES" or str(first.get("IS_VISIBLE") or "YES").upper() == "NO"


def _leading_columns(indexes: dict[tuple[str, str, str], Index]) -> dict[TableName, frozenset[str]]:
    out: dict[TableName, set[str]] = {}
    for (schema, table, _), cols in indexes.items():
        if cols[0]["COLUMN_NAME"] is not None and not _ignored(cols):
            out.setdefault((schema, table), set()).add(str(cols[0]["COLUMN_NAME"]))
    return {t: frozenset(c) for t, c in out.items()}


def _unique_keys(
    indexes: dict[tuple[str, str, str], Index], columns: dict[TableName, list[Column]]
) -> dict[TableName, list[UniqueKey]]:
    out: dict[TableName, list[UniqueKey]] = {}
    for (schema, table, index), cols in indexes.items():
        if str(cols[0].get("NON_UNIQUE")) != "0":
            continue
        by_name = {c.name: c for c in columns.get((schema, table), [])}
        names = tuple(str(c["COLUMN_NAME"]) for c in cols if c["COLUMN_NAME"] is not None)
        usable = (
            len(names) == len(cols)
            and all(c.get("SUB_PART") in (None, "") for c in cols)
            and not _ignored(cols)
            and all(n in by_name and not by_name[n].nullable for n in names)
        )
        if usable:
            out.setdefault((schema, table), []).append(UniqueKey(index, names, index == "PRIMARY"))
    for keys in out.values():
        keys.sort(key=lambda k: (not k.primary, len(k.columns), k.index))
    return out


# --- comparing the two definitions ----------------------------------------------------------------------


def in_master_spelling(master: TableDef, replica: TableDef) -> TableDef:
    """The replica's definition with each column (and key column) named as the master names it.

    Column names never depend on case on either server: a migration tool that wrote `name` for the
    master's `Name` made them two columns, one missing and one extra, its values never compared (and a
    table whose every column changed case was compared over no column: an SQL syntax error)."""
    spelt = {c.name.lower(): c.name for c in master.columns}

    def name(n: str) -> str:
        return spelt.get(n.lower(), n)

    return replace(
        replica,
        columns=tuple(replace(c, name=name(c.name)) for c in replica.columns),
        keys=tuple(replace(k, columns=tuple(name(n) for n in k.columns)) for k in replica.keys),
        indexed=frozenset(name(n) for n in replica.indexed),
    )


def _schema_mismatch(master: TableDef, replica: TableDef) -> Finding | None:
    spelt = {c.name.lower(): c.name for c in replica.columns}
    replica = in_master_spelling(master, replica)
    m_cols = {c.name: c for c in master.columns}
    r_cols = {c.name: c for c in replica.columns}
    differ: dict[str, dict[str, object]] = {}
    for name in [*m_cols, *(n for n in r_cols if n not in m_cols)]:
        m, r = m_cols.get(name), r_cols.get(name)
        renamed = m is not None and r is not None and spelt[name.lower()] != name
        if m is None or r is None or renamed or m.definition() != r.definition():
            differ[name] = {"master": m.definition() if m else None, "replica": r.definition() if r else None}
        if m is not None and r is not None and renamed:  # one column, its name spelt in another case
            differ[name] = {
                "master": {**m.definition(), "name": name},
                "replica": {**r.definition(), "name": spelt[name.lower()]},
            }
    m_key = master.keys[0].columns if master.keys else None
    r_key = replica.keys[0].columns if replica.keys else None
    if not differ and m_key == r_key:
        return None
    evidence: dict[str, object] = {"table": master.display, "columns": sorted(differ), "definitions": differ}
    if m_key != r_key:
        evidence["key"] = {"master": m_key, "replica": r_key}
    return Finding("rows", "schema_mismatch", count=len(differ), evidence=evidence)


def _indexed(replica: TableDef, key: UniqueKey) -> bool:
    return key.columns[0] in replica.indexed or any(k.columns[0] == key.columns[0] for k in replica.keys)


def _replica_index(replica: TableDef, key: tuple[str, ...]) -> str | None:
    return next((k.index for k in replica.keys if k.columns == key), None)


def _shared_key(master: TableDef, replica: TableDef, common: set[str]) -> UniqueKey | None:
    """The master's first key that is unique on the replica too, over the same columns in any order.

    A key only the master enforces matched a replica's duplicate rows to one (a dict by key): a second
    copy of a row on a replica whose primary key a migration had turned into a plain index was never
    reported; such a table is a multiset. A key the replica holds in another column order (PRIMARY KEY
    (b, a) for (a, b)) still identifies each row: it is compared by key digests (unordered.py)."""
    for key in master.keys:
        if set(key.columns) <= common and any(set(k.columns) == set(key.columns) for k in replica.keys):
            return key
    return None


def _key_charset(column: Column) -> tuple[str, str] | None:
    """The character set and collation key values are converted to before they are compared with
    `column` (sql.key_literal), when it is not utf8mb4, the session's: a key from the other side may
    hold characters it cannot ('😀' into latin1), and MariaDB's `(a, b) IN ((..), (..))` compares a
    latin1 column with utf8mb4 literals byte for byte (10.11: 'é' never matched, so a differing row's
    key found no row on either side and the row was taken for equal: no finding)."""
    if column.charset is None or column.charset == "utf8mb4":
        return None
    return column.charset, column.collation or f"{column.charset}_bin"


def plan_table(master: TableDef, replica: TableDef, *, keyless: bool = False) -> TablePlan:
    """The comparison of one table present on both sides (over the columns they share); `keyless`:
    as a multiset of rows whatever keys they hold (padded_keys.py)."""
    signatures = (master.signature(), replica.signature())
    replica = in_master_spelling(master, replica)
    r_cols = {c.name: c for c in replica.columns}
    common = tuple(
        # nullable on either side, so that both sides hash the same NULL flags
        replace(c, nullable=c.nullable or r_cols[c.name].nullable)
        for c in master.columns
        # a column the replica generates follows from the others (and no repair can write it); one the
        # master generates and the replica stores (a migration that materialised it) may drift there
        if c.name in r_cols and not r_cols[c.name].generated
    )
    shared = None if keyless else _shared_key(master, replica, {c.name for c in common})
    key = shared.columns if shared else ()
    # the master's chunk bounds cut the replica's rows elsewhere when a key column sorts differently
    # there, and chunking by a key no index of the replica leads with would scan its whole table once
    # per chunk (a 200k-row table: 80M rows read): compared by key digests instead, in whole-table scans
    m_cols = {c.name: c for c in master.columns}
    collated = all(key_order(m_cols[k]) == key_order(r_cols[k]) for k in key)
    ranges = shared is not None and _indexed(replica, shared) and collated
    m_exprs = tuple(column_expr(c, r_cols[c.name], key=c.name in key) for c in common)
    r_exprs = tuple(column_expr(r_cols[c.name], c, key=c.name in key) for c in common)
    m_casts = tuple(_key_charset(m_cols[k]) for k in key)
    r_casts = tuple(_key_charset(r_cols[k]) for k in key)
    return TablePlan(
        schema=master.schema,
        name=master.name,
        columns=common,
        key=key,
        master=SideSql(m_exprs, shared.index if shared and ranges else None, m_casts),
        replica=SideSql(r_exprs, _replica_index(replica, key) if ranges else None, r_casts),
        rows_estimate=max(master.rows_estimate, replica.rows_estimate),
        signatures=signatures,
        ranges=ranges,
        collated=collated,
        # both sides' rows hash with the same length fields: those either side's definition needs
        separators=frozenset(
            c.name for c in common if may_hold_separator(r_cols[c.name]) and not may_hold_separator(c)
        ),
    )


def _how_compared(plan: TablePlan, master: TableDef, replica: TableDef) -> str | None:
    """What a schema_mismatch says of how the rows were compared, when not by key ranges."""
    if not plan.columns:
        return "not compared: no column in common"
    if not plan.key:
        return "as a multiset of rows: the replica holds no unique key over the master's key" if master.keys else None
    if plan.ranges:
        return None
    replica = in_master_spelling(master, replica)
    m_cols, r_cols = {c.name: c for c in master.columns}, {c.name: c for c in replica.columns}
    if any(key_order(m_cols[k]) != key_order(r_cols[k]) for k in plan.key):
        return "by key digests, without key ranges: the key sorts differently"
    return "by key digests, without key ranges: no index of the replica starts with the key's first column"


def compare_catalogs(
    names: Sequence[TableName], master: dict[TableName, TableDef], replica: dict[TableName, TableDef]
) -> tuple[list[TablePlan], list[Finding]]:
    """Plans for the tables both sides hold; missing_table / extra_table / schema_mismatch findings."""
    plans: list[TablePlan] = []
    findings: list[Finding] = []
    for t in names:
        m, r = master.get(t), replica.get(t)
        shown = f"{t[0]}.{t[1]}"
        if m is None and r is None:
            continue  # dropped between listing and reading: nothing left to compare
        if r is None:
            assert m is not None
            findings.append(
                Finding("rows", "missing_table", evidence={"table": shown, "rows_estimate": m.rows_estimate})
            )
            continue
        if m is None:
            findings.append(Finding("rows", "extra_table", evidence={"table": shown, "rows_estimate": r.rows_estimate}))
            continue
        plan = plan_table(m, r)
        mismatch = _schema_mismatch(m, r)
        if mismatch is not None:
            how = _how_compared(plan, m, r)
            if how is not None:
                mismatch.evidence["compared"] = how
            findings.append(mismatch)
        if plan.columns:  # none in common: no row text to hash (CONCAT_WS of nothing is an SQL error)
            plans.append(plan)
    return plans, findings


def without_keys(plan: TablePlan) -> TablePlan:
    """The same table compared as a multiset of rows (tests and keyless fallbacks)."""
    return replace(plan, key=(), master=replace(plan.master, index=None), replica=replace(plan.replica, index=None))
