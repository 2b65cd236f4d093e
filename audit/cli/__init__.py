"""The `replica-audit` command: the only code that imports typer/click and turns errors into exit codes."""
