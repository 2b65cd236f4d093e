"""Start-up work done in the background while a run's first stages wait on servers, child processes and
the JVM: Spark's session (audit/diff/spark.py), GX's modules (audit/gate/gx.py), matplotlib's
(audit/report/charts.py). Each costs seconds that would otherwise delay the stage that needs it.

The work is best effort: a failure is ignored here, and the stage that needs the result does the work
again and reports what fails. A :class:`Preload` is such work with its waiting side: the run starts
it, the stage that needs it waits for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


def in_background(name: str, work: Callable[[], object], after: threading.Thread | None = None) -> threading.Thread:
    """Run `work` in a daemon thread named `name`, once `after` (another such thread) has finished.

    Imports in two threads at once may wait on each other's half-imported modules; chaining the
    warm-ups with `after` keeps one importer at a time among them.
    """

    def run() -> None:
        if after is not None:
            after.join()
        try:
            work()
        except Exception:
            pass

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


class Preload:
    """Work a later stage needs (`work`, run by :func:`in_background` when started) and the wait for it.

    A Preload never started (a single stage run from the CLI, an Airflow task) waits for nothing: the
    stage then does the work itself.
    """

    def __init__(self, name: str, work: Callable[[], object]) -> None:
        self._name, self._work = name, work
        self._thread: threading.Thread | None = None

    def start(self, after: threading.Thread | None = None) -> threading.Thread:
        self._thread = in_background(self._name, self._work, after)
        return self._thread

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()
