"""The `replica-audit` command: the only code that imports typer/click and turns errors into exit codes."""

from __future__ import annotations


def console() -> None:
    """The installed command's entry point (audit/cli/main.py has the command).

    The import stays here because the script that calls this may be imported again by a spawned process
    (multiprocessing re-imports the parent's main script before it runs the child's function, unless the
    spawner hides it, as audit/sources/redis/sides.py does), and no child has a use for the CLI, typer
    and the pipeline: 0.25 s of CPU each."""
    from audit.cli.main import console as run_command

    run_command()
