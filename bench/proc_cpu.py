"""Where a run's CPU went: every process's CPU seconds sampled from /proc while a command runs (Linux).

A :class:`CpuSampler` reads utime + stime of every process each `interval_s` (a process without a
command line, a kernel thread or one exiting, goes by its name in brackets); :meth:`CpuSampler.between`
gives, per label, the CPU seconds spent between two moments. A process that exits between two samples
loses at most one interval of its CPU; one that exists only between samples is not seen. On a busy
machine the sampler itself waits for a core, so the gaps between samples can grow well past the
interval (:meth:`CpuSampler.largest_gap_s`): CPU near a moment then lands on either side of it.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections import Counter
from collections.abc import Callable

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _read_all() -> dict[int, tuple[str, float]]:
    """pid -> (command line, CPU seconds so far)."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            fields = stat[stat.rfind(")") + 2 :].split()  # after the command name, which may hold spaces
            if not cmd.strip():  # a kernel thread, or a process whose command line is gone: its name then
                cmd = "[" + stat[stat.find("(") + 1 : stat.rfind(")")] + "]"
            out[int(name)] = (cmd, (int(fields[11]) + int(fields[12])) / _TICK)
        except (OSError, ValueError, IndexError):  # a process exiting as it is read: its stat may be gone or empty
            continue
    return out


class CpuSampler(threading.Thread):
    def __init__(self, interval_s: float = 0.25) -> None:
        super().__init__(name="cpu-sampler", daemon=True)
        self.interval_s = interval_s
        self.samples: list[tuple[float, dict[int, tuple[str, float]]]] = []
        self._stop_event = threading.Event()

    def start(self) -> None:
        self.samples.append((time.time(), _read_all()))  # the "before" of a moment right after start()
        super().start()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.samples.append((time.time(), _read_all()))
            self._stop_event.wait(self.interval_s)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()
        self.samples.append((time.time(), _read_all()))

    def largest_gap_s(self) -> float:
        times = [at for at, _ in self.samples]
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)

    def _at(self, t: float) -> dict[int, tuple[str, float]]:
        """The last sample taken at or before `t` (none before: empty)."""
        best: dict[int, tuple[str, float]] = {}
        for at, procs in self.samples:
            if at > t:
                break
            best = procs
        return best

    def between(self, start: float, end: float, label: Callable[[str], str | None]) -> Counter[str]:
        """CPU seconds per label between `start` and `end` (epoch seconds); unlabelled processes skipped."""
        before, out = self._at(start), Counter[str]()
        last_seen: dict[int, tuple[str, float]] = {}
        names: dict[int, str] = {}  # a process's last real command line (after an exec; an exiting one reads empty)
        for at, procs in self.samples:  # a process that exited before `end` counts up to its last sample
            if at > end:
                break
            last_seen.update(procs)
            for pid, (cmd, _) in procs.items():
                if not cmd.startswith("[") or pid not in names:
                    names[pid] = cmd
        for pid, (_, cpu) in last_seen.items():
            cmd = names[pid]
            name = label(cmd)
            if name is not None:
                out[name] += cpu - before.get(pid, (cmd, 0.0))[1]
        return out
