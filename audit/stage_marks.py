"""Which stages are running on a run, as marks in its manifest.

A stage marks itself in manifest.json (`stages_running`, one entry per pair and stage) when it starts, and
removes its mark when it ends, however it ends. A report that finds a stage still running does not end
the run: a run that says it ended while a stage still writes its work files would be summarised half
done, and pruned as finished under the stage (audit/pipeline.py, finishing_run).

A mark counts only while it is provably running: written on this host by a process that is still alive,
with the start time it had (so a reused pid is not taken for it). A stage killed outright leaves a mark
that no longer counts; a mark from another host cannot be checked from here and is not counted either,
which is how runs split across Airflow workers behaved before marks existed.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from audit.layout import utc_now_text

RUNNING = "stages_running"


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat); None off Linux."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()  # the command name before ")" may hold spaces
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _key(pair: str, stage: str) -> str:
    return f"{pair}/{stage}"


def mark(manifest: dict[str, Any], pair: str, stage: str) -> None:
    """Record in `manifest` that this process runs `stage` of `pair` (a later start of the same replaces it)."""
    marks = manifest.get(RUNNING)
    if not isinstance(marks, dict):
        marks = manifest[RUNNING] = {}
    pid = os.getpid()
    marks[_key(pair, stage)] = {
        "pid": pid,
        "host": socket.gethostname(),
        "start_ticks": _start_ticks(pid),
        "since": utc_now_text(),
    }


def unmark(manifest: dict[str, Any], pair: str, stage: str) -> bool:
    """Remove this process's mark of `stage` of `pair`; a mark another process has written since stays.
    Whether the manifest changed."""
    marks = manifest.get(RUNNING)
    if not isinstance(marks, dict):
        return False
    mine = marks.get(_key(pair, stage))
    if not isinstance(mine, dict) or mine.get("pid") != os.getpid() or mine.get("host") != socket.gethostname():
        return False
    del marks[_key(pair, stage)]
    if not marks:
        del manifest[RUNNING]
    return True


def _alive(entry: dict[str, Any]) -> bool:
    pid = entry.get("pid")
    if entry.get("host") != socket.gethostname() or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    ticks = entry.get("start_ticks")
    return ticks is None or _start_ticks(pid) == ticks


def running(manifest: dict[str, Any], of_pair: str | None = None) -> list[str]:
    """The stages `manifest` marks (of pair `of_pair`, or of any) that are provably still running, as
    "<stage> of pair <pair> (pid N)"."""
    marks = manifest.get(RUNNING)
    if not isinstance(marks, dict):
        return []
    said = []
    for key, entry in sorted(marks.items()):
        pair, slash, stage = key.rpartition("/")  # as _key wrote it
        if of_pair is not None and pair != of_pair:
            continue
        if isinstance(entry, dict) and slash and _alive(entry):
            said.append(f"{stage} of pair {pair} (pid {entry['pid']})")
    return said
