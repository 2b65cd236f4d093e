"""The `replica-audit` command: the only code that imports typer/click and turns errors into exit codes."""

from __future__ import annotations


def console() -> None:
    """The installed command's entry point (audit/cli/main.py has the command).

    The import stays here because the script that calls this is imported again by every spawned process
    (multiprocessing re-imports the parent's main script before it runs the child's function), and a
    snapshot process (audit/sources/redis/sides.py) has no use for the CLI, typer and the pipeline:
    0.25 s of CPU each, at the snapshot's start."""
    from audit.cli.main import console as run_command

    run_command()
