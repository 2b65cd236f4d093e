"""The plain values the engine's modules pass each other (picklable: they travel to Spark tasks)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Side = Literal["master", "replica"]
SIDES: tuple[Side, Side] = ("master", "replica")


@dataclass(frozen=True)
class Column:
    """One column as information_schema.COLUMNS describes it."""

    name: str
    data_type: str
    """DATA_TYPE, lower case: int, varchar, decimal, ..."""
    column_type: str
    """COLUMN_TYPE: the full definition, e.g. `decimal(9,2)`, `int(10) unsigned`."""
    nullable: bool = True
    charset: str | None = None
    collation: str | None = None
    generated: bool = False
    expression: str | None = None
    """GENERATION_EXPRESSION of a generated column (compared; its values are, unless the replica
    generates them too)."""

    def definition(self) -> dict[str, object]:
        out: dict[str, object] = {
            "type": self.column_type,
            "nullable": self.nullable,
            "charset": self.charset,
            "collation": self.collation,
            "generated": self.generated,
        }
        if self.expression is not None:
            out["expression"] = self.expression
        return out


@dataclass(frozen=True)
class UniqueKey:
    index: str
    columns: tuple[str, ...]
    primary: bool


@dataclass(frozen=True)
class TableDef:
    schema: str
    name: str
    columns: tuple[Column, ...]
    keys: tuple[UniqueKey, ...] = ()
    """Unique keys usable for chunking (all columns NOT NULL, no prefix): PRIMARY first."""
    rows_estimate: int = 0
    indexed: frozenset[str] = frozenset()
    """Columns that lead an index (unique or not, not IGNORED): a range on them needs no table scan."""

    @property
    def display(self) -> str:
        return f"{self.schema}.{self.name}"

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)

    def signature(self) -> tuple[object, ...]:
        """What must not change while the table is audited."""
        return tuple((c.name, c.column_type, c.nullable, c.charset, c.generated, c.expression) for c in self.columns)


@dataclass(frozen=True)
class SideSql:
    """How one side reads a table: the normalised column expressions and the index to force."""

    exprs: tuple[str, ...]
    index: str | None
    key_charsets: tuple[tuple[str, str] | None, ...] = ()
    """Per key column, the (character set, collation) its literals are converted to on this side, when
    a key read from the other side may hold characters this side's cannot (utf8mb4 into latin1)."""


@dataclass(frozen=True)
class TablePlan:
    """A table as both sides compare it: the common columns, the key (empty: keyless), the SQL per side."""

    schema: str
    name: str
    columns: tuple[Column, ...]
    """The compared columns (master's definitions), in the master's order; those the replica generates
    left out."""
    key: tuple[str, ...]
    master: SideSql
    replica: SideSql
    rows_estimate: int = 0
    signatures: tuple[tuple[object, ...], tuple[object, ...]] = ((), ())
    ranges: bool = True
    """Whether a key range holds the same rows on both sides: not when a key column sorts differently
    there (another collation): the table is then compared by key digests, without ranges (unordered.py)."""
    collated: bool = True
    """Whether every key column compares alike on both sides (same character set and collation for
    text): rows are then matched by key as that collation compares them, with key ranges or without
    (a replica whose key leads with another column), else by the key's bytes."""
    separators: frozenset[str] = frozenset()
    """Columns whose text may hold the row text's separator '#' on the replica though the master's
    definition cannot (an INT or an ENUM there, a VARCHAR here): their lengths enter the row text on
    both sides (sql.row_string), else the master's (1, '2#3') and the replica's ('1#2', '3') were one
    row text, a difference never seen."""

    @property
    def display(self) -> str:
        return f"{self.schema}.{self.name}"

    @property
    def key_columns(self) -> tuple[Column, ...]:
        by_name = {c.name: c for c in self.columns}
        return tuple(by_name[k] for k in self.key)

    @property
    def key_positions(self) -> tuple[int, ...]:
        names = [c.name for c in self.columns]
        return tuple(names.index(k) for k in self.key)

    def side(self, side: Side) -> SideSql:
        return self.master if side == "master" else self.replica


@dataclass
class Coverage:
    """What was compared, per table; summed into the run's metrics."""

    chunks: int = 0
    chunks_equal: int = 0
    chunks_different: int = 0
    master_rows: int = 0
    replica_rows: int = 0
    rows_fetched: int = 0
    uncovered: list[dict[str, object]] = field(default_factory=list)
