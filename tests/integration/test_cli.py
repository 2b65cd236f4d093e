"""The CLI's edges: usage errors, --version, --json, --quiet, a bug in one pair, --resume.

The pairs are of the tests' own kind (tests/kinds/dirfiles.py: two directories of files), so no server
is needed to exercise what every kind shares."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from audit.errors import SourceError
from tests.integration.helpers import latest_run, run_cli, summary, write_inventory
from tests.integration.test_own_kind import make_dirs
from tests.kinds.dirfiles import FilesCheck


def two_pairs(tmp_path: Path) -> Path:
    pairs = []
    for name in ("good", "bad"):
        m, r = make_dirs(tmp_path / name)
        pairs.append({"name": name, "kind": "dirfiles", "master": {"path": str(m)}, "replica": {"path": str(r)}})
    inv = tmp_path / "inv.yaml"
    inv.write_text(json.dumps({"pairs": pairs}))
    return inv


@pytest.mark.parametrize(
    "args",
    [["run"], ["run", "-o", "x"], ["run", "-i", "x", "-o", "y", "--no-such-option"], ["no-such-command"], []],
)
def test_usage_errors_exit_2_without_a_traceback(args: list[str], monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    assert run_cli(args, monkeypatch) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err


def test_version(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    from audit.pipeline import tool_version

    assert run_cli(["--version"], monkeypatch) == 0
    assert capsys.readouterr().out.strip() == f"replica-audit {tool_version()}"


def _bug_in_pair_bad(stage: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests' kind meets a bug in `stage` of the pair named bad, and works for every other pair."""
    real = getattr(FilesCheck, stage)

    def failing(self, ctx):  # type: ignore[no-untyped-def]
        if ctx.pair.name == "bad":
            raise ZeroDivisionError("a bug met in one pair")
        return real(self, ctx)

    monkeypatch.setattr(FilesCheck, stage, failing)


