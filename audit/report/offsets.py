"""Master and replica offsets of one run, for the reports' "master vs replica offsets" plots.

Where they come from, first found wins; every source is optional and a missing or malformed field
just means no plot:

1. metrics named in :data:`OFFSET_METRICS` (a source kind that measures offsets records them so);
2. the replication samples of the summary: Redis `master_repl_offset` (master) and `slave_repl_offset`
   (replica); Pika's raw `INFO replication`, whose per-db `binlog_offset=<filenum> <offset>` becomes
   one number per db (filenum × binlog file size + offset);
3. a Pika binlog audit's producer positions (the `manifest` files) kept in the pair's state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from audit import defaults

OFFSET_METRICS = (
    ("master_offset", "replica_offset"),
    ("master_max_offset", "replica_max_offset"),
    ("master_commitlog_max_offset", "replica_commitlog_max_offset"),
)
"""(master metric, replica metric) names a source kind may record its offsets under, in bytes."""

REPLICATION_UNIT = "replication offset (bytes)"
BINLOG_UNIT = "binlog position (bytes)"


@dataclass(frozen=True)
class Offsets:
    unit: str
    samples: list[tuple[int, float | None, float | None]] = field(default_factory=list)
    """(at_ms, master, replica) per replication sample, oldest first."""
    by_db: dict[str, dict[str, float | None]] = field(default_factory=dict)
    """db label -> {"master": offset, "replica": offset}, at the last sample."""

    @property
    def last(self) -> tuple[float | None, float | None]:
        if self.samples:
            return self.samples[-1][1], self.samples[-1][2]
        total = {side: _sum(o.get(side) for o in self.by_db.values()) for side in ("master", "replica")}
        return total["master"], total["replica"]


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _sum(values: Any) -> float | None:
    found = [v for v in values if v is not None]
    return float(sum(found)) if found else None


def _pika_positions(raw: str, file_size: int) -> dict[str, float]:
    from audit.sources.pika.info import parse_pika_replication

    parsed = parse_pika_replication(raw)
    return {f"db{db}": float(o.filenum * file_size + o.offset) for db, o in sorted(parsed.binlog.items())}


def _side_offset(view: Any, side: str, file_size: int) -> tuple[float | None, dict[str, float]]:
    """(total offset, per-db offsets) of one side's view in a replication sample."""
    if isinstance(view, str):
        per_db = _pika_positions(view, file_size)
        return _sum(per_db.values()), per_db
    if not isinstance(view, dict):
        return None, {}
    if side == "replica" and view.get("slave_repl_offset") is not None:
        return _number(view["slave_repl_offset"]), {}
    return _number(view.get("master_repl_offset", view.get("offset"))), {}


def _from_metrics(metrics: dict[str, Any]) -> Offsets | None:
    for m_name, r_name in OFFSET_METRICS:
        m, r = _number(metrics.get(m_name)), _number(metrics.get(r_name))
        if m is not None and r is not None:
            return Offsets(unit=REPLICATION_UNIT, by_db={"all": {"master": m, "replica": r}})
    return None


def _from_samples(samples: list[dict[str, Any]], file_size: int) -> Offsets | None:
    points: list[tuple[int, float | None, float | None]] = []
    by_db: dict[str, dict[str, float | None]] = {}
    pika = False
    for sample in samples:
        if not isinstance(sample, dict):
            continue
        m, m_db = _side_offset(sample.get("master"), "master", file_size)
        r, r_db = _side_offset(sample.get("replica"), "replica", file_size)
        if m is None and r is None:
            continue
        pika = pika or bool(m_db or r_db)
        points.append((int(_number(sample.get("at_ms")) or 0), m, r))
        by_db = {db: {"master": m_db.get(db), "replica": r_db.get(db)} for db in sorted({*m_db, *r_db})}
    if not points:
        return None
    return Offsets(unit=BINLOG_UNIT if pika else REPLICATION_UNIT, samples=points, by_db=by_db)


def _from_binlog_state(state: dict[str, Any], file_size: int) -> Offsets | None:
    crosscheck = (state.get("binlog") or {}).get("crosscheck") or {}
    by_db: dict[str, dict[str, float | None]] = {}
    for side in ("master", "replica"):
        for db, entry in (crosscheck.get(side) or {}).items():
            pos = entry.get("manifest") if isinstance(entry, dict) else None
            if isinstance(pos, list | tuple) and len(pos) == 2:
                label = db if str(db).startswith("db") else f"db{db}"
                by_db.setdefault(label, {})[side] = float(int(pos[0]) * file_size + int(pos[1]))
    return Offsets(unit=BINLOG_UNIT, by_db=by_db) if by_db else None


def run_offsets(
    pair: dict[str, Any], state: dict[str, Any] | None = None, file_size: int = defaults.PIKA_BINLOG_FILE_SIZE
) -> Offsets | None:
    """The offsets of one pair of one run (a summary.json pair entry, plus its stage state if at hand)."""
    try:
        return (
            _from_metrics(pair.get("metrics") or {})
            or _from_samples(pair.get("replication_samples") or [], file_size)
            or _from_binlog_state(state or {}, file_size)
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        return None  # a format this version does not know: no plot rather than no report
