"""What the commands share: the consoles, the option types, and the parsing of repeated key=value options."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from audit.errors import ConfigError

WIDTH = None if sys.stdout.isatty() else 140  # logs and pipes get a readable table, not 80 columns
# emoji=False: what servers, files and URLs say is printed as written (":abc:" is not 🔤)
out = Console(width=WIDTH, emoji=False)
err = Console(stderr=True, width=WIDTH, emoji=False)


InventoryOpt = Annotated[Path, typer.Option("--inventory", "-i", help="inventory YAML")]


def _out_dir(value: str) -> Path:
    """--out as a local path; a URI is a usage error that says why (Path() would fold s3a://b into s3a:/b)."""
    from audit.storage import local_out_dir

    try:
        return local_out_dir(value)
    except ConfigError as e:
        raise typer.BadParameter(str(e)) from None


OutOpt = Annotated[
    Path,
    typer.Option("--out", "-o", parser=_out_dir, help="output directory (a local path); each run writes OUT/<run_id>/"),
]
PairOpt = Annotated[list[str] | None, typer.Option("--pair", "-p", help="audit only this pair (repeatable)")]
RunIdOpt = Annotated[
    str | None, typer.Option("--run-id", help="the run to continue, as `snapshot` printed its id (required)")
]
NewRunIdOpt = Annotated[
    str | None,
    typer.Option("--run-id", help="the new run's id (default: a fresh one); a run already there is refused"),
]
SnapshotRunIdOpt = Annotated[
    str | None, typer.Option("--run-id", help="the run's id (default: a fresh one, printed for the next stages)")
]
SparkMasterOpt = Annotated[
    str | None,
    typer.Option("--spark-master", help="Spark master URL (default $REPLICA_AUDIT_SPARK_MASTER, else local[*])"),
]
SparkConfOpt = Annotated[list[str] | None, typer.Option("--spark-conf", help="extra Spark setting key=value")]
HistoryOpt = Annotated[
    str | None,
    typer.Option(
        "--history",
        help="results history store: sqlite:////abs/path or sqlite:///rel/path, mysql://user:pw@host:port/db "
        "or conn:<airflow_conn_id> "
        "(default $REPLICA_AUDIT_HISTORY, else OUT/history.sqlite)",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print the summary as JSON on stdout, and nothing else")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="no progress or stage lines; errors only")]


def spark_settings(spark_conf: list[str] | None) -> dict[str, str]:
    conf = {}
    for item in spark_conf or []:
        if "=" not in item:
            raise ConfigError(f"--spark-conf {item!r}: expected key=value")
        k, v = item.split("=", 1)
        conf[k] = v
    return conf


def key_values(flag: str, items: list[str] | None) -> dict[str, Any]:
    """`flag`'s repeated key=value items, each value read as YAML (`--setting max_keys_per_s=20000`)."""
    import yaml

    given: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"{flag} {item!r}: expected key=value")
        k, v = item.split("=", 1)
        try:
            given[k] = yaml.safe_load(v)
        except yaml.YAMLError as e:
            raise ConfigError(f"{flag} {item!r}: the value is not YAML ({e.__class__.__name__})") from None
    return given