def test_a_bug_in_one_pair_ends_that_pair_only(dirfiles_kind, tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    _bug_in_pair_bad("diff", monkeypatch)
    assert run_cli(["run", "-i", str(two_pairs(tmp_path)), "-o", str(tmp_path / "out")], monkeypatch) == 4
    root = latest_run(tmp_path / "out")
    pairs = {p["pair"]: p for p in summary(root)["pairs"]}
    assert pairs["good"]["status"] == "passed" and pairs["bad"]["status"] == "error"
    assert pairs["bad"]["error"]["internal"] and pairs["bad"]["error"]["exit_code"] == 4
    state = json.loads((root / "work" / "bad" / "state.json").read_text())
    assert "ZeroDivisionError: a bug met in one pair" in state["error"]["traceback"]
    assert "ZeroDivisionError" in capsys.readouterr().err  # and the log has it too


def test_a_stage_says_which_pairs_it_did_and_which_failed(dirfiles_kind, tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    _bug_in_pair_bad("snapshot", monkeypatch)
    assert run_cli(["snapshot", "-i", str(two_pairs(tmp_path)), "-o", str(tmp_path / "out")], monkeypatch) == 4
    said = capsys.readouterr()
    assert "snapshot: done for good; failed for bad; run_id " in said.err, said
    # stdout is the run id alone, whatever the pairs: RID=$(replica-audit snapshot ...) for the next stages
    assert said.out == f"{latest_run(tmp_path / 'out').name}\n", said.out


def test_json_and_quiet(dirfiles_kind, tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    inv = two_pairs(tmp_path)
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "a"), "--json"], monkeypatch) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["verdict"] == "passed" and len(out.strip().splitlines()) == 1
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "b"), "--quiet"], monkeypatch) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_resume_goes_on_from_the_last_completed_stage(dirfiles_kind, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    inv = two_pairs(tmp_path)
    real_snapshot, real_diff = FilesCheck.snapshot, FilesCheck.diff

    def unreachable(self, ctx):  # type: ignore[no-untyped-def]
        raise SourceError(f"pair {ctx.pair.name}: the store went away mid-audit", where="/x")

    monkeypatch.setattr(FilesCheck, "diff", unreachable)
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 3
    run_id = latest_run(tmp_path / "out").name
    assert {p["status"] for p in summary(latest_run(tmp_path / "out"))["pairs"]} == {"error"}

    snapshots = []

    def counted(self, ctx):  # type: ignore[no-untyped-def]
        snapshots.append(ctx.pair.name)
        return real_snapshot(self, ctx)

    monkeypatch.setattr(FilesCheck, "snapshot", counted)
    monkeypatch.setattr(FilesCheck, "diff", real_diff)
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out"), "--resume", run_id], monkeypatch) == 0
    assert snapshots == []  # the snapshots were done: only diff, recheck and gate ran again
    assert latest_run(tmp_path / "out").name == run_id
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out"), "--resume", "nope"], monkeypatch) == 2


def test_a_relative_out_directory_works_for_run_and_for_each_stage(dirfiles_kind, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # `-o out` from the working directory: the gate's result path was once taken relative to the relative
    # run root while GX had resolved it, so the gate failed on every relative --out
    inv = two_pairs(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert run_cli(["run", "-i", str(inv), "-o", "out"], monkeypatch) == 0
    root = latest_run(tmp_path / "out")
    assert {p["status"] for p in summary(root)["pairs"]} == {"passed"}
    for stage in ("diff", "recheck", "gate"):
        assert run_cli([stage, "-i", str(inv), "-o", "out", "--run-id", root.name], monkeypatch) == 0, stage
    state = json.loads((root / "work" / "good" / "state.json").read_text())
    assert state["gate"]["results_path"] == "gate/validation_good.json"


@pytest.mark.parametrize("command", ["run", "snapshot", "daily-report"])
def test_an_out_uri_is_a_usage_error_and_creates_nothing(command, dirfiles_kind, tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    # Path("s3a://bucket/out") is "s3a:/bucket/out": once, a run wrote a local ./s3a:/bucket/out tree
    inv = two_pairs(tmp_path)
    monkeypatch.chdir(tmp_path)
    args = [command, "-o", "s3a://bucket/out"] + ([] if command == "daily-report" else ["-i", str(inv)])
    assert run_cli(args, monkeypatch) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "'--out'" in err and "s3a://bucket/out" in err and "local path" in err
    assert "Traceback" not in err
    assert not (tmp_path / "s3a:").exists()


@pytest.mark.parametrize("stage", ["snapshot", "diff", "recheck"])
def test_every_stage_that_may_run_spark_takes_the_spark_options(stage, dirfiles_kind, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Pika's binlog scan and a Redis Cluster's shards run as Spark jobs in snapshot and recheck too
    from audit.diff import spark

    monkeypatch.setattr(spark, "_overrides", {})
    inv = two_pairs(tmp_path)
    assert run_cli(["snapshot", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 0
    run_id = latest_run(tmp_path / "out").name
    if stage == "recheck":
        assert run_cli(["diff", "-i", str(inv), "-o", str(tmp_path / "out"), "--run-id", run_id], monkeypatch) == 0
    args = [stage, "-i", str(inv), "-o", str(tmp_path / "out"), "--run-id", run_id]
    args += ["--spark-master", "local[1]", "--spark-conf", "spark.sql.shuffle.partitions=3"]
    assert run_cli(args, monkeypatch) == 0
    conf = spark.session_conf()
    assert conf["spark.master"] == "local[1]" and conf["spark.sql.shuffle.partitions"] == "3"


def test_a_password_typed_unencoded_is_a_config_error_and_written_nowhere(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    # urlsplit reads "ab/s3cret@h" as host "ab" and path "/s3cret@h": the URL was shown as it was, and a
    # client's "port could not be cast" error quoted the password's first part
    pairs = [
        {"name": "r", "kind": "redis", "master": "redis://:Zq9/s3cret@127.0.0.1:1", "replica": "redis://127.0.0.1:2"},
        {
            "name": "m",
            "kind": "mysql",
            "master": "mysql://a:Zq9?s3cret@127.0.0.1:1",
            "replica": "mysql://a@127.0.0.1:2",
        },
    ]
    inv = tmp_path / "inv.yaml"
    inv.write_text(json.dumps({"pairs": pairs}))
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 2
    said = capsys.readouterr()
    assert "Traceback" not in said.err
    # both pairs named when the inventory is read, before any run starts
    assert "pairs[0] (r).master" in said.err and "pairs[1] (m).master" in said.err
    assert " ".join(said.err.split()).count("percent-encode") == 2
    written = [p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert not [b for b in written if b"s3cret" in b or b"Zq9" in b]
    assert "s3cret" not in said.out + said.err and "Zq9" not in said.out + said.err


@pytest.mark.parametrize(
    "value",
    [
        "Zq9s3cretpw",
        "auditor:Zq9s3cretpw@127.0.0.1:1",
        '{"conn_type": "redis", "host": "h", "password": ["Zq9s3cretpw"]}',
    ],
)
def test_a_connection_whose_value_is_no_url_is_a_config_error_and_written_nowhere(
    value: str, tmp_path, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    # AIRFLOW_CONN_<ID> holding just the password, or a URL without its scheme, was quoted whole in the
    # error: on stderr, in summary.json, manifest.json, state.json and report.html; a password as a JSON
    # list was a TypeError (exit 4, a traceback)
    monkeypatch.setenv("AIRFLOW_CONN_SIDE", value)
    pairs = [
        {"name": "r", "kind": "redis", "master": "conn:side", "replica": "redis://127.0.0.1:2"},
        {"name": "m", "kind": "mysql", "master": "conn:side", "replica": "mysql://a@127.0.0.1:2"},
    ]
    inv = write_inventory(tmp_path / "inv.yaml", pairs)
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 2
    said = capsys.readouterr()
    assert "Traceback" not in said.err and "Zq9s3cretpw" not in said.out + said.err
    written = [p for p in (tmp_path / "out").rglob("*") if p.is_file() and b"Zq9s3cretpw" in p.read_bytes()]
    assert not written


@pytest.mark.parametrize("command", ["snapshot", "diff", "recheck", "gate", "report", "run"])
@pytest.mark.parametrize("run_id", ["../escaped", "nosuch", "gx", "verifications"])
def test_a_run_id_names_a_run_under_out_and_a_later_stage_needs_it_to_exist(
    command, run_id, dirfiles_kind, tmp_path, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    # "../escaped" once wrote a run beside --out; "nosuch" was invented (a manifest, a fake history row);
    # "gx" wrote a manifest into the GX context, and a run "verifications" would hide the verification runs
    inv = two_pairs(tmp_path)
    out = tmp_path / "out"
    code = run_cli([command, "-i", str(inv), "-o", str(out), "--run-id", run_id], monkeypatch)
    new_run_allowed = command in ("snapshot", "run") and run_id == "nosuch"
    assert code == (0 if new_run_allowed else 2)
    assert not (tmp_path / "escaped").exists()
    if not new_run_allowed:
        assert not (out / run_id).exists()
        assert "Traceback" not in capsys.readouterr().err


def test_a_summary_of_some_pairs_keeps_the_others_verdicts(dirfiles_kind, tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    # `report --pair good` (or a resume with an edited inventory) once rewrote a failed run as passed, exit 0
    inv = two_pairs(tmp_path)

    def unreachable(self, ctx):  # type: ignore[no-untyped-def]
        if ctx.pair.name == "bad":
            raise SourceError(f"pair {ctx.pair.name}: the store went away mid-audit", where="/x")
        return real_diff(self, ctx)

    real_diff = FilesCheck.diff
    monkeypatch.setattr(FilesCheck, "diff", unreachable)
    out = str(tmp_path / "out")
    assert run_cli(["run", "-i", str(inv), "-o", out], monkeypatch) == 3
    root = latest_run(tmp_path / "out")
    for args in (["report", "--run-id", root.name, "--pair", "good"], ["run", "--resume", root.name, "-p", "good"]):
        capsys.readouterr()
        assert run_cli([*args, "-i", str(inv), "-o", out], monkeypatch) == 3, args
        s = summary(root)
        assert [p["pair"] for p in s["pairs"]] == ["good"] and s["verdict"] != "passed"
        assert s["pairs_not_in_this_summary"] == [{"pair": "bad", "status": "error", "exit_code": 3}]
        assert "bad: in this run but not in this summary" in capsys.readouterr().out
    # a run of one pair from the start is that pair's run: the others are not part of it
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "one"), "-p", "good"], monkeypatch) == 0
    assert "pairs_not_in_this_summary" not in summary(latest_run(tmp_path / "one"))
    # a new run under the id of one that exists would mix the two: refused, the run left as it was
    before = (root / "manifest.json").read_text()
    capsys.readouterr()
    assert run_cli(["run", "-i", str(inv), "-o", out, "--run-id", root.name], monkeypatch) == 2
    assert f"--run-id {root.name}: a run of that id is already in" in capsys.readouterr().err
    assert (root / "manifest.json").read_text() == before


def test_an_out_that_cannot_be_a_directory_and_a_verify_option_that_is_not_yaml_exit_2(
    dirfiles_kind, tmp_path, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    inv = two_pairs(tmp_path)
    (tmp_path / "afile").write_text("")
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "afile")], monkeypatch) == 2
    assert "output directory" in capsys.readouterr().err
    verify = ["verify", "--source", "redis://127.0.0.1:1", "--target", "redis://127.0.0.1:2", "-o", str(tmp_path)]
    assert run_cli([*verify, "--option", "compare=[unclosed"], monkeypatch) == 2
    err = capsys.readouterr().err
    assert "--option 'compare=[unclosed': the value is not YAML" in " ".join(err.split()) and "Traceback" not in err


def test_a_history_store_that_cannot_be_written_is_said(dirfiles_kind, tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    inv = two_pairs(tmp_path)
    # a store no one answers for: a URL no store takes is refused before the audit (below)
    args = ["run", "-i", str(inv), "-o", str(tmp_path / "out"), "--history", "mysql://u:pw@127.0.0.1:1/db"]
    assert run_cli(args, monkeypatch) == 0  # the verdict stands
    err = " ".join(capsys.readouterr().err.split())
    assert "results history" in err and "not written" in err and ":pw@" not in err
    # the run is missing from the history (the daily report's trends) until it is appended: say how
    run_id = latest_run(tmp_path / "out").name
    assert f"append it later with `replica-audit report --run-id {run_id}`" in err, err
    assert run_cli([*args, "--json"], monkeypatch) == 0
    assert "history" not in json.loads(capsys.readouterr().out)  # --json prints summary.json as written


ENDS = """
import atexit, pathlib, sys
atexit.register(pathlib.Path(sys.argv[1]).write_text, "exit handlers ran")
from audit.cli.main import console
sys.argv = ["replica-audit", *sys.argv[2:]]
console()
raise SystemExit(99)  # console() never returns
"""


@pytest.mark.parametrize(
    ("args", "code", "stream", "text"),
    [(["--version"], 0, "stdout", "replica-audit "), (["run"], 2, "stderr", "--inventory")],
)
def test_the_command_ends_with_its_code_its_output_and_the_exit_handlers(
    tmp_path: Path, args: list[str], code: int, stream: str, text: str
) -> None:
    # console() skips the interpreter's teardown: nothing written may be lost, and the code is the command's
    import subprocess
    import sys

    marker = tmp_path / "marker"
    done = subprocess.run([sys.executable, "-c", ENDS, str(marker), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == code, done.stderr[-2000:]
    assert text in getattr(done, stream)
    assert marker.read_text() == "exit handlers ran"


def test_a_message_as_exit_code_is_printed_and_ends_with_1(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    # as the interpreter does with SystemExit("..."); _exit_now is captured so pytest's process lives on
    from audit.cli import main as cli

    def exits_with_a_message() -> None:
        raise SystemExit("stopped: no inventory")

    codes: list[int] = []
    monkeypatch.setattr(cli, "main", exits_with_a_message)
    monkeypatch.setattr(cli, "_exit_now", codes.append)
    cli.console()
    assert codes == [1] and "stopped: no inventory" in capsys.readouterr().err


def test_the_installed_command_is_the_console_entry_point() -> None:
    import subprocess
    import sys

    from audit.pipeline import tool_version

    exe = Path(sys.executable).with_name("replica-audit")
    done = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, f"replica-audit {tool_version()}")
    assert "from audit.cli.main import console" in exe.read_text()


def test_messages_are_printed_as_written_never_with_emoji_codes_replaced(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    # rich replaced ":abc:" in "redis://:***@127.0.0.1:abc: the port ..." with an emoji: the host:port an
    # error names (or a key, a path) came out as "127.0.0.1🔤"
    pairs = [{"name": "r", "kind": "redis", "master": "redis://:pw@127.0.0.1:abc", "replica": "redis://127.0.0.1:2"}]
    inv = tmp_path / "inv.yaml"
    inv.write_text(json.dumps({"pairs": pairs}))
    assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "redis://:***@127.0.0.1:abc: the port must be a number" in err


def test_a_verification_under_the_id_of_one_that_exists_is_refused(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    # a second `verify --run-id X` went over the first: its certificate kept the first's start time, and the
    # history (idempotent by run id) the first's verdict
    out = tmp_path / "v"
    args = ["verify", "--source", "redis://127.0.0.1:1", "--target", "redis://127.0.0.1:2", "-o", str(out)]
    assert run_cli([*args, "--run-id", "cutover", "--quiet"], monkeypatch) == 3  # nothing listens there
    before = (out / "cutover" / "manifest.json").read_text()
    capsys.readouterr()
    assert run_cli([*args, "--run-id", "cutover"], monkeypatch) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--run-id cutover: a run of that id is already in" in err and "Traceback" not in err
    assert (out / "cutover" / "manifest.json").read_text() == before


@pytest.mark.parametrize("mode", [[], ["--json"], ["--quiet"]], ids=["table", "json", "quiet"])
def test_a_verification_the_history_store_could_not_take_is_said(mode, tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    # `verify` dropped the history's outcome: a certificate missing from the history said nothing anywhere
    # but in its manifest, as `run` and `report` say it
    args = ["verify", "--source", "redis://127.0.0.1:1", "--target", "redis://127.0.0.1:2", "-o", str(tmp_path)]
    assert run_cli([*args, "--history", "mysql://u:pw@127.0.0.1:1/db", *mode], monkeypatch) == 3  # nothing listens
    said = capsys.readouterr()
    err = " ".join(said.err.split())
    assert "results history mysql://u:***@127.0.0.1:1/db: not written" in err and ":pw@" not in err, err
    if mode == ["--json"]:
        assert "history" not in json.loads(said.out)  # the certificate as written


@pytest.mark.parametrize("target", ["no.such.module", "json", "audit.sources.redis.kind:NOPE"])
def test_a_kind_registered_by_a_name_that_loads_nothing_is_a_config_error(
    target: str, tmp_path, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    # REPLICA_AUDIT_KINDS=x=<a module that is not there> printed a traceback and "internal error (a bug in
    # replica-audit)", exit 4
    from audit.kernel.kind import registered_kinds

    monkeypatch.setenv("REPLICA_AUDIT_KINDS", f"x={target}")
    registered_kinds.cache_clear()
    inv = two_pairs(tmp_path)
    try:
        assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 2
    finally:
        monkeypatch.delenv("REPLICA_AUDIT_KINDS")
        registered_kinds.cache_clear()
    err = " ".join(capsys.readouterr().err.split())
    assert f"kind module {target}: cannot load it" in err and "Traceback" not in err


@pytest.mark.parametrize("value", ["tests.kinds.dirfiles", "=tests.kinds.dirfiles", "x="])
def test_a_kind_registration_that_is_not_name_equals_module_is_a_config_error(
    value: str, tmp_path, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    # REPLICA_AUDIT_KINDS without its `name=` was skipped without a word: the run went on without the kind
    from audit.kernel.kind import registered_kinds

    monkeypatch.setenv("REPLICA_AUDIT_KINDS", value)
    registered_kinds.cache_clear()
    try:
        assert run_cli(["run", "-i", str(two_pairs(tmp_path)), "-o", str(tmp_path / "out")], monkeypatch) == 2
    finally:
        monkeypatch.delenv("REPLICA_AUDIT_KINDS")
        registered_kinds.cache_clear()
    err = " ".join(capsys.readouterr().err.split())
    assert f"REPLICA_AUDIT_KINDS: {value!r}: expected name=module[:attribute]" in err and "Traceback" not in err


def test_a_daily_report_of_an_out_that_did_not_exist_says_it_holds_no_runs(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    # a mistyped -o once gave an empty report, a new history.sqlite and exit 0 without a word
    monkeypatch.delenv("REPLICA_AUDIT_HISTORY", raising=False)
    assert run_cli(["daily-report", "-o", str(tmp_path / "typo")], monkeypatch) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"{tmp_path / 'typo'} did not exist: the report holds no runs" in err
    assert "a mistyped -o? --history reads a store elsewhere" in err  # not "--history names a store": none given
    assert run_cli(["daily-report", "-o", str(tmp_path / "typo")], monkeypatch) == 0  # now it exists: a quiet day
    assert "did not exist" not in capsys.readouterr().err


def test_a_daily_report_of_a_history_store_that_did_not_exist_says_it_holds_no_runs(
    tmp_path, monkeypatch, capsys
) -> None:  # type: ignore[no-untyped-def]
    # `--history sqlite:////mistyped/h.sqlite` created an empty store there and wrote an empty report, exit 0,
    # without a word: a quiet day, as far as anyone reading it could tell
    store = tmp_path / "typo" / "h.sqlite"
    args = ["daily-report", "-o", str(tmp_path / "out"), "--history", f"sqlite:///{store}"]
    assert run_cli(args, monkeypatch) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"history store {store} did not exist: the report holds no runs" in err
    assert "an empty store is there now, which later reports read quietly: delete it" in err and store.is_file()
    assert run_cli(args, monkeypatch) == 0  # now it exists: a quiet day
    assert "did not exist" not in capsys.readouterr().err


def test_the_command_list_shows_each_command_in_one_unbroken_line_of_help(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    """`replica-audit --help` lists each command by its help's first paragraph, line breaks kept: a
    first paragraph wrapped in the docstring showed as a sentence cut in two."""
    import typer

    from audit.cli.main import app

    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    assert {"run", "verify", "spark-server"} <= set(commands)
    for name, command in commands.items():
        first = (command.help or "").strip().split("\n\n")[0]
        assert first and "\n" not in first, f"{name}: {first!r}"


def test_one_redis_server_given_as_both_sides_is_refused_before_it_is_read(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    # compared with itself a server agrees on every key: a verification certified it, exit 0
    from audit.local.redis_server import RedisServer, free_port

    server = RedisServer(free_port(), tmp_path / "server").start()
    try:
        server.client().mset({f"k{i}": i for i in range(50)})
        other_name = server.url.replace("127.0.0.1", "localhost")  # another URL, the same server
        args = ["verify", "--source", server.url, "--target", other_name, "-o", str(tmp_path / "v")]
        assert run_cli(args, monkeypatch) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert "both endpoints reach one server (run_id" in err, err
        (certificate,) = (tmp_path / "v").glob("*/certificate.json")
        cert = json.loads(certificate.read_text())
        assert cert["verdict"] == "error" and "one server" in " ".join(cert["reasons"]), cert["reasons"]
        pair = {"name": "p", "kind": "redis", "master": server.url, "replica": other_name, "check_replication": False}
        inv = write_inventory(tmp_path / "inv.yaml", [pair])
        assert run_cli(["run", "-i", str(inv), "-o", str(tmp_path / "out")], monkeypatch) == 2
        assert "both endpoints reach one server" in " ".join(capsys.readouterr().err.split())
        assert not list((tmp_path / "out").glob("*/snapshots/p/master/keys.parquet"))  # nothing was read
    finally:
        server.stop()


@pytest.mark.parametrize("command", ["run", "verify"])
@pytest.mark.parametrize("given", ["option", "environment"])
def test_a_history_url_no_store_takes_is_exit_2_before_anything_is_audited(  # type: ignore[no-untyped-def]
    command, given, tmp_path, monkeypatch, capsys
) -> None:
    # it was found once the audit was done: the run exited 0 and its results never reached the history
    url = "postgres://u:secret@127.0.0.1:1/db"
    pair = {"name": "p", "kind": "redis", "master": "redis://127.0.0.1:1", "replica": "redis://127.0.0.1:2"}
    args = (
        ["run", "-i", str(write_inventory(tmp_path / "inv.yaml", [pair]))]
        if command == "run"
        else ["verify", "--source", "redis://127.0.0.1:1", "--target", "redis://127.0.0.1:2"]
    )
    args += ["-o", str(tmp_path / "out")]
    if given == "option":
        args += ["--history", url]
    else:
        monkeypatch.setenv("REPLICA_AUDIT_HISTORY", url)
    assert run_cli(args, monkeypatch) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "unsupported URL 'postgres://u:***@127.0.0.1:1/db'" in err and "secret" not in err, err
    assert ("REPLICA_AUDIT_HISTORY" in err) == (given == "environment")
    assert not (tmp_path / "out").exists()  # no run was started


def test_a_report_written_again_replaces_the_page_whole(dirfiles_kind, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # report.html and the daily report were once rewritten in place: a reader (or a crash) mid-write saw half
    # a page. A new page is now renamed over the old one, so a reader holding the old file keeps it whole.
    monkeypatch.delenv("REPLICA_AUDIT_HISTORY", raising=False)
    inv, out = two_pairs(tmp_path), tmp_path / "out"
    monkeypatch.setattr(FilesCheck, "diff", lambda self, ctx: [])
    assert run_cli(["run", "-i", str(inv), "-o", str(out), "-q"], monkeypatch) == 0
    assert run_cli(["daily-report", "-o", str(out)], monkeypatch) == 0
    pages = [latest_run(out) / "report.html", *(out / "reports").glob("daily-*.html")]
    assert len(pages) == 2
    for page in pages:
        held = page.with_name("held-" + page.name)
        os.link(page, held)  # a reader's open file: the same inode
        page.write_text("stale")  # written through the link: both names read it
    assert run_cli(["report", "-i", str(inv), "-o", str(out), "--run-id", latest_run(out).name, "-q"], monkeypatch) == 0
    assert run_cli(["daily-report", "-o", str(out)], monkeypatch) == 0
    for page in pages:
        held = page.with_name("held-" + page.name)
        assert held.read_text() == "stale" and page.read_text().startswith("<!")
        assert not list(page.parent.glob(page.name + ".tmp*"))
