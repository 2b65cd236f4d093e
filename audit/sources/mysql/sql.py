"""SQL text the engine sends: identifier quoting, literals, per-row hashes, per-chunk aggregates, and
TableSql, the statements over one table on one side.

Everything is rendered to a complete statement string here (no driver-side `%s` formatting, so a `%`
in a name is just a character) with literals that mean the same under every `sql_mode`: strings are
quoted with `''` doubling only when they hold no backslash or control character, otherwise written as
`_utf8mb4 X'..'` (a character string, so it still compares under the column's collation); bytes of
binary columns are `X'..'`.

Row hash (both sides run the same expression over the columns they have in common):

    CRC32(CONCAT_WS('#', e1, ..., en, CONCAT(ISNULL(n1), ...), CONCAT_WS(',', LENGTH(s1), ...)))

`ei` is each column's normalised text (see `column_expr`), a long one (a TEXT, BLOB, JSON or geometry
value over DIGESTED_BYTES) as `md5:<its MD5>` (see `hashed_expr`); the ISNULL flags of the columns that may be
NULL (on either side) make NULL differ from '' and from a missing value (CONCAT_WS skips NULLs); the
byte lengths of the columns whose text may contain '#' on either side (strings, binaries, JSON; enums
and sets with a '#' in a value), all but the last, make the encoding unambiguous (`'a#','b'` vs
`'a','#b'`). CRC32 detects every change of up to 32 adjacent bits; `hash_function: md5` gives 64 bits.
A chunk's digest is `COUNT(*)` and `SUM(hash)`: a sum, not pt-table-checksum's BIT_XOR, so two equal
rows do not cancel out (a keyless table is a multiset) and swapping values between two rows of equal
length (which XOR of CRCs cannot see: CRC is linear) changes it; it is order-independent and additive,
so a table's digest is the sum of its chunks' whatever the chunking.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from decimal import Decimal
from typing import Literal

from audit.sources.mysql.values import Column, Side, TablePlan

HashFunction = Literal["crc32", "md5"]
KeyValue = int | Decimal | float | str | bytes
Bound = tuple[KeyValue, ...] | None

INT_TYPES = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint"})
EXACT_TYPES = INT_TYPES | {"decimal", "numeric"}
FLOAT_TYPES = frozenset({"float", "double", "real"})
BINARY_TYPES = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "geometry", "point",
                          "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
                          "geometrycollection"})  # fmt: skip
TEXT_TYPES = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json"})
TEMPORAL_TYPES = frozenset({"date", "datetime", "timestamp", "time", "year"})
LONG_TYPES = frozenset({"text", "mediumtext", "longtext", "json", "blob", "mediumblob", "longblob"}) | (
    BINARY_TYPES - {"binary", "varbinary", "tinyblob"}
)
"""Types whose values may outgrow max_allowed_packet once concatenated into a row's text."""
DIGESTED_BYTES = 8192
DIGEST_PREFIX = b"md5:"
ESCAPE_PREFIX = b"raw:"
_HELD_DIGEST = re.compile(rb"md5:([0-9a-f]{32}):([0-9]+)")


def quote_ident(name: str) -> str:
    """`name` as a backquoted identifier: backquotes doubled, anything else (spaces, é, %) kept."""
    return "`" + name.replace("`", "``") + "`"


def table_ref(schema: str, table: str) -> str:
    return f"{quote_ident(schema)}.{quote_ident(table)}"


def string_literal(text: str) -> str:
    if "\\" in text or any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
        return "_utf8mb4 X'" + text.encode("utf-8").hex().upper() + "'"
    return "'" + text.replace("'", "''") + "'"


def literal(value: KeyValue | None) -> str:
    """A SQL literal for a typed value (see module doc): safe whatever the server's sql_mode."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | Decimal):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, bytes):
        return "X'" + value.hex().upper() + "'"
    return string_literal(value)


# --- typed values ----------------------------------------------------------------------------------------


def may_hold_separator(column: Column) -> bool:
    """Whether the column's text may contain '#' (an ENUM or SET only if one of its values does)."""
    if column.data_type in ("enum", "set"):
        return "#" in column.column_type
    return column.data_type in TEXT_TYPES or column.data_type in BINARY_TYPES


