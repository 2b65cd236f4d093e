"""audit/layout.py: a run's own files, read back; one damaged is named, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from audit.errors import StageInputError
from audit.kernel.state import PairState
from audit.layout import RunDir, read_json_object, write_json
from audit.outcome import EXIT_USAGE, exit_code_of_error


def run_dir(tmp_path: Path) -> RunDir:
    run = RunDir(tmp_path, "r1")
    write_json(run.manifest, {"run_id": "r1", "started_at": "2026-01-01T00:00:00Z"})
    run.save_state(PairState(pair="p", kind="redis"))
    return run


def cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def test_a_run_reads_back_what_it_wrote(tmp_path: Path) -> None:
    run = run_dir(tmp_path)
    assert run.load_manifest()["run_id"] == "r1"
    state = run.load_state("p")
    assert state is not None and state.kind == "redis"
    assert run.load_state("other") is None and RunDir(tmp_path, "r2").load_manifest() == {}


@pytest.mark.parametrize(
    "damage",
    [cut, lambda p: p.write_text(""), lambda p: p.write_bytes(b"\xff\xfe{"), lambda p: p.write_text("[1, 2]")],
    ids=["cut in half", "empty", "not UTF-8", "not an object"],
)
def test_a_damaged_manifest_or_state_is_named_as_a_stage_input_error(tmp_path: Path, damage) -> None:  # type: ignore[no-untyped-def]
    # a truncated manifest.json made `report` and `run --resume` exit 4 with a JSONDecodeError traceback
    run = run_dir(tmp_path)
    for path, read in ((run.manifest, run.load_manifest), (run.state_file("p"), lambda: run.load_state("p"))):
        damage(path)
        with pytest.raises(StageInputError) as e:
            read()
        message = str(e.value)
        assert message.startswith(f"{path}: damaged (") and "\n" not in message
        assert exit_code_of_error(e.value) == EXIT_USAGE


def test_read_json_object_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    path.write_text('{"run_id": "r1", "pairs": [')
    with pytest.raises(StageInputError, match=r"summary\.json: damaged \(Expecting value: line 1"):
        read_json_object(path)


def test_a_write_that_fills_the_disk_keeps_the_old_file_and_names_it(tmp_path: Path) -> None:
    # a full disk (here: a file-size limit) mid-write once left half a page where the last one had been
    page = tmp_path / "report.html"
    page.write_text("the last report")
    script = (
        "import resource, signal, sys\n"
        "from pathlib import Path\n"
        "from audit.errors import ConfigError\n"
        "from audit.layout import write_text\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))\n"
        "try:\n"
        "    write_text(Path(sys.argv[1]), 'x' * 100_000)\n"
        "except ConfigError as e:\n"
        "    print(e)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(page)], capture_output=True, text=True, check=True)
    assert f"output {tmp_path}: cannot write report.html: File too large" in done.stdout
    assert page.read_text() == "the last report"
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]  # no temporary file left behind
