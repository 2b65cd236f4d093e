"""What `replica-audit <command> --help` says of an option is what the command does with it."""

from __future__ import annotations

from typing import Any

import typer

from audit.cli.main import app


def _option_help(command: str, flag: str) -> str:
    commands: dict[str, Any] = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    for param in commands[command].params:
        if flag in getattr(param, "opts", ()):
            return str(param.help or "")
    raise AssertionError(f"{command} has no {flag}")


def test_run_id_help_says_whether_the_command_starts_a_run_or_continues_one() -> None:
    # `run --run-id X` and `verify --run-id X` name a new run (an existing X is exit 2); the help said
    # "the run to continue", so an operator following it to go on with a run got a refusal
    for command in ("run", "verify"):
        said = _option_help(command, "--run-id")
        assert "continue" not in said and "refused" in said, (command, said)
    assert "continue" not in _option_help("snapshot", "--run-id")
    for command in ("diff", "recheck", "gate", "report"):
        assert "continue" in _option_help(command, "--run-id"), command


def test_defaults_from_the_environment_are_named_in_the_help() -> None:
    # REPLICA_AUDIT_SPARK_MASTER is used when --spark-master is not given: "default local[*]" was untrue then
    for command in ("run", "verify", "snapshot", "diff", "recheck"):
        assert "REPLICA_AUDIT_SPARK_MASTER" in _option_help(command, "--spark-master"), command
    for command in ("run", "verify", "report", "daily-report"):
        assert "conn:<" in _option_help(command, "--history"), command  # a MySQL connection is a store too
