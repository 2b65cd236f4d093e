"""`make test` keeps a module's tests in one worker (`--dist loadfile`): check that it really does.

It ran with `--dist loadgroup` and `xdist_group` marks. Under pytest 9.2 with pytest-xdist 3.8 those marks
grouped nothing: xdist writes the group into `item._nodeid`, which pytest 9.2's `nodeid` no longer reads.
Every test was its own group, a module's tests were spread over the workers, and a module-scoped
fixture ran once per worker that got one of its tests (a 3-minute run of eleven Pika pairs, three times
in one CI run). Each test here reads the log of its module's fixture set-ups: one, by its own worker.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def setups(tmp_path_factory: pytest.TempPathFactory, worker_id: str, testrun_uid: str) -> Path:
    # each worker has its own base temp under the run's: the parent is shared by the workers of this run
    log = tmp_path_factory.getbasetemp().parent / f"module-setups-{testrun_uid}.txt"
    with log.open("a") as f:
        f.write(f"{worker_id}\n")
    return log


@pytest.mark.parametrize("n", range(8))
def test_a_modules_fixture_is_set_up_once_by_the_worker_that_runs_its_tests(
    setups: Path, worker_id: str, n: int
) -> None:
    assert setups.read_text().split() == [worker_id], f"test {n}: module fixture set up by {setups.read_text().split()}"
