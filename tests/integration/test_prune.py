"""`replica-audit prune` on real runs: the tests' own kind audited by the real CLI (and verifications of two
real redis-servers by `verify`), then aged by rewriting the end time their manifests record (the age prune
reads), then pruned by the real CLI. A stage started on a finished run (the CLI, one in another process held
mid-snapshot on a named pipe) reopens it: prune keeps it while the stage runs, after it crashed, and until
the run's next report."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.integration.helpers import run_cli
from tests.integration.test_own_kind import inventory, make_dirs

# run id -> days since it ended (None: never ended); `newest` really is the newest
AGES = {"old": 40.0, "mid": 10.0, "recent": 2.0, "newest": 0.0}
# verification runs under OUT/verifications, likewise; the newest of them is older than any audit run
VERIFICATION_AGES = {"v-old": 50.0, "v-mid": 20.0, "v-last": 15.0}
SUITE = "dirfiles_audit"
REPO = Path(__file__).parents[2]


def _age(out: Path, run_id: str, days: float | None, started_days: float | None = None) -> None:
    path = out / run_id / "manifest.json"
    manifest = json.loads(path.read_text())
    now = datetime.now(UTC)
    if days is not None:
        manifest["ended_at"] = (now - timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ")
    if started_days is not None:  # the run, and any stage on it
        manifest["started_at"] = (now - timedelta(days=started_days)).strftime("%Y-%m-%dT%H:%M:%SZ")
        if "stage_started_at" in manifest:
            manifest["stage_started_at"] = manifest["started_at"]
    path.write_text(json.dumps(manifest))


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(inventory, OUT) with four finished runs and one that never ended (a snapshot only), made once."""
    from audit.kernel.kind import registered_kinds

    root = tmp_path_factory.mktemp("prune")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REPLICA_AUDIT_KINDS", "dirfiles=tests.kinds.dirfiles")
        mp.delenv("REPLICA_AUDIT_HISTORY", raising=False)
        registered_kinds.cache_clear()
        master, replica = make_dirs(root)
        (master / "only-master.txt").write_text("m")  # a finding, so findings.parquet is written
        inv = inventory(root / "inv.yaml", master, replica)
        out = root / "out"
        for run_id in AGES:
            assert run_cli(["run", "-i", str(inv), "-o", str(out), "--run-id", run_id, "-q"], mp) == 1
        assert run_cli(["snapshot", "-i", str(inv), "-o", str(out), "--run-id", "unfinished"], mp) == 0
        yield inv, out
    registered_kinds.cache_clear()


