"""audit/background.py: start-up work in a daemon thread, in order, best effort; and the CLI's warm-ups."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from audit.background import Preload, in_background


def test_work_runs_after_the_thread_it_follows() -> None:
    order: list[str] = []
    first = in_background("first", lambda: (time.sleep(0.2), order.append("first")))
    second = in_background("second", lambda: order.append("second"), after=first)
    second.join(5)
    assert order == ["first", "second"] and second.daemon and second.name == "second"


def test_a_failure_ends_the_thread_quietly(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    raised: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))

    def fails() -> None:
        raise ImportError("no such module")

    failing = in_background("fails", fails)
    after = in_background("after", lambda: None, after=failing)
    after.join(5)
    assert not failing.is_alive() and not after.is_alive() and raised == []


def test_a_preload_is_waited_for_once_started_and_not_before() -> None:
    done: list[str] = []
    preload = Preload("slow", lambda: (time.sleep(0.2), done.append("loaded")))
    preload.wait()  # never started: nothing to wait for
    assert done == []
    preload.start()
    preload.wait()
    assert done == ["loaded"]


def test_the_run_warm_up_loads_what_the_gate_and_the_report_need() -> None:
    # in a fresh interpreter: this one has GX and matplotlib loaded already
    code = (
        "import sys, threading\n"
        "from audit.cli.main import _warm_up\n"
        "assert 'great_expectations' not in sys.modules and 'matplotlib' not in sys.modules\n"
        "_warm_up(False)\n"
        "for t in threading.enumerate():\n"
        "    if t.name.endswith('warm-up'): t.join(300)\n"
        "print('great_expectations' in sys.modules, 'matplotlib.figure' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True)
    assert done.stdout.split() == ["True", "True"]


def test_the_spark_warm_up_leaves_the_run_thread_free_to_import_pyspark() -> None:
    # pyspark and pyspark.sql import each other: imported by two threads at once, one gets a
    # half-imported module (a run ended "cannot import name 'SQLContext'" that way); GX's import, in
    # the background later, imports modules that import the classic DataFrame's
    code = (
        "import sys\n"
        "from audit.diff.spark import warm_up\n"
        "assert 'pyspark' not in sys.modules\n"
        "warm_up()\n"
        "for name in ('pyspark.sql', 'pyspark.sql.classic.dataframe'):\n"
        "    spec = sys.modules[name].__spec__\n"
        "    assert not getattr(spec, '_initializing', False), name + ' still being imported'\n"
        "import audit.diff.keyspace\n"
        "print('imported')\n"
    )
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
        assert done.stdout.split() == ["imported"], done.stderr[-2000:]
