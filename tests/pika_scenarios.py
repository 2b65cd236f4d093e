"""Master/slave Pika binlog pairs written byte-exactly by the test writer, with the Pika incidents
of docs/incidents.md planted: what the slave's binlog looks like after each bug (docs/formats/pika-binlog.md,
"How a slave's binlog relates to its master's")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from audit.local.pika_binlog import BinlogWriter

T0 = 1_700_000_000
PER_SECOND = 50  # records the master writes per second of exec_time


def commands(n: int, db: int, value_size: int = 40) -> list[list[bytes]]:
    """A mix of writes, some non-idempotent (INCR, LPUSH): what a replay corrupts."""
    out: list[list[bytes]] = []
    for i in range(n):
        key = b"db%d:key:%06d" % (db, i % 997)
        kind = i % 5
        if kind == 0:
            out.append([b"set", key, (b"v%d-" % i).ljust(value_size, b"x")])
        elif kind == 1:
            out.append([b"hset", b"db%d:hash:%d" % (db, i % 31), b"f%d" % i, b"%d" % i])
        elif kind == 2:
            out.append([b"incr", b"db%d:counter" % db])
        elif kind == 3:
            out.append([b"lpush", b"db%d:list" % db, b"e%d" % i])
        else:
            out.append([b"pexpire", key, b"100000"])
    return out


@dataclass
class MasterLog:
    cmds: list[list[bytes]]
    positions: list[tuple[int, int, int]] = field(default_factory=list)  # (filenum, start, end) per record

    def where(self, i: int, end: bool = False) -> str:
        f, s, e = self.positions[i]
        return f"{f}:{e if end else s}"

    def size(self, i: int) -> int:
        return self.positions[i][2] - self.positions[i][1]


def exec_time(i: int) -> int:
    return T0 + i // PER_SECOND


def write_master(log_root: Path, db: int, cmds: list[list[bytes]], file_size: int) -> MasterLog:
    w = BinlogWriter(log_root / f"log_db{db}", file_size=file_size, preallocate=True, term=1)
    log = MasterLog(cmds)
    for i, c in enumerate(cmds):
        log.positions.append(w.append(c, exec_time=exec_time(i)))
    w.close(trim=False)  # a running Pika leaves the zero-filled tail
    return log


def write_slave(
    log_root: Path,
    db: int,
    master: MasterLog,
    plan: Sequence[tuple[int, int]],
    file_size: int,
    full_sync_before: int | None = None,
) -> None:
    """Append master records in `plan` order, each (master index, slave exec_time).

    `full_sync_before`: the slave was full-synced at the master's position just before that record, so its
    binlog starts with padding up to there (SetProducerStatus), as a real slave's does.
    """
    w = BinlogWriter(log_root / f"log_db{db}", file_size=file_size, preallocate=True, term=0)
    if full_sync_before is not None and full_sync_before > 0:
        f, _, e = master.positions[full_sync_before - 1]
        w.set_producer_status(f, e)
    for i, t in plan:
        w.append(master.cmds[i], exec_time=t)
    w.close(trim=False)


def healthy_plan(first: int, n: int, delay_s: int = 0) -> list[tuple[int, int]]:
    return [(i, exec_time(i) + delay_s) for i in range(first, n)]


def gap_plan(n: int, gap_start: int, gap_len: int) -> list[tuple[int, int]]:
    """PIKA_QUEUE_ERASE_GAP: records erased from the write queue never reach the slave; later ones follow."""
    return [(i, exec_time(i)) for i in range(n) if not gap_start <= i < gap_start + gap_len]


def double_trysync_plan(n: int, resume: int, batch: int, pause_s: int = 25) -> list[tuple[int, int]]:
    """PIKA_DOUBLE_TRYSYNC: after a timeout pause the first batch after the resume point is written twice."""
    before = [(i, exec_time(i)) for i in range(resume)]
    t = exec_time(resume) + pause_s
    twice = [(i, t) for i in range(resume, resume + batch)] * 2
    return before + twice + [(i, exec_time(i) + pause_s) for i in range(resume + batch, n)]


def resume_offset_plan(n: int, session_end: int, batch: int, pause_s: int = 25) -> list[tuple[int, int]]:
    """PIKA_RESUME_OFFSET: the previous session's last batch is sent again at the start of the next one."""
    first = [(i, exec_time(i)) for i in range(session_end)]
    t = exec_time(session_end) + pause_s
    again = [(i, t) for i in range(session_end - batch, session_end)]
    return first + again + [(i, exec_time(i) + pause_s) for i in range(session_end, n)]
