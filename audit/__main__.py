"""`python -m audit ...` is the `replica-audit` command; also the script to hand spark-submit (docs/spark.md)."""

from __future__ import annotations

if __name__ == "__main__":
    from audit.cli.main import console

    console()