def decode_value(column: Column, raw: bytes | None) -> KeyValue | None:
    """A value read as text-protocol bytes, typed so that it can be sent back as a literal."""
    if raw is None:
        return None
    t = column.data_type
    try:
        if t in INT_TYPES or t == "bit":
            # a key the master holds as an INT may be a DECIMAL on the replica (5.5): kept exact, not a crash
            return int(raw) if raw.lstrip(b"-").isdigit() else Decimal(raw.decode())
        if t in ("decimal", "numeric"):
            return Decimal(raw.decode())
        if t in FLOAT_TYPES:
            return float(raw)
    except (ArithmeticError, ValueError):
        # the replica's copy of a number column may be text ('1#2', 'n/a' in a VARCHAR after a
        # migration): shown and written as the text it is, where its finding stopped the audit
        return raw.decode("utf-8", errors="surrogateescape")
    if t in BINARY_TYPES:
        return bytes(raw)
    return raw.decode("utf-8", errors="surrogateescape")


def json_value(column: Column, value: KeyValue | None) -> object:
    """A value as shown in a finding's key/detail: numbers as numbers, bytes as `0x<hex>`."""
    if value is None or isinstance(value, int | float):
        return value
    if isinstance(value, bytes):
        return "0x" + value.hex()
    if isinstance(value, str) and column.data_type not in BINARY_TYPES:
        return value.encode("utf-8", errors="surrogateescape").decode("utf-8", errors="replace")
    return str(value)


def from_json_value(column: Column, value: object) -> KeyValue | None:
    """Inverse of json_value for key columns (the Spark tasks pass keys as JSON)."""
    if value is None:
        return None
    t = column.data_type
    if t in BINARY_TYPES:
        assert isinstance(value, str) and value.startswith("0x")
        return bytes.fromhex(value[2:])
    if t in ("decimal", "numeric"):
        return Decimal(str(value))
    if isinstance(value, int | float | str):
        return value
    raise ValueError(f"not a key value: {value!r}")


def key_order(column: Column) -> tuple[object, ...]:
    """What decides which rows a key range holds: text by its character set and collation
    (utf8mb4_general_ci sorts 'B' between 'a' and 'c', utf8mb4_bin before both; an ENUM too, compared
    with a string), binary strings by their bytes, numbers by value."""
    t = column.data_type
    if t in TEXT_TYPES:
        return ("text", column.charset, column.collation)
    if t in BINARY_TYPES:
        return ("bytes",)
    if t in EXACT_TYPES or t in FLOAT_TYPES or t == "bit":
        return ("number",)
    if t in ("datetime", "timestamp"):
        return ("datetime",)
    return (t,)


# --- expressions ----------------------------------------------------------------------------------------


FLOAT_MAX = 3.4028234663852886e38
"""The largest FLOAT: a DOUBLE beyond it has no FLOAT form (CAST would clip it to this)."""