@pytest.fixture
def out(template: tuple[Path, Path], tmp_path: Path, dirfiles_kind: None, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the template's OUT (symlinks copied as links), aged: the unfinished run started 100 days ago."""
    monkeypatch.delenv("REPLICA_AUDIT_HISTORY", raising=False)
    copy = tmp_path / "out"
    shutil.copytree(template[1], copy, symlinks=True)
    shutil.copy(template[0], tmp_path / "inv.yaml")
    for run_id, days in AGES.items():
        _age(copy, run_id, days)
    _age(copy, "unfinished", None, started_days=100)
    return copy


@pytest.fixture(scope="module")
def verifications(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """OUT/verifications holding three finished verification runs of two real redis-servers, made once."""
    from audit.local.redis_server import RedisServer, free_port

    root = tmp_path_factory.mktemp("verifications")
    source = RedisServer(free_port(), root / "source").start()
    target = RedisServer(free_port(), root / "target").start()
    try:
        for server in (source, target):
            server.client().mset({f"k:{i}": i for i in range(20)})
        with pytest.MonkeyPatch.context() as mp:
            mp.delenv("REPLICA_AUDIT_HISTORY", raising=False)
            for run_id in VERIFICATION_AGES:
                args = ["verify", "--source", source.url, "--target", target.url, "--run-id", run_id, "-q"]
                assert run_cli([*args, "-o", str(root / "out" / "verifications")], mp) == 0
    finally:
        source.stop()
        target.stop()
    yield root / "out" / "verifications"


@pytest.fixture
def out_with_verifications(out: Path, verifications: Path) -> Path:
    """`out` with a copy of the verification runs in OUT/verifications, aged."""
    shutil.copytree(verifications, out / "verifications", symlinks=True)
    for run_id, days in VERIFICATION_AGES.items():
        _age(out / "verifications", run_id, days)
    return out


def tree(out: Path) -> dict[str, int]:
    """Every path under OUT (symlinks as links, never followed) -> its size."""
    found = {}
    for root, dirs, files in os.walk(out):
        for name in dirs + files:
            p = Path(root) / name
            found[p.relative_to(out).as_posix()] = p.lstat().st_size
    return found


def _gx(out: Path, run_id: str, suite: str = SUITE) -> list[str]:
    return sorted(
        p.relative_to(out).as_posix()
        for base in ("gx/uncommitted/validations", "gx/data_docs/validations")
        for p in (out / base / suite).glob(f"{run_id}@*")
    )


def _files(out: Path, run_id: str) -> set[str]:
    return {
        p.relative_to(out / run_id).as_posix() for p in (out / run_id).rglob("*") if not p.is_dir() or p.is_symlink()
    }


def test_prune_deletes_old_runs_trims_older_than_snapshot_age_and_keeps_the_rest(out, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    before = tree(out)
    old_gx, mid_gx = _gx(out, "old"), _gx(out, "mid")
    assert len(old_gx) == 2 and len(mid_gx) == 2  # a result and a Data Docs page each
    mid_files = _files(out, "mid")
    assert {"snapshots/assets/master/files.json", "work/assets/state.json"} <= mid_files
    untouched = {r: _files(out, r) for r in ("recent", "newest", "unfinished")}

    code = run_cli(["prune", "--out", str(out), "--keep-days", "30", "--keep-snapshot-days", "7"], monkeypatch)
    printed = capsys.readouterr()
    assert code == 0, printed.err

    # old: the run directory and its GX result and page are gone; every other GX file is there
    assert not (out / "old").exists() and _gx(out, "old") == []
    assert _gx(out, "mid") == mid_gx
    assert [json.loads(line)["run_id"] for line in (out / "pruned-runs.jsonl").read_text().splitlines()] == ["old"]
    # mid: its bulky parts are gone, its results stay
    kept = {f for f in mid_files if not f.startswith(("snapshots/", "work/")) or f == "work/assets/state.json"}
    assert _files(out, "mid") == kept
    assert {"summary.json", "report.html", "manifest.json", "gate/validation_assets.json"} <= kept
    assert any(f.startswith("findings.parquet/") for f in kept) and any(f.startswith("metrics.parquet/") for f in kept)
    assert json.loads((out / "mid" / "manifest.json").read_text())["pruned"]["removed"] == ["snapshots", "work"]
    # recent (younger than both ages), newest and the run that never ended: untouched
    assert {r: _files(out, r) for r in untouched} == untouched
    # what it printed is what it freed
    after = tree(out)
    freed = sum(size for path, size in before.items() if path not in after)
    assert f"freed {freed / 1024:.3g} KiB ({freed} bytes)" in printed.out  # as the reports write sizes
    assert "deleted run old" in printed.out and "deleted snapshots and work files of run mid" in printed.out
    assert "kept unfinished: not finished" in printed.err.replace("\n", " ")

    # a second prune finds nothing more to do
    assert run_cli(["prune", "--out", str(out), "--keep-days", "30", "--keep-snapshot-days", "7"], monkeypatch) == 0
    assert "freed 0 B (0 bytes)" in capsys.readouterr().out and tree(out) == after


def test_dry_run_deletes_nothing(out, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    before = tree(out)
    args = ["prune", "-o", str(out), "--keep-days", "30", "--keep-snapshot-days", "1", "--dry-run"]
    assert run_cli(args, monkeypatch) == 0
    printed = capsys.readouterr().out
    assert tree(out) == before
    assert "would delete run old" in printed and "would delete snapshots and work files of run mid" in printed
    assert "would delete snapshots and work files of run recent" in printed and "newest" not in printed


def test_the_newest_finished_run_and_keep_last_survive_any_age(out, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    for run_id in AGES:
        _age(out, run_id, 400 + AGES[run_id])
    assert run_cli(["prune", "-o", str(out), "--keep-days", "0"], monkeypatch) == 0
    assert sorted(p.name for p in out.iterdir() if (p / "manifest.json").is_file()) == ["newest", "unfinished"]
    capsys.readouterr()
    assert (
        run_cli(["run", "-i", str(out.parent / "inv.yaml"), "-o", str(out), "--run-id", "later", "-q"], monkeypatch)
        == 1
    )


def test_an_unfinished_run_goes_only_when_keep_unfinished_days_says(out, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    # it started 100 days ago and was never resumed: kept by any other age, deleted whole past this one
    assert run_cli(["prune", "-o", str(out), "--keep-unfinished-days", "200"], monkeypatch) == 0
    assert (out / "unfinished" / "manifest.json").is_file()
    assert run_cli(["prune", "-o", str(out), "--keep-unfinished-days", "30"], monkeypatch) == 0
    assert not (out / "unfinished").exists() and "deleted run unfinished" in capsys.readouterr().out
    assert all((out / r / "manifest.json").is_file() for r in AGES)  # finished runs: no age given for them


def test_keep_last_keeps_the_n_newest_finished_runs(out, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    assert run_cli(["prune", "-o", str(out), "--keep-days", "1", "--keep-last", "3"], monkeypatch) == 0
    assert sorted(p.name for p in out.iterdir() if (p / "manifest.json").is_file()) == [
        "mid",
        "newest",
        "recent",
        "unfinished",
    ]


def test_symlinks_are_not_followed(out, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    outside = tmp_path / "elsewhere"
    (outside / "fake").mkdir(parents=True)
    (outside / "precious.txt").write_text("keep me")
    # an old, finished run that lives outside OUT, linked into OUT
    (outside / "fake" / "manifest.json").write_text(json.dumps({"run_id": "fake", "ended_at": "2000-01-01T00:00:00Z"}))
    (out / "fake").symlink_to(outside / "fake", target_is_directory=True)
    # links inside a run deleted whole and inside a run trimmed
    (out / "old" / "work" / "assets" / "link").symlink_to(outside, target_is_directory=True)
    (out / "mid" / "snapshots" / "link").symlink_to(outside, target_is_directory=True)
    (out / "mid" / "work" / "assets" / "file-link").symlink_to(outside / "precious.txt")
    assert run_cli(["prune", "-o", str(out), "--keep-days", "30", "--keep-snapshot-days", "7"], monkeypatch) == 0
    assert (outside / "precious.txt").read_text() == "keep me"
    assert (outside / "fake" / "manifest.json").is_file() and (out / "fake").is_symlink()
    assert not (out / "old").exists() and not (out / "mid" / "snapshots").exists()
    assert not (out / "mid" / "work" / "assets" / "file-link").is_symlink()


def test_runs_and_gates_go_on_after_a_prune_and_the_history_keeps_the_pruned_runs(out, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    from audit.history import open_history

    inv = out.parent / "inv.yaml"
    assert run_cli(["prune", "-o", str(out), "--keep-days", "30", "--keep-snapshot-days", "7"], monkeypatch) == 0
    index = out / "gx" / "data_docs" / "index.html"
    assert "old@assets" not in index.read_text() and "mid@assets" in index.read_text()  # (test below)
    assert run_cli(["run", "-i", str(inv), "-o", str(out), "--run-id", "after", "-q"], monkeypatch) == 1
    text = index.read_text()
    assert "after@assets" in text and "mid@assets" in text and "old@assets" not in text
    assert json.loads((out / "after" / "summary.json").read_text())["pairs"][0]["gate"]["data_docs"]

    with open_history(None, out=out) as store:
        assert {"old", "mid", "recent", "newest", "after"} <= {h["run_id"] for h in store.pair_history("assets")}

    # the daily report says the deleted run was pruned instead of linking to nothing
    capsys.readouterr()
    assert run_cli(["daily-report", "-o", str(out)], monkeypatch) == 0
    html = next((out / "reports").glob("daily-*.html")).read_text()
    row = html.split('data-run="old"', 1)[1].split("</tr>", 1)[0]
    assert "run directory pruned" in row and "href" not in row
    mid = html.split('data-run="mid"', 1)[1].split("</tr>", 1)[0]
    assert 'href="../mid/report.html"' in mid and "pruned" not in mid


BUILT_AT = re.compile(r"\?d=\d{8}T\d{6}\.\d+Z")
"""When GX built a Data Docs page, in the URL of its logo: the only part of a rebuilt index that differs."""
GX_FREE_PRUNE = """
import json, sys
from audit.cli.main import main
sys.argv = ["replica-audit", "prune", "-o", sys.argv[1], "--keep-days", "30"]
try:
    main()
except SystemExit as e:
    print(json.dumps({"code": e.code, "gx_imported": "great_expectations" in sys.modules}))
"""


def test_prune_drops_the_deleted_runs_rows_from_the_data_docs_index_as_gx_would_rebuild_it(out, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from audit.gate.gx import SITE, _locked, open_context

    index = out / "gx" / "data_docs" / "index.html"
    before = index.read_text()
    assert "old@assets" in before and "mid@assets" in before
    env = {**os.environ, "REPLICA_AUDIT_KINDS": "dirfiles=tests.kinds.dirfiles", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", GX_FREE_PRUNE, str(out)], env=env, capture_output=True, text=True)
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said == {"code": 0, "gx_imported": False}, done.stderr[-3000:]
    assert "dropped 1 row of deleted results from the Data Docs index" in done.stdout
    pruned = index.read_text()
    # the deleted run's row is gone (its page is), and no other byte of the page changed
    assert not (out / "old").exists() and "old@assets" not in pruned and "mid@assets" in pruned
    changed = [(a, b) for a, b in zip(before.split("\n"), pruned.split("\n"), strict=True) if a != b]
    assert len(changed) == 1 and changed[0][1].lstrip().startswith("data: [{")
    # it is the index GX itself builds from the results that are left, but for the time it was built
    with _locked(out / "gx"):
        open_context(out / "gx").build_data_docs(site_names=[SITE])
    assert BUILT_AT.sub("", index.read_text()) == BUILT_AT.sub("", pruned)


def test_an_index_in_a_form_prune_does_not_know_is_left_as_it_is(out, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    index = out / "gx" / "data_docs" / "index.html"
    lines = index.read_text().split("\n")
    [n] = [i for i, line in enumerate(lines) if "old@assets" in line]
    lines[n] = lines[n].replace("'", '"')  # as JSON would write it (a GX that renders its index otherwise)
    index.write_text("\n".join(lines))
    before = index.read_bytes()
    assert run_cli(["prune", "-o", str(out), "--keep-days", "30"], monkeypatch) == 0
    assert not (out / "old").exists() and index.read_bytes() == before
    said = " ".join(capsys.readouterr().err.split())
    assert "index.html: not in the form prune knows, so left as it is; the next gate rebuilds it" in said


def test_a_trimmed_run_cannot_be_resumed_and_a_resumed_run_is_unfinished_meanwhile(out, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    inv = out.parent / "inv.yaml"
    assert run_cli(["prune", "-o", str(out), "--keep-snapshot-days", "7"], monkeypatch) == 0
    capsys.readouterr()
    assert run_cli(["run", "-i", str(inv), "-o", str(out), "--resume", "mid", "-q"], monkeypatch) == 2
    assert "snapshots and work files were pruned" in capsys.readouterr().err

    from audit.inventory import load_inventory
    from audit.pipeline import start_run

    start_run(load_inventory(inv), out, "recent", reopen=True)  # what `run --resume recent` does first
    assert "ended_at" not in json.loads((out / "recent" / "manifest.json").read_text())
    before = tree(out / "recent")
    assert run_cli(["prune", "-o", str(out), "--keep-days", "0"], monkeypatch) == 0
    assert tree(out / "recent") == before


def test_one_prune_of_out_keeps_the_verification_runs_within_the_same_ages(
    out_with_verifications, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    out, verifications = out_with_verifications, out_with_verifications / "verifications"
    v_old_gx = _gx(verifications, "v-old", "redis_audit")
    assert len(v_old_gx) == 2 and len(_gx(verifications, "v-mid", "redis_audit")) == 2
    last = _files(verifications, "v-last")

    code = run_cli(["prune", "-o", str(out), "--keep-days", "30", "--keep-snapshot-days", "7"], monkeypatch)
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "deleted run old" in printed.out and "deleted run verifications/v-old" in printed.out
    assert "deleted snapshots and work files of run verifications/v-mid" in printed.out
    # v-old: gone whole, with its GX result and page in the verifications' own context, and logged there
    assert not (verifications / "v-old").exists() and _gx(verifications, "v-old", "redis_audit") == []
    index = (verifications / "gx" / "data_docs" / "index.html").read_text()
    assert "v-old@migration" not in index and "v-mid@migration" in index
    logged = (verifications / "pruned-runs.jsonl").read_text().splitlines()
    assert [json.loads(line)["run_id"] for line in logged] == ["v-old"]
    # v-mid: its bulky parts are gone; its certificate, report and results stay
    kept = _files(verifications, "v-mid")
    assert not any(f.startswith(("snapshots/", "work/")) and not f.endswith("state.json") for f in kept)
    assert {"certificate.json", "certificate.html", "report.html", "summary.json"} <= kept
    assert json.loads((verifications / "v-mid" / "manifest.json").read_text())["pruned"]
    # v-last is older than both ages but the newest verification: kept whole (audit runs are newer)
    assert _files(verifications, "v-last") == last
    assert "kept verifications/v-last: the newest finished run" in printed.err.replace("\n", " ")

    # and OUT/verifications pruned on its own, as an OUT: the newest is kept however old
    assert run_cli(["prune", "-o", str(verifications), "--keep-days", "0"], monkeypatch) == 0
    assert sorted(p.name for p in verifications.iterdir() if (p / "manifest.json").is_file()) == ["v-last"]
    assert "deleted run v-mid" in capsys.readouterr().out


def test_a_verifications_directory_that_is_a_symlink_is_not_followed(
    out_with_verifications, tmp_path, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    out, elsewhere = out_with_verifications, tmp_path / "elsewhere"
    (out / "verifications").rename(elsewhere)
    (out / "verifications").symlink_to(elsewhere, target_is_directory=True)
    before = tree(elsewhere)
    assert run_cli(["prune", "-o", str(out), "--keep-days", "0", "--keep-snapshot-days", "0"], monkeypatch) == 0
    assert tree(elsewhere) == before and (out / "verifications").is_symlink()
    assert "not pruned: verifications: a symbolic link, not followed" in capsys.readouterr().err.replace("\n", " ")


def test_a_path_that_cannot_be_deleted_is_named_and_exits_2(out, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    stuck = out / "old" / "snapshots" / "assets" / "master"
    if subprocess.run(["chattr", "+i", str(stuck)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here")
    try:
        assert run_cli(["prune", "-o", str(out), "--keep-days", "30"], monkeypatch) == 2
        printed = capsys.readouterr()
        assert "could not delete" in printed.err and str(stuck) in printed.err.replace("\n", "")
        assert (out / "old" / "manifest.json").is_file()  # still a run: the next prune finishes it
        assert not (out / "pruned-runs.jsonl").exists()
    finally:
        subprocess.run(["chattr", "-i", str(stuck)], check=True)
    assert run_cli(["prune", "-o", str(out), "--keep-days", "30"], monkeypatch) == 0
    assert not (out / "old").exists()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--keep-days", "-1"], "--keep-days -1.0: expected a number of 0 or more"),
        (["--keep-days", "nan"], "--keep-days nan: expected"),
        (["--keep-days", "abc"], "'--keep-days'"),
        (["--keep-snapshot-days", "1e400"], "--keep-snapshot-days inf: expected"),
        (["--keep-days", "1", "--keep-last", "-1"], "--keep-last -1: expected"),
        (["--keep-days", "1", "--keep-last", "0"], "--keep-last 0: expected 1 or more"),
        ([], "give --keep-days, --keep-snapshot-days or --keep-unfinished-days"),
    ],
)
def test_bad_values_are_usage_errors(args: list[str], said: str, tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    assert run_cli(["prune", "-o", str(tmp_path), *args], monkeypatch) == 2
    printed = capsys.readouterr().err
    assert said in printed and "Traceback" not in printed and "internal error" not in printed
    assert run_cli(["prune", "-o", str(tmp_path / "nowhere"), "--keep-days", "1"], monkeypatch) == 2
    assert "no such directory" in capsys.readouterr().err


# --- a stage started on a finished run reopens it ------------------------------------------------------
def _cli_apart(args: list[str]) -> subprocess.Popen[str]:
    """The real CLI in a process of its own (so the test can prune while it runs)."""
    env = {**os.environ, "REPLICA_AUDIT_KINDS": "dirfiles=tests.kinds.dirfiles", "PYTHONPATH": str(REPO)}
    env.pop("REPLICA_AUDIT_HISTORY", None)
    return subprocess.Popen(
        [sys.executable, "-m", "audit", *args],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _writer_once_read(fifo: Path, reader: subprocess.Popen[str], timeout: float = 120) -> int:
    """A descriptor writing into `fifo`, opened once `reader` has opened it to read (it then waits there)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:  # ENXIO: nobody reads it yet
            if e.errno != errno.ENXIO or reader.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the stage never read {fifo} (exit {reader.poll()})") from e
            time.sleep(0.05)


def _snapshot_waiting_on_a_fifo(tmp_path: Path, out: Path) -> tuple[Path, Path, subprocess.Popen[str]]:
    """A snapshot of run `mid` started apart, which waits reading a FIFO in the master's files until the test
    writes into it: (inventory, the FIFO, the stage's process)."""
    master, replica = make_dirs(tmp_path / "live")
    os.mkfifo(master / "slow.fifo")
    inv = inventory(tmp_path / "live.yaml", master, replica)
    return inv, master / "slow.fifo", _cli_apart(["snapshot", "-i", str(inv), "-o", str(out), "--run-id", "mid"])


@contextmanager
def _stage_mid_snapshot(fifo: Path, stage: subprocess.Popen[str]) -> Iterator[None]:
    """The block runs while the stage waits on `fifo` mid-snapshot; then the FIFO is written, and the stage
    must end well (it is killed if the block failed first)."""
    try:
        pipe = _writer_once_read(fifo, stage)
        try:
            yield
        finally:
            os.write(pipe, b"late")
            os.close(pipe)
        assert stage.wait(timeout=120) == 0, stage.communicate()[1][-3000:]
    finally:
        if stage.poll() is None:
            stage.kill()
            stage.wait()


def _manifest(out: Path, run_id: str) -> dict[str, str]:
    loaded: dict[str, str] = json.loads((out / run_id / "manifest.json").read_text())
    return loaded


def test_a_stage_rerun_on_a_finished_run_keeps_it_from_prune_while_it_runs_and_until_its_report(  # type: ignore[no-untyped-def]
    out, tmp_path, monkeypatch, capsys, caplog
) -> None:
    inv, fifo, stage = _snapshot_waiting_on_a_fifo(tmp_path, out)  # mid ended 10 days ago
    with _stage_mid_snapshot(fifo, stage):  # the stage is mid-snapshot
        assert run_cli(["prune", "-o", str(out), "--keep-days", "0", "--keep-snapshot-days", "0"], monkeypatch) == 0
        assert "kept mid: not finished" in capsys.readouterr().err.replace("\n", " ")
        assert (out / "mid" / "manifest.json").is_file() and (out / "mid" / "snapshots").is_dir()
        # a report by hand meanwhile (of the run as it is: the pair mid-snapshot, its earlier conclusions
        # forgotten, so exit 3) once ended the run under the stage, for a prune to delete; it now names
        # the stage and leaves it unfinished
        assert run_cli(["report", "-i", str(inv), "-o", str(out), "--run-id", "mid"], monkeypatch) == 3
        assert f"still running: snapshot of pair assets (pid {stage.pid})" in caplog.text
        assert "ended_at" not in _manifest(out, "mid")
    assert not (out / "old").exists()  # what was not running went

    # the stage ended, the run stays unfinished until its report: its summary no longer says what it holds
    assert "ended_at" not in _manifest(out, "mid") and _manifest(out, "mid")["stage_started_at"]
    assert "stages_running" not in _manifest(out, "mid")  # the stage's mark went with it
    assert run_cli(["prune", "-o", str(out), "--keep-days", "0"], monkeypatch) == 0
    assert (out / "mid" / "snapshots").is_dir()
    # its report ends it again (exit 3: the pair's audit stops at the snapshot re-run, the later stages were
    # not); then its age alone decides
    assert run_cli(["report", "-i", str(inv), "-o", str(out), "--run-id", "mid", "-q"], monkeypatch) == 3
    assert _manifest(out, "mid")["ended_at"]
    _age(out, "mid", 10)
    capsys.readouterr()
    assert run_cli(["prune", "-o", str(out), "--keep-days", "5"], monkeypatch) == 0
    assert not (out / "mid").exists() and "deleted run mid" in capsys.readouterr().out


def test_a_run_whose_stage_still_runs_is_kept_whatever_keep_unfinished_days_says(  # type: ignore[no-untyped-def]
    out, tmp_path, monkeypatch, capsys
) -> None:
    _, fifo, stage = _snapshot_waiting_on_a_fifo(tmp_path, out)
    # a snapshot working for two days (a huge keyspace, a slow source) is not a killed one
    with _stage_mid_snapshot(fifo, stage):
        _age(out, "mid", None, started_days=2)
        assert run_cli(["prune", "-o", str(out), "--keep-unfinished-days", "1"], monkeypatch) == 0
        said = capsys.readouterr()
        # it deleted the run under the snapshot, which then failed on its own files (exit 3)
        assert (out / "mid" / "manifest.json").is_file(), said.out
        assert f"kept mid: not finished, still running: snapshot of pair assets (pid {stage.pid})" in said.err.replace(
            "\n", " "
        )
    assert not (out / "unfinished").exists()  # the run no stage runs on (killed 100 days ago) went


def test_a_run_whose_report_runs_again_is_kept_until_that_report_ends(out, tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    # `report --run-id old` again (to append it to the history, say) while a prune of old runs ran: the
    # prune deleted the run under the report, which then wrote its summary and report.html into a
    # directory with no manifest, one no prune would ever take for a run
    state = out / "old" / "work" / "assets" / "state.json"
    content = state.read_bytes()
    state.unlink()
    os.mkfifo(state)  # the report waits there, reading it
    report = _cli_apart(["report", "-i", str(tmp_path / "inv.yaml"), "-o", str(out), "--run-id", "old", "-q"])
    try:
        pipe = _writer_once_read(state, report)
        try:
            assert run_cli(["prune", "-o", str(out), "--keep-days", "5"], monkeypatch) == 0
            said = capsys.readouterr()
            assert (out / "old" / "manifest.json").is_file(), said.out
            assert "kept old: not finished" in said.err.replace("\n", " "), said.err
        finally:
            os.write(pipe, content)
            os.close(pipe)
            kept = state.with_name("state.json.kept")
            kept.write_bytes(content)
            kept.replace(state)  # read again later as the file it was
        assert report.wait(timeout=120) == 1, report.communicate()[1][-3000:]
    finally:
        if report.poll() is None:
            report.kill()
            report.wait()
    assert _manifest(out, "old")["ended_at"] and "finishing" not in _manifest(out, "old")
    assert run_cli(["prune", "-o", str(out), "--keep-days", "5"], monkeypatch) == 0  # now its age alone decides
    assert "kept old" in capsys.readouterr().err.replace("\n", " ")  # it ended now, so it is young again


def test_a_stage_killed_outright_leaves_a_mark_that_no_longer_counts(  # type: ignore[no-untyped-def]
    out, tmp_path, monkeypatch
) -> None:
    inv, fifo, stage = _snapshot_waiting_on_a_fifo(tmp_path, out)
    try:
        os.close(_writer_once_read(fifo, stage))
    finally:
        stage.kill()  # SIGKILL: no finally of its own runs
        stage.wait()
    assert _manifest(out, "mid")["stages_running"]  # type: ignore[index]
    assert run_cli(["report", "-i", str(inv), "-o", str(out), "--run-id", "mid", "-q"], monkeypatch) != 0
    assert _manifest(out, "mid")["ended_at"]


def test_a_stage_that_crashed_on_a_finished_run_leaves_it_unfinished_and_young(
    out, tmp_path, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    master, _ = make_dirs(tmp_path / "live")
    gone = inventory(tmp_path / "gone.yaml", master, tmp_path / "nowhere")  # the replica's directory is gone
    _age(out, "mid", 10, started_days=100)
    assert run_cli(["snapshot", "-i", str(gone), "-o", str(out), "--run-id", "mid"], monkeypatch) == 3
    capsys.readouterr()
    # finished 10 days ago, started 100 days ago: only the stage that started on it now keeps it
    args = ["prune", "-o", str(out), "--keep-days", "0", "--keep-unfinished-days", "30"]
    assert run_cli(args, monkeypatch) == 0
    assert (out / "mid" / "manifest.json").is_file() and not (out / "old").exists()
    assert "kept mid: not finished" in capsys.readouterr().err.replace("\n", " ")
    # once that stage is as old as the age given, the run is an unfinished one like any other
    manifest = _manifest(out, "mid")
    manifest["stage_started_at"] = (datetime.now(UTC) - timedelta(days=31)).strftime("%Y-%m-%dT%H:%M:%SZ")
    (out / "mid" / "manifest.json").write_text(json.dumps(manifest))
    assert run_cli(args, monkeypatch) == 0
    assert not (out / "mid").exists()


def test_a_stage_that_starts_between_the_plan_and_the_deletion_keeps_its_run(out, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from audit import prune
    from audit.retention import Policy

    [plan] = prune.plan_prunes(out, Policy(keep_days=30, keep_snapshot_days=7))
    assert plan.decision.delete == ("old",) and plan.decision.trim == ("mid",)
    # the gate of `old` re-run by hand once prune had decided, before it deleted
    assert run_cli(["gate", "-i", str(out.parent / "inv.yaml"), "-o", str(out), "--run-id", "old"], monkeypatch) == 1
    result = prune.apply_prune(plan)
    assert (out / "old" / "snapshots").is_dir() and not (out / "mid" / "snapshots").exists()
    assert result.left == {"old": prune.CHANGED} and not result.failed and set(result.freed) == {"mid"}


def test_on_a_trimmed_run_only_the_gate_may_run_again(out, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    inv = str(out.parent / "inv.yaml")
    assert run_cli(["prune", "-o", str(out), "--keep-snapshot-days", "7"], monkeypatch) == 0
    for stage in ("snapshot", "diff", "recheck"):
        capsys.readouterr()
        assert run_cli([stage, "-i", inv, "-o", str(out), "--run-id", "mid"], monkeypatch) == 2, stage
        said = capsys.readouterr().err.replace("\n", " ")
        assert f"{stage} of run mid: its snapshots and work files were pruned" in said and "Traceback" not in said
    assert not (out / "mid" / "snapshots").exists()
    assert run_cli(["gate", "-i", inv, "-o", str(out), "--run-id", "mid"], monkeypatch) == 1  # the finding fails it
    assert "ended_at" not in _manifest(out, "mid")


def _held_history(out: Path) -> sqlite3.Connection:
    """OUT's results history held by a writer of the test's own: a report appending to it waits there (up to
    the store's busy timeout), after it wrote the run's end and before its last write of the manifest."""
    held = sqlite3.connect(out / "history.sqlite", isolation_level=None)
    held.execute("BEGIN EXCLUSIVE")
    return held


def _wait_for(what: str, done: Callable[[], bool], process: subprocess.Popen[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"never {what} (exit {process.poll()}): {process.communicate()[1][-3000:]}")
        time.sleep(0.05)


def test_a_stage_started_while_the_report_runs_keeps_the_run_unfinished(out, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    inv = str(out.parent / "inv.yaml")
    aged = _manifest(out, "mid")["ended_at"]
    held = _held_history(out)
    report = _cli_apart(["report", "-i", inv, "-o", str(out), "--run-id", "mid", "-q"])
    try:
        _wait_for("wrote the run's end", lambda: _manifest(out, "mid").get("ended_at") not in (aged, None), report)
        # the report waits on the history; a stage re-run starts on the run meanwhile, and ends
        assert run_cli(["snapshot", "-i", inv, "-o", str(out), "--run-id", "mid"], monkeypatch) == 0
        reopened = _manifest(out, "mid")
        assert "ended_at" not in reopened
    finally:
        held.execute("ROLLBACK")
        held.close()
        said = report.communicate(timeout=120)[1]
    assert report.returncode == 1, said[-3000:]  # the report of the run as it was: the gate failed
    # the report did not end the run again under the stage, nor undo what the stage wrote, and said so
    after = _manifest(out, "mid")
    assert "ended_at" not in after and after["stage_started_at"] == reopened["stage_started_at"]
    assert after["stages_started"] == reopened["stages_started"]
    assert "a stage started on it while its report was written" in said.replace("\n", " ")
    capsys.readouterr()
    assert run_cli(["prune", "-o", str(out), "--keep-days", "0", "--keep-snapshot-days", "0"], monkeypatch) == 0
    assert "kept mid: not finished" in capsys.readouterr().err.replace("\n", " ")
    assert (out / "mid" / "snapshots").is_dir()


def test_a_verification_is_not_trimmed_before_its_certificate_is_written(  # type: ignore[no-untyped-def]
    out_with_verifications, tmp_path, monkeypatch, capsys
) -> None:
    from audit.local.redis_server import RedisServer, free_port

    verifications = out_with_verifications / "verifications"
    source = RedisServer(free_port(), tmp_path / "source").start()
    target = RedisServer(free_port(), tmp_path / "target").start()
    try:
        for server in (source, target):
            server.client().mset({f"k:{i}": i for i in range(20)})
        held = _held_history(verifications)
        args = ["verify", "--source", source.url, "--target", target.url, "-o", str(verifications), "-q"]
        verify = _cli_apart([*args, "--run-id", "v-held"])
        try:
            _wait_for(
                "wrote the run's end",
                lambda: (
                    (verifications / "v-held" / "manifest.json").is_file()
                    and "ended_at" in _manifest(verifications, "v-held")
                ),
                verify,
            )
            # another verification ended since (v-held sorts first of two ends in one second): v-held is
            # not the newest, so only being unfinished keeps it from the trim, until its certificate is written
            _age(verifications, "v-last", 0)
            capsys.readouterr()
            assert run_cli(["prune", "-o", str(verifications), "--keep-snapshot-days", "0"], monkeypatch) == 0
            assert "kept v-held: not finished" in capsys.readouterr().err.replace("\n", " ")
            assert (verifications / "v-held" / "snapshots").is_dir()
        finally:
            held.execute("ROLLBACK")
            held.close()
            said = verify.communicate(timeout=300)[1]
    finally:
        source.stop()
        target.stop()
    assert verify.returncode == 0, said[-3000:]
    cert = json.loads((verifications / "v-held" / "certificate.json").read_text())
    assert cert["verdict"] == "passed" and cert["digests_equal"] and cert["source"]["content"]["digest"]
    # written: the run is finished, and a trim keeps its certificate
    assert "finishing" not in _manifest(verifications, "v-held")
    assert run_cli(["prune", "-o", str(verifications), "--keep-snapshot-days", "0"], monkeypatch) == 0
    assert not (verifications / "v-held" / "snapshots").exists()
    assert json.loads((verifications / "v-held" / "certificate.json").read_text()) == cert
    assert (verifications / "v-held" / "certificate.html").is_file()
