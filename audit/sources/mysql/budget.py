"""How many rows one fetch may ask for, so that what the kind holds stays under `max_fetch_bytes`.

Rows are read for comparison in their *held* form (sql.held_expr): a TEXT, BLOB, JSON or geometry value
over DIGESTED_BYTES comes back as `md5:<hex>:<bytes>`, never whole. So a held row has a width the
table's definition bounds, whatever its data: `held_row_bytes`. A fetch of n keys holds n such rows per
read (each side of a chunk, or master / replica / master again in the recheck), so n is the budget over
(reads x that width), within 1 and KEYS_PER_FETCH. Pure functions: the tests check the arithmetic.
"""

from __future__ import annotations

import re

from audit.sources.mysql.sql import DIGESTED_BYTES, LONG_TYPES, TEXT_TYPES
from audit.sources.mysql.values import Column, TablePlan

KEYS_PER_FETCH = 500
"""Keys per `IN (...)` list at most, whatever the budget: a statement's size stays small."""
MAX_CHAR_BYTES = 4
"""utf8mb4: the connection's character set, in which every text value is read."""
VALUE_OVERHEAD = 64
"""A Python bytes object and its slot in a row tuple."""
SHORT_VALUE_BYTES = 80
"""The text of any number, date, time or bit value (DECIMAL(65,30): 67 characters)."""
_LENGTH = re.compile(r"\((\d+)")


def held_value_bytes(column: Column) -> int:
    """The most bytes one value of `column` takes when read in its held form."""
    t = column.data_type
    if t in LONG_TYPES:
        # up to DIGESTED_BYTES in the column's charset, then converted to utf8mb4 (latin1: up to 3x)
        return DIGESTED_BYTES * (MAX_CHAR_BYTES if t in TEXT_TYPES else 1)
    if t in ("tinytext", "tinyblob"):
        return 255 * MAX_CHAR_BYTES
    if t in ("enum", "set"):
        return len(column.column_type) * MAX_CHAR_BYTES
    m = _LENGTH.search(column.column_type)
    if t in ("char", "varchar") and m:
        return int(m.group(1)) * MAX_CHAR_BYTES
    if t in ("binary", "varbinary") and m:
        return int(m.group(1))
    return SHORT_VALUE_BYTES


def held_row_bytes(plan: TablePlan) -> int:
    """The most bytes one held row of `plan` takes (its values, the row hash, the decoded key)."""
    values = sum(held_value_bytes(c) + VALUE_OVERHEAD for c in plan.columns)
    key = sum(held_value_bytes(c) + VALUE_OVERHEAD for c in plan.key_columns)
    return values + key + 2 * VALUE_OVERHEAD


def keys_per_fetch(row_bytes: int, budget: int, reads: int) -> int:
    """Keys per fetch so that `reads` fetches of held rows of `row_bytes` fit in `budget` bytes."""
    return max(1, min(KEYS_PER_FETCH, budget // max(1, reads * row_bytes)))