def column_expr(column: Column, peer: Column | None = None, *, key: bool = False) -> str:
    """The normalised text of a column, so that equal values hash equal on both sides.

    FLOAT is widened to DOUBLE (its own text keeps 6 digits and would hide changes); BIT is shown as
    its number; TIMESTAMP needs the session time zone every connection sets ('+00:00'). When the
    two sides define the column differently (`peer`, a schema_mismatch), the value is brought to a
    form both types share: exact numbers without trailing zeros, text in utf8mb4, times with 6 digits
    (a DATE at midnight), a DOUBLE or DECIMAL as the FLOAT or DOUBLE it is compared with, and a string
    without the padding a CHAR or BINARY(n) side cannot tell from the value: outside the key, whose
    values are looked up as they are, but for a text key whose collations pad on both sides.
    """
    c = quote_ident(column.name)
    t = column.data_type
    if t == "bit":
        return f"CAST({c} AS UNSIGNED)"
    if t == "float":
        return f"CAST({c} AS DOUBLE)"
    if peer is None or (peer.column_type == column.column_type and peer.charset == column.charset):
        return c
    p = peer.data_type
    if t in EXACT_TYPES and p in EXACT_TYPES:
        text = f"CAST({c} AS DECIMAL(65,30))"
        return f"TRIM(TRAILING '.' FROM TRIM(TRAILING '0' FROM {text}))"
    if t in FLOAT_TYPES | EXACT_TYPES and p == "float":
        # a dump writes a FLOAT as its 6-digit text (1.1), which a DOUBLE then keeps as 1.1 where the
        # FLOAT held 1.100000023841858: the DOUBLE (or DECIMAL) is compared as the FLOAT it would be
        return f"IF(ABS({c}) <= {FLOAT_MAX!r}, CAST(CAST({c} AS FLOAT) AS DOUBLE), CAST({c} AS DOUBLE))"
    if t in FLOAT_TYPES | EXACT_TYPES and p in FLOAT_TYPES:
        return f"CAST({c} AS DOUBLE)"  # a DECIMAL against a DOUBLE as the DOUBLE it would be: 1.50 = 1.5
    if t in ("date", "datetime", "timestamp") and p in ("date", "datetime", "timestamp"):
        return f"CAST({c} AS DATETIME(6))"  # a DATE as its midnight: 2024-01-02 = 2024-01-02 00:00:00
    if t == "time" and p == "time":
        return f"CAST({c} AS TIME(6))"
    if t == "set" and p == "set":
        return set_members_expr(column, peer)
    if t in TEXT_TYPES and p in TEXT_TYPES:
        text = f"CONVERT({c} USING utf8mb4)"
        # a CHAR drops trailing spaces: 'a ' copied into a CHAR reads 'a' there; in a key only when both
        # collations pad (then 'a ' and 'a' are one key on each side: no two keys become one)
        trims = "char" in (t, p) and t != p and (not key or (pads_spaces(column) and pads_spaces(peer)))
        return f"TRIM(TRAILING ' ' FROM {text})" if trims else text
    if t in BINARY_TYPES and p in BINARY_TYPES and "binary" in (t, p) and not key:
        # a BINARY(n) pads with 0x00: 'ab' copied into a BINARY(4) reads 'ab\0\0' there
        return f"TRIM(TRAILING X'00' FROM {c})"
    return c


def set_members(column_type: str) -> list[str]:
    """The members of a SET or ENUM definition as COLUMN_TYPE spells it: `set('a''b','c\\\\d')`."""
    quoted = re.findall(r"'((?:[^'\\]|''|\\.)*)'", column_type)
    return [re.sub(r"''|\\(.)", lambda m: m.group(1) or "'", q) for q in quoted]


def set_members_expr(column: Column, peer: Column) -> str:
    """A SET's value as its members in one order both definitions share (sorted, over both).

    A SET's text lists its members in its definition's order: a copy whose SET a migration reordered,
    SET('y','x') for SET('x','y'), reads 'y,x' for the master's 'x,y', the same members: every such row
    was a row_mismatch (the definitions are the schema_mismatch). NULL stays NULL (CONCAT_WS gives '')."""
    c = quote_ident(column.name)
    members = sorted(set(set_members(column.column_type)) | set(set_members(peer.column_type)))
    found = ", ".join(f"IF(FIND_IN_SET({literal(m)}, {c}), {literal(m)}, NULL)" for m in members)
    return f"IF({c} IS NULL, NULL, CONCAT_WS(',', {found}))"


def binary_length(column: Column) -> int | None:
    """n of a BINARY(n), whose values are padded with 0x00 to n bytes; None for any other type."""
    if column.data_type != "binary":
        return None
    m = re.fullmatch(r"binary(?:\((\d+)\))?", column.column_type.lower())
    return int(m.group(1) or 1) if m else None


def pads_spaces(column: Column) -> bool:
    """Whether the column's collation compares 'a ' equal to 'a' (PAD SPACE): every one but MariaDB's
    `_nopad_` and MySQL 8's `_0900_` collations."""
    name = (column.collation or "").lower()
    return bool(name) and "nopad" not in name and "0900" not in name


def weight_expr(column: Column, expr: str) -> str:
    """The value's weights under its collation, equal exactly when the values compare equal: without
    trailing spaces when the collation pads (WEIGHT_STRING keeps them: 'a ' weighs more than 'a')."""
    return f"WEIGHT_STRING(TRIM(TRAILING ' ' FROM {expr}))" if pads_spaces(column) else f"WEIGHT_STRING({expr})"


