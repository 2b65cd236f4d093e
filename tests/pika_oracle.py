"""An oracle for the Pika binlog diff, independent of it: random master/slave pairs written byte-exactly, and
what any sound alignment of them must report, from a longest common subsequence of the records' content
per db, in plain Python.

Where records repeat (INCR loops), which copies a gap or a replay took is ambiguous by content, so the
oracle checks what is not: both sides leave as many records unpaired as the pairs they have in common
allow; there are at least as many pairs as the slave's plan holds records of the master (fewer is a
finding the slave does not deserve), at most a longest common subsequence (no order-keeping alignment
pairs more: more hides a lost record behind a replayed one); and the lag lies between the plan's and
the largest a longest common subsequence allows, plus the copies the plan lost in the run of identical
records its last record is in: the diff counts those as lag, not as a gap, since which copies of that
run the slave holds is ambiguous (docs/formats/pika-binlog.md, "What the comparison reports").
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from audit.local.pika_binlog import BinlogWriter
from tests.pika_scenarios import commands, exec_time

Position = tuple[int, int, int]  # (filenum, start, end)


@dataclass
class Pair:
    """One db's master commands and the slave's plan: the master indices it wrote, in order."""

    name: str
    cmds: list[list[bytes]]
    plan: list[int]
    file_size: int = 4096
    full_sync_before: int | None = None
    m_pos: list[Position] = field(default_factory=list)
    s_pos: list[Position] = field(default_factory=list)


def write_pair(root: Path, db: int, pair: Pair) -> None:
    """`root/m/log_db<db>` and `root/s/log_db<db>`, keeping each record's position."""
    m = BinlogWriter(root / "m" / f"log_db{db}", file_size=pair.file_size, prealloc_step=8192, term=1)
    pair.m_pos = [m.append(c, exec_time=exec_time(i)) for i, c in enumerate(pair.cmds)]
    m.close(trim=False)
    s = BinlogWriter(root / "s" / f"log_db{db}", file_size=pair.file_size, prealloc_step=8192, term=0)
    if pair.full_sync_before:
        f, _, e = pair.m_pos[pair.full_sync_before - 1]
        s.set_producer_status(f, e)
    pair.s_pos = [s.append(pair.cmds[i], exec_time=exec_time(i)) for i in pair.plan]
    s.close(trim=False)


def lcs(a: list[int], b: list[int]) -> tuple[int, int]:
    """(length of a longest common subsequence of a and b, the shortest prefix of a that still has one)."""
    prev = [0] * (len(b) + 1)
    best_at: list[int] = []
    for x in a:
        row = [0]
        for j, y in enumerate(b):
            row.append(prev[j] + 1 if x == y else max(prev[j + 1], row[j]))
        prev = row
        best_at.append(row[-1])
    length = best_at[-1] if best_at else 0
    return length, next((i + 1 for i, v in enumerate(best_at) if v == length), 0) if length else 0


@dataclass(frozen=True)
class Expected:
    master_records: int  # in the window both sides are compared in
    slave_records: int
    pairs: tuple[int, int]  # as many as the slave's plan holds, at most a longest common subsequence
    lag: tuple[int, int]  # between the plan's and the least that subsequence allows, plus the plan's
    # losses in the run of identical records its last record is in


def expected(pair: Pair) -> Expected:
    ids: dict[tuple[bytes, ...], int] = {}
    content = [ids.setdefault(tuple(c), len(ids)) for c in pair.cmds]
    first = pair.full_sync_before or 0
    if not pair.plan:
        return Expected(len(pair.cmds) - first, 0, (0, 0), (len(pair.cmds) - first,) * 2)
    lo = max(_num(pair.m_pos[0]), _num(pair.s_pos[0]))  # the diff's comparable window
    a = [content[i] for i, p in enumerate(pair.m_pos) if _num(p) >= lo]
    b = [content[i] for i, p in zip(pair.plan, pair.s_pos, strict=True) if _num(p) >= lo]
    length, prefix = lcs(a, b)
    last = max(pair.plan)
    run = next(i for i in range(last, -1, -1) if i == 0 or content[i - 1] != content[last])
    lost_in_run = len(set(range(max(run, first), last)) - set(pair.plan))
    lags = sorted((len(a) - prefix, len(pair.cmds) - 1 - last))
    return Expected(len(a), len(b), (len(set(pair.plan)), length), (lags[0], lags[1] + lost_in_run))


def _num(p: Position) -> int:
    return p[0] << 32 | p[1]


def problems(pair: Pair, found: dict[str, list[Any]], lag: int) -> list[str]:
    """What the diff's findings for one db (by category) and its lag get wrong against the oracle. A
    divergent entry at the same position leaves a record unpaired on each side, one the master never
    wrote only on the slave's."""
    want = expected(pair)
    count = {c: sum(int(f["count"]) for f in fs) for c, fs in found.items()}
    same_place = sum(int(f["count"]) for f in found.get("divergent_entry", []) if "same_position" in f["detail"])
    slave_only = count.get("divergent_entry", 0) - same_place
    m_pairs = want.master_records - count.get("missing_range", 0) - lag - same_place
    s_pairs = want.slave_records - count.get("duplicate_range", 0) - slave_only - same_place
    out = []
    if m_pairs != s_pairs:
        out.append(f"{m_pairs} master records paired, {s_pairs} slave records")
    if not want.pairs[0] <= m_pairs <= want.pairs[1]:
        out.append(f"{m_pairs} pairs outside {want.pairs}")
    if not want.lag[0] <= lag <= want.lag[1]:
        out.append(f"lag {lag} outside {want.lag}")
    return [f"{pair.name}: {p} ({dict(count)}, lag {lag})" for p in out]


def random_pair(rng: random.Random, name: str, n_max: int = 400) -> Pair:
    """Up to 400 records with INCR/DEL loops of identical records, and up to three events: a gap, a
    replayed batch, lag; sometimes a full sync first. Files of 1 record to 16 KiB, so events and loops
    cross file boundaries."""
    n = rng.randint(60, n_max)
    cmds = commands(n, 0, value_size=rng.choice([8, 40]))
    for _ in range(rng.randint(0, 4)):
        a = rng.randrange(n)
        b = min(n, a + rng.randint(2, 80))
        cmds[a:b] = [list(rng.choice([[b"incr", b"c"], [b"incr", b"d"], [b"del", b"k"]]))] * (b - a)
    plan, events = list(range(n)), []
    for _ in range(rng.randint(0, 3)):
        if len(plan) < 20:
            break
        kind = rng.choice(["gap", "replay", "lag"])
        at = rng.randrange(1, len(plan) - 2)
        if kind == "gap":
            size = rng.randint(1, min(60, len(plan) - at - 1))
            plan = plan[:at] + plan[at + size :]
        elif kind == "replay":
            size = rng.randint(1, min(40, at))
            plan = plan[:at] + plan[at - size : at] + plan[at:]
        else:
            size = rng.randint(1, 30)
            plan = plan[:-size]
        events.append((kind, at, size))
    sync = rng.randrange(1, n // 3) if rng.random() < 0.15 else None
    if sync is not None:
        plan = [i for i in plan if i >= sync]
    file_size = rng.choice([1, 4096, 16384]) if n <= 100 else rng.choice([1500, 4096, 16384, 16384])
    return Pair(f"{name} n={n} file_size={file_size} sync={sync} events={events}", cmds, plan, file_size, sync)
