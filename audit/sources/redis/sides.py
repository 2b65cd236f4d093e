"""Snapshot several sides at once: one process per side (or one thread each), as one call.

A snapshot's client work (packing, reply parsing, digests) is Python: two sides in two threads of one
process share one interpreter lock, so each gets half a core. One process per side gives each its own.
The children are spawned (not forked), so a parent that already runs a JVM (a warm Spark session) or
threads is safe; each child connects with the side's URL, which travels through a pipe only. A spawned
child would first import the parent's main script, whatever runs the library (Airflow's `airflow`: 1.0
CPU-s and 160 MB per child, against 0.3 s and 112 MB); they start without it (:func:`_main_script_hidden`).
"""

from __future__ import annotations

import contextlib
import queue
import signal
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from audit.errors import SnapshotError
from audit.sources.redis.snapshot import SnapshotOptions, snapshot_side


@dataclass(frozen=True, slots=True)
class SideJob:
    """One side for :func:`snapshot_sides`. `url` may hold a password: it goes to the child process
    through a pipe only, never into a file or a message; `endpoint` (redacted) is what is shown."""

    side: str
    url: str
    endpoint: str
    dbs: list[int]
    out_dir: Path


def snapshot_sides(
    jobs: Sequence[SideJob],
    options: SnapshotOptions,
    *,
    processes: bool = True,
    on_keys: Callable[[str, int], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Snapshot every side at once; returns each side's snapshot.json content by side name.

    With `processes` (the default) each side runs in its own process (spawned: safe beside a running
    JVM), so the two sides' digest work uses two cores instead of sharing one interpreter lock; the
    reads of a key on both sides stay close in time. Without it, one thread per side. Errors come back
    as the same AuditError classes (SnapshotError, SourceConnectError) with the same messages.
    """
    if not processes:
        return _sides_in_threads(jobs, options, on_keys)
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    events: Any = ctx.Queue()
    procs = {j.side: ctx.Process(target=_side_process, args=(j, options, events), daemon=True) for j in jobs}
    with _main_script_hidden(), _interrupts_ignored():
        for p in procs.values():
            p.start()
    metas: dict[str, dict[str, Any]] = {}
    failure: BaseException | None = None
    # True until the loop ends by itself: an interrupt (Ctrl-C, SIGTERM as the CLI raises it) stops the children
    stopped = True
    try:
        while len(metas) < len(jobs) and failure is None:
            try:
                kind, side, payload = events.get(timeout=1.0)
            except queue.Empty:
                dead = [side for side, p in procs.items() if not p.is_alive() and side not in metas]
                if dead and events.empty():
                    failure = SnapshotError(f"{dead[0]} snapshot process died (exit code {procs[dead[0]].exitcode})")
                continue
            if kind == "keys" and on_keys is not None:
                on_keys(side, payload)
            elif kind == "done":
                metas[side] = payload
            elif kind == "error":
                failure = _rebuild_error(payload)
        stopped = False
    finally:
        for p in procs.values():
            if (failure is not None or stopped) and p.is_alive():
                p.terminate()  # what it wrote stays: parts and checkpoints are replaced whole
            p.join()
        events.close()
    if failure is not None:
        raise failure
    return metas


@contextlib.contextmanager
def _main_script_hidden() -> Iterator[None]:
    """While children start, the main module names no file and no module, so they import neither.

    multiprocessing reads `__main__.__spec__` (`python -m pkg.mod`) or else `__main__.__file__` (a script)
    when a child starts (`Process.start`), and the child imports that first, so that functions defined
    there can be unpickled. A snapshot process runs this module's function, with arguments from the
    library's own modules (a pair's key filter included); the main module is whatever runs the library.
    A function defined in a caller's main module cannot reach the children: pass one from another module."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    # None rather than deleted: the module's dict keeps its size for a thread iterating it meanwhile
    saved = {name: main.__dict__[name] for name in ("__file__", "__spec__") if name in main.__dict__}
    for name in saved:
        setattr(main, name, None)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(main, name, value)


@contextlib.contextmanager
def _interrupts_ignored() -> Iterator[None]:
    """While children start, SIGINT is ignored, and they inherit that: a terminal's Ctrl-C reaches the
    whole process group, and a child it met while still importing printed a KeyboardInterrupt traceback.
    The parent stops them instead (:func:`snapshot_sides`). Only the main thread may set a handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _exit_with_parent() -> None:
    """In a child: end the process when its parent is gone. A parent killed outright (SIGKILL, or SIGTERM
    without a handler) runs no `finally`, and its children went on reading the servers to the end."""
    import multiprocessing as mp
    import os
    from multiprocessing.connection import wait

    parent = mp.parent_process()
    if parent is None or parent.sentinel is None:
        return
    sentinel = parent.sentinel

    def watch() -> None:
        wait([sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _side_process(job: SideJob, options: SnapshotOptions, events: Any) -> None:
    """Child process: connect, snapshot, report progress (at most every 0.2 s) and the result."""
    from audit.errors import AuditError

    _exit_with_parent()
    pending = [0, time.monotonic()]

    def progress(n: int) -> None:
        pending[0] += n
        if time.monotonic() - pending[1] >= 0.2:
            events.put(("keys", job.side, pending[0]))
            pending[0], pending[1] = 0, time.monotonic()

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the parent shows it, once
            meta = snapshot_job(job, options, progress)
        if pending[0]:
            events.put(("keys", job.side, pending[0]))
        events.put(("done", job.side, meta))
    except AuditError as e:
        events.put(("error", job.side, (type(e).__name__, str(e), getattr(e, "where", ""))))
    except BaseException:  # a bug: the parent raises it with this traceback
        events.put(("error", job.side, ("BUG", traceback.format_exc(), "")))


def snapshot_job(job: SideJob, options: SnapshotOptions, on_keys: Callable[[int], None] | None) -> dict[str, Any]:
    """One side: connect with its URL and snapshot it (in this process)."""
    from audit.sources.redis.client import connect

    with connect(job.url, role=job.side) as client:
        return snapshot_side(
            client,
            side=job.side,
            endpoint=job.endpoint,
            dbs=job.dbs,
            out_dir=job.out_dir,
            options=options,
            on_keys=on_keys,
        )


def _rebuild_error(payload: tuple[str, str, str]) -> BaseException:
    from audit.errors import ConfigError, SourceConnectError

    name, message, where = payload
    if name == "SourceConnectError":
        return SourceConnectError(message, where=where)
    if name == "ConfigError":  # an operator's mistake stays one (exit 2), not a source error
        return ConfigError(message)
    if name == "BUG":
        return RuntimeError(f"snapshot process failed:\n{message}")
    return SnapshotError(message, where=where)


class _SideStopped(Exception):
    """Raised in a side's thread at its next batch once the command stops or the other side failed."""


def _sides_in_threads(
    jobs: Sequence[SideJob], options: SnapshotOptions, on_keys: Callable[[str, int], None] | None
) -> dict[str, dict[str, Any]]:
    """A thread per side. An interrupt or a side's failure stops the other threads at their next batch
    (what they wrote is kept, as a terminated process's is): a thread cannot be killed, and the pool's
    exit waited for every side to read its whole keyspace before the command could stop."""
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

    stop = threading.Event()

    def one(job: SideJob) -> dict[str, Any]:
        def batch_done(n: int) -> None:
            if stop.is_set():
                raise _SideStopped(job.side)
            if on_keys is not None:
                on_keys(job.side, n)

        return snapshot_job(job, options, batch_done)

    pool = ThreadPoolExecutor(len(jobs))
    try:
        futures = [pool.submit(one, j) for j in jobs]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        for future in done:  # the first failure stops the other side, as a failed process does
            if (error := future.exception()) is not None:
                raise error
        return {j.side: f.result() for j, f in zip(jobs, futures, strict=True)}
    except BaseException:
        stop.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