def hashed_expr(column: Column, expr: str) -> str:
    """The column as the row hash reads it: a long value (over DIGESTED_BYTES) as `md5:<its MD5>`.

    A row text longer than the server's max_allowed_packet (two 9 MB TEXTs under the default 16 MB)
    makes CONCAT_WS NULL, and a NULL hash is summed as nothing: any change in such a row was invisible.
    Digesting long values keeps every row text small, on both sides alike, whatever their settings.
    A short value that itself begins `md5:` (or `raw:`) is escaped as `raw:<value>`: written as a long
    value's digest text, it hashed as that long value, and the difference was never seen.
    """
    value = bytes_expr(column, expr)
    if column.data_type not in LONG_TYPES:
        return value
    return _long_as_md5(column, value, short=_escaped(value))


def _escaped(expr: str) -> str:
    """`expr`, or `raw:<expr>` when it begins with a prefix the row text gives a meaning (md5:, raw:)."""
    prefixes = f"_binary'{DIGEST_PREFIX.decode()}', _binary'{ESCAPE_PREFIX.decode()}'"
    return f"IF(LEFT({expr}, 4) IN ({prefixes}), CONCAT(_binary'{ESCAPE_PREFIX.decode()}', {expr}), {expr})"


def bytes_expr(column: Column, expr: str) -> str:
    """`expr` as its bytes when the column's text is in another character set than utf8mb4.

    The row text concatenates every column: two that no one character set holds both of (latin1 and
    cp1251, sjis or greek) are an 'Illegal mix of collations' for CONCAT_WS, which stopped the whole
    audit. Bytes mix with anything, and equal text has equal bytes on both sides: each side reads the
    column in the master's character set, or converted to utf8mb4 where they differ (column_expr)."""
    if column.data_type in TEXT_TYPES and (column.charset or "utf8mb4") != "utf8mb4":
        return f"CAST({expr} AS BINARY)"
    return expr


def _long_as_md5(column: Column, expr: str, *more: str, short: str | None = None) -> str:
    """`expr` (or `short`, its form when not digested), or for a long column's value over DIGESTED_BYTES
    `md5:<its MD5>` followed by `more`."""
    if column.data_type not in LONG_TYPES:
        return expr
    # binary, so that no column charset (latin1...) is an illegal mix with the digest's
    parts = ", ".join((f"_binary'{DIGEST_PREFIX.decode()}'", f"MD5({expr})", *more))
    return f"IF(LENGTH({expr}) > {DIGESTED_BYTES}, CONCAT({parts}), {short or expr})"


def held_expr(column: Column, expr: str) -> str:
    """The column as rows are read for comparison and evidence: a long value as `md5:<MD5>:<bytes>`.

    Held rows are compared with each other (equal exactly when the row hash's `md5:<MD5>` forms are),
    shown in findings and kept for the recheck: none of that needs a 50 MB value whole, and holding it
    made memory rows x row width (budget.py). Only the repair plan needs it, and re-reads it (repair.py).
    """
    return _long_as_md5(column, expr, "_binary':'", f"LENGTH({expr})")


def held_digest(column: Column, raw: bytes | None) -> tuple[str, int] | None:
    """(MD5, bytes) of a value held as its digest (held_expr); None for a value held whole.

    A value of a long column that happens to read `md5:<32 hex>:<n>` is taken for a digest: the repair
    plan then re-reads it, which writes it right all the same."""
    if raw is None or column.data_type not in LONG_TYPES or not raw.startswith(DIGEST_PREFIX):
        return None
    m = _HELD_DIGEST.fullmatch(raw)
    return (m.group(1).decode(), int(m.group(2))) if m else None


def row_string(exprs: Sequence[str], nullable: Sequence[bool], separable: Sequence[bool]) -> str:
    """The text a row hashes: see the module doc (flags only where needed: they cost ~10% each)."""
    flags = [f"ISNULL({e})" for e, n in zip(exprs, nullable, strict=True) if n]
    # With k columns that may hold '#', the lengths of k - 1 of them pin every field: the last one's
    # extent is what is left between its neighbours, which cannot hold '#'.
    lengths = [f"LENGTH({e})" for e, s in zip(exprs, separable, strict=True) if s][:-1]
    parts = list(exprs)
    if flags:
        parts.append("CONCAT(" + ", ".join(flags) + ")")
    if lengths:
        parts.append("CONCAT_WS(',', " + ", ".join(lengths) + ")")
    return "CONCAT_WS('#', " + ", ".join(parts) + ")"


