"""The replica's replication filters (`replicate_do_db`, `replicate_ignore_table`, ...): which tables it
does not replicate from its master by design.

Such a table's rows are not the master's on the replica (it may not hold the table at all): comparing
it reported a `missing_table` or every row written since the filter was set, a divergence of a healthy
replica, without a word of why. The rules are the server's for row events (binlog_format ROW, the
rows an audit compares), as MariaDB and MySQL document them: the database first (a `do_db` list that
does not name it, or an `ignore_db` that does, drops the table), then the tables (`do_table`,
`ignore_table`, `wild_do_table`, `wild_ignore_table`, in that order, the first that names the table
decides; with a `do` list none names, the table is dropped).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

Status = dict[str, str | None]
_FIELDS = ("Do_DB", "Ignore_DB", "Do_Table", "Ignore_Table", "Wild_Do_Table", "Wild_Ignore_Table")


def status_list(row: Status, name: str) -> tuple[str, ...]:
    """A comma-separated list of the replica's status (`Replicate_<name>`: Do_DB, Ignore_Domain_Ids, ...)."""
    return tuple(v.strip() for v in (row.get(f"Replicate_{name}") or "").split(",") if v.strip())


def _wild(pattern: str, fold: bool) -> re.Pattern[str]:
    """A `db%.t_` pattern as LIKE reads it (`%` any run, `_` one character, `\\` escapes)."""
    out, escaped = [], False
    for ch in pattern:
        if escaped:
            out.append(re.escape(ch))
            escaped = False
        elif ch == "\\":
            escaped = True
        else:
            out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
    return re.compile("".join(out), re.DOTALL | (re.IGNORECASE if fold else 0))


@dataclass(frozen=True)
class ReplicationFilters:
    lists: dict[str, tuple[str, ...]]
    fold: bool = False
    """The replica compares names without case (lower_case_table_names 1 or 2)."""

    @classmethod
    def from_status(cls, row: Status, fold: bool = False) -> ReplicationFilters:
        return cls({f: status_list(row, f) for f in _FIELDS}, fold)

    def __bool__(self) -> bool:
        return any(self.lists.values())

    def excluding(self, schema: str, table: str) -> str | None:
        """The filter that keeps `schema.table` from the replica (`replicate_ignore_table = s.t`), or None."""
        name = f"{schema}.{table}"
        do_db, ignore_db = self._named("Do_DB", schema), self._named("Ignore_DB", schema)
        if self.lists["Do_DB"] and not do_db:
            return f"replicate_do_db = {','.join(self.lists['Do_DB'])} (not {schema})"
        if ignore_db:
            return f"replicate_ignore_db = {ignore_db}"
        for field, keeps in (
            ("Do_Table", True),
            ("Ignore_Table", False),
            ("Wild_Do_Table", True),
            ("Wild_Ignore_Table", False),
        ):
            hit = self._wild(field, name) if field.startswith("Wild") else self._named(field, name)
            if hit:
                return None if keeps else f"replicate_{field.lower()} = {hit}"
        if self.lists["Do_Table"] or self.lists["Wild_Do_Table"]:
            listed = ",".join((*self.lists["Do_Table"], *self.lists["Wild_Do_Table"]))
            return f"replicate_do_table / replicate_wild_do_table = {listed} (not {name})"
        return None

    def _named(self, field: str, name: str) -> str | None:
        fold = str.lower if self.fold else str
        return next((v for v in self.lists[field] if fold(v) == fold(name)), None)

    def _wild(self, field: str, name: str) -> str | None:
        return next((v for v in self.lists[field] if _wild(v, self.fold).fullmatch(name)), None)
