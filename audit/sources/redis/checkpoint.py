"""Where a side's snapshot stands: its counts (:class:`SnapshotStats`) and the checkpoint an interrupted
snapshot continues from (:class:`Checkpoint`, `checkpoint.json` beside the part files).

The snapshot (audit/sources/redis/snapshot.py) saves a checkpoint each time part files are written,
with the SCAN cursor after the last batch they hold; a snapshot of the same side into the same folder
starts again from there.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from audit.kernel.damaged_files import unreadable
from audit.sources.redis.keys import ERROR, OK, UNSTABLE, Rows


@dataclass
class SnapshotStats:
    keys_scanned: int = 0
    keys_ok: int = 0
    keys_unstable: int = 0
    keys_vanished: int = 0
    keys_error: int = 0
    keys_filtered_out: int = 0
    """Keys SCAN returned that the key filter dropped (SCAN MATCH drops more: audit/sources/redis/scan_filter.py)."""
    commands: int = 0
    server_wait_s: float = 0.0
    errors_sample: list[str] = field(default_factory=list)
    per_db: dict[int, int] = field(default_factory=dict)

    def add(self, db: int, rows: Rows) -> None:
        n = len(rows) + rows.vanished
        self.keys_scanned += n
        self.per_db[db] = self.per_db.get(db, 0) + n
        self.keys_vanished += rows.vanished
        ok = rows.status.count(OK)
        self.keys_ok += ok
        if ok == len(rows):
            return
        self.keys_unstable += rows.status.count(UNSTABLE)
        for k, status, err in zip(rows.key, rows.status, rows.error, strict=True):
            if status == ERROR:
                self.keys_error += 1
                if len(self.errors_sample) < 10:
                    self.errors_sample.append(f"db{db} {k[:64]!r}: {err}")


CHECKPOINT_FILE = "checkpoint.json"


@dataclass
class Checkpoint:
    """Where an interrupted snapshot of one side stands: the dbs, the db being scanned, the SCAN cursor
    after the last batch written, the parts written, the counts so far (`out_dir/checkpoint.json`)."""

    dbs: list[int]
    db: int | None = None
    cursor: bytes = b"0"
    parts: int = 0
    counts: dict[str, Any] = field(default_factory=dict)
    complete: bool = False

    @classmethod
    def load(cls, out_dir: Path, dbs: list[int], parts_dir: Path) -> Checkpoint:
        """The side's checkpoint, or a fresh start (a leftover of other dbs, or none: `parts_dir` emptied)."""
        raw = read_json_or_none(out_dir / CHECKPOINT_FILE)
        if raw is not None and raw.get("dbs") == dbs and _parts_intact(parts_dir, raw.get("parts", 0)):
            return cls(
                dbs,
                raw.get("db"),
                bytes.fromhex(raw.get("cursor", "30")),
                raw.get("parts", 0),
                raw.get("counts") or {},
                bool(raw.get("complete")),
            )
        return cls.start_over(dbs, parts_dir)

    @classmethod
    def start_over(cls, dbs: list[int], parts_dir: Path) -> Checkpoint:
        """A fresh start: the parts written so far are removed, so no key is written twice."""
        if parts_dir.is_dir():
            for part in parts_dir.iterdir():
                part.unlink()
        return cls(dbs)

    def remaining(self) -> list[tuple[int, bytes]]:
        """(db, cursor to start at) for the dbs still to scan."""
        if self.db is None:
            return [(db, b"0") for db in self.dbs]
        later = self.dbs[self.dbs.index(self.db) + 1 :]
        now = [(self.db, self.cursor)] if self.cursor != b"0" else []
        return now + [(db, b"0") for db in later]

    def stats(self) -> SnapshotStats:
        stats = SnapshotStats()
        for name, value in self.counts.items():
            if name == "per_db":
                stats.per_db = {int(k): int(v) for k, v in value.items()}
            elif hasattr(stats, name):
                setattr(stats, name, value)
        return stats

    def resumed_from(self) -> dict[str, Any] | None:
        return None if self.db is None else {"db": self.db, "cursor": self.cursor.decode(), "parts": self.parts}

    def saver(self, out_dir: Path, stats: SnapshotStats) -> Callable[[int, int, bytes], None]:
        def save(parts: int, db: int, cursor: bytes) -> None:
            _write_checkpoint(out_dir, Checkpoint(self.dbs, db, cursor, parts, asdict(stats)))

        return save

    @staticmethod
    def mark_complete(out_dir: Path, dbs: list[int], parts: int, stats: SnapshotStats) -> None:
        _write_checkpoint(out_dir, Checkpoint(dbs, None, b"0", parts, asdict(stats), complete=True))


def part_path(parts_dir: Path, index: int) -> Path:
    """The `index`-th part file of a side's snapshot (numbered from 0, as the checkpoint counts them)."""
    return parts_dir / f"part-{index:05d}.parquet"


def _parts_intact(parts_dir: Path, parts: object) -> bool:
    """Every part the checkpoint counts is there and readable (its footer): one deleted or cut short since
    (a full disk, a copy stopped half way) means the side is read again, not reused with keys missing."""
    if not isinstance(parts, int) or parts < 0:
        return False
    return all(unreadable(part_path(parts_dir, i)) is None for i in range(parts))


def read_json_or_none(path: Path) -> dict[str, Any] | None:
    """A side's own JSON file (checkpoint.json, snapshot.json), or None when there is none or it is damaged
    (cut short, not JSON, a hand edit): both only save reading again, so a damaged one means reading the
    side again, not an error; the parts a damaged checkpoint described are removed with it."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) else None


def _write_checkpoint(out_dir: Path, point: Checkpoint) -> None:
    """checkpoint.json as `Checkpoint.load` reads it (the cursor in hex), replaced whole."""
    data = {**asdict(point), "cursor": point.cursor.hex()}
    tmp = out_dir / (CHECKPOINT_FILE + ".tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    tmp.replace(out_dir / CHECKPOINT_FILE)