def row_hash(
    exprs: Sequence[str], nullable: Sequence[bool], separable: Sequence[bool], function: HashFunction = "crc32"
) -> str:
    text = row_string(exprs, nullable, separable)
    if function == "md5":
        return f"CAST(CONV(LEFT(MD5({text}), 16), 16, 10) AS UNSIGNED)"
    return f"CRC32({text})"


# --- key ranges -----------------------------------------------------------------------------------------


def _compare(cols: Sequence[str], values: Sequence[KeyValue], last_op: str) -> str:
    """Row-constructor comparison `(c1, c2) <op> (v1, v2)` spelt out so the optimiser makes it a range."""
    ors = []
    for i in range(len(cols)):
        eqs = [f"{quote_ident(cols[j])} = {literal(values[j])}" for j in range(i)]
        op = last_op if i == len(cols) - 1 else last_op[0]
        ors.append(" AND ".join([*eqs, f"{quote_ident(cols[i])} {op} {literal(values[i])}"]))
    return ors[0] if len(ors) == 1 else "(" + " OR ".join(f"({o})" for o in ors) + ")"


def range_where(key: Sequence[str], lower: Bound, upper: Bound) -> str:
    """`lower <= key < upper` (None: unbounded) as a WHERE condition."""
    conds = []
    if lower is not None:
        conds.append(_compare(key, lower, ">="))
    if upper is not None:
        conds.append(_compare(key, upper, "<"))
    return " AND ".join(conds) if conds else "1=1"


def key_in(
    key: Sequence[str], keys: Sequence[Sequence[KeyValue]], charsets: Sequence[tuple[str, str] | None] = ()
) -> str:
    """`(k1, k2) IN ((..), (..))`, or `k IN (..)` for a one-column key; a column with `charsets` given
    (SideSql.key_charsets) has its literals converted to them (key_literal)."""
    casts = list(charsets) or [None] * len(key)
    if len(key) == 1:
        return f"{quote_ident(key[0])} IN (" + ", ".join(key_literal(k[0], casts[0]) for k in keys) + ")"
    cols = "(" + ", ".join(quote_ident(k) for k in key) + ")"
    rows = ", ".join("(" + ", ".join(key_literal(v, c) for v, c in zip(k, casts, strict=True)) + ")" for k in keys)
    return f"{cols} IN ({rows})"


def key_literal(value: KeyValue, charset: tuple[str, str] | None) -> str:
    """A key value as a literal in a column's character set and collation: `'😀'` compared with a
    latin1 column is an error ('Illegal mix of collations'), which stopped the audit; converted, it
    reads '?', and the row found there (if any) is matched by its own key, not by '😀'."""
    if charset is None or not isinstance(value, str):
        return literal(value)
    return f"CONVERT({literal(value)} USING {charset[0]}) COLLATE {quote_ident(charset[1])}"


def key_tag(key: Sequence[str], keys: Sequence[Sequence[KeyValue]]) -> str:
    """`CASE WHEN k = <keys[0]> THEN 0 ... END`: the first of `keys` a row read by key_in(key, keys)
    equals, under the key's collation ('A' = 'a' = 'a ' under utf8mb4_general_ci), as key_in matched it."""
    whens = " ".join(
        "WHEN " + " AND ".join(f"{quote_ident(c)} = {literal(v)}" for c, v in zip(key, k, strict=True)) + f" THEN {i}"
        for i, k in enumerate(keys)
    )
    return f"CASE {whens} END"


def force_index(index: str | None) -> str:
    return f" FORCE INDEX ({quote_ident(index)})" if index else ""


def _separable(plan: TablePlan, column: Column) -> bool:
    """Whether the column's text may hold '#' on either side (TablePlan.separators: the replica's)."""
    return may_hold_separator(column) or column.name in plan.separators


# --- SQL over one table -----------------------------------------------------------------------------------


class TableSql:
    """The statements for one table on one side."""

    def __init__(self, plan: TablePlan, side: Side, hash_function: str) -> None:
        sql = plan.side(side)
        separable = [_separable(plan, c) for c in plan.columns]
        nullable = [c.nullable for c in plan.columns]
        self.plan, self.exprs = plan, sql.exprs
        hashed = [hashed_expr(c, e) for c, e in zip(plan.columns, sql.exprs, strict=True)]
        self.hash = row_hash(hashed, nullable, separable, "md5" if hash_function == "md5" else "crc32")
        self.source = table_ref(plan.schema, plan.name) + force_index(sql.index)
        self.plain_source = table_ref(plan.schema, plan.name)
        self.key_exprs = [sql.exprs[i] for i in plan.key_positions]
        self.held = [held_expr(c, e) for c, e in zip(plan.columns, sql.exprs, strict=True)]
        self.order = ", ".join(quote_ident(k) for k in plan.key)
        self.key_charsets = sql.key_charsets

    def checksum(self, lower: Bound, upper: Bound) -> str:
        where = range_where(self.plan.key, lower, upper) if self.plan.key else "1=1"
        return f"SELECT COUNT(*), COALESCE(SUM({self.hash}), 0) FROM {self.source} WHERE {where}"

    def boundary(self, lower: Bound, upper: Bound, offset: int) -> str:
        """The key `offset` rows past `lower`, in its normalised text (a FLOAT's as DOUBLE: its own text
        keeps 6 digits, so a bound read back as '100000' fell below the keys it stood for and the walk
        found it again, for ever; a BIT's as its number: its raw bytes decoded to no key at all)."""
        keys = ", ".join(self.key_exprs)
        where = range_where(self.plan.key, lower, upper)
        return f"SELECT {keys} FROM {self.source} WHERE {where} ORDER BY {self.order} LIMIT 1 OFFSET {offset}"

    def key_hashes(self, lower: Bound, upper: Bound) -> str:
        where = range_where(self.plan.key, lower, upper)
        return f"SELECT {', '.join(self.key_exprs)}, {self.hash} FROM {self.source} WHERE {where}"

    def rows_by_key(self, keys: Sequence[Sequence[KeyValue]], *, whole: bool = False, tagged: bool = False) -> str:
        """Rows in their held form (long values as digests), or `whole` (the repair plan's re-read);
        `tagged`: each followed by the position in `keys` of the key it matched (key_tag)."""
        exprs = [*(self.exprs if whole else self.held), self.hash]
        if tagged:
            exprs.append(key_tag(self.plan.key, keys))
        where = key_in(self.plan.key, keys, self.key_charsets)
        return f"SELECT {', '.join(exprs)} FROM {self.plain_source} WHERE {where}"

    def key_text(self) -> str:
        """The key's values as one text, equal on both sides exactly when the key's bytes are, or (a
        key both sides collate alike) when the keys are equal under the collation: a CHAR or VARCHAR as
        its collation's weights ('A' and 'a ' weigh as 'a' under utf8mb4_general_ci)."""
        columns = self.plan.key_columns
        exprs = [
            weight_expr(c, e) if self.plan.collated and c.data_type in ("char", "varchar") else bytes_expr(c, e)
            for c, e in zip(columns, self.key_exprs, strict=True)
        ]
        return row_string(exprs, [False] * len(columns), [_separable(self.plan, c) for c in columns])

    def bucket_digests(self, buckets: int) -> str:
        """COUNT(*) and SUM(row hash) of each bucket of rows, by CRC32 of the key's text: in bucket order."""
        bucket = f"CRC32({self.key_text()}) % {buckets}"
        # by position: GROUP BY `b` meant a column of that name when the table had one (see hash_counts)
        return f"SELECT {bucket}, COUNT(*), SUM({self.hash}) FROM {self.plain_source} GROUP BY 1 ORDER BY 1"

    def bucket_rows(self, buckets: int, only: Sequence[int] | None) -> str:
        """The held rows of buckets `only` (None: every row), with their hash, by MD5 of the key's text."""
        text = self.key_text()
        where = f" WHERE CRC32({text}) % {buckets} IN ({', '.join(map(str, only))})" if only is not None else ""
        digest = f"UNHEX(MD5({text}))"
        last = len(self.held) + 2  # by position: no column of the table can take its place
        return f"SELECT {', '.join(self.held)}, {self.hash}, {digest} FROM {self.plain_source}{where} ORDER BY {last}"

    def hash_counts(self) -> str:
        """Copies of each row hash, in hash order. Grouped by position: GROUP BY an alias names the
        table's column of that name first, and a keyless table with a column `h` was grouped by it (a
        changed row hid among its group's copies: no finding)."""
        return f"SELECT {self.hash}, COUNT(*) FROM {self.plain_source} GROUP BY 1 ORDER BY 1"

    def all_rows(self) -> str:
        return f"SELECT {', '.join(self.held)}, {self.hash} FROM {self.plain_source}"
