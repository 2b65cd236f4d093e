"""`replica-audit spark-server`: a Spark Connect server in the foreground (audit/diff/connect_server.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from audit.cli.options import SparkConfOpt, err, spark_settings
from audit.errors import ConfigError
from audit.outcome import EXIT_OK, EXIT_SOURCE


def spark_server(
    port: Annotated[int, typer.Option("--port", help="the port runs connect to")] = 15002,
    host: Annotated[
        str, typer.Option("--host", help="the address to listen on; the server has no authentication of its own")
    ] = "127.0.0.1",
    spark_master: Annotated[
        str, typer.Option("--spark-master", help="the master the server drives (local[*] or a cluster's URL)")
    ] = "local[*]",
    spark_conf: SparkConfOpt = None,
    warm_up: Annotated[
        bool, typer.Option("--warm-up/--no-warm-up", help="diff generated snapshots once started (local masters)")
    ] = True,
) -> None:
    """Run a Spark Connect server in the foreground for runs given --spark-master sc://HOST:PORT.

    Those runs diff on its JVM, already started and compiled, instead of starting their own
    (docs/spark.md)."""
    import signal

    from audit.diff.connect_server import ConnectServer, warms_up

    if host.startswith("sc://") or not 0 < port < 65536:
        raise ConfigError(f"--host {host} --port {port}: expected an address and a port (1-65535)")
    if spark_master.startswith("sc://"):
        raise ConfigError(f"--spark-master {spark_master}: the server drives a master; it cannot be a Connect URL")
    server = ConnectServer(host=host, port=port, master=spark_master, conf=spark_settings(spark_conf))
    stops = (signal.SIGTERM, signal.SIGHUP)  # a service manager's stop, a closed terminal: end the JVM too
    for stop in stops:
        signal.signal(stop, interrupted)
    try:
        server.start()
        if warm_up and warms_up(spark_master):
            _warm_up_server(server.url)
        if not _loopback(host):
            err.print(
                f"[yellow]spark connect server: listening on {host}, not loopback.[/] Spark Connect has no "
                "authentication (whoever reaches this port can run code as this user) and no encryption here "
                "(the runs' tasks carry the audited servers' passwords)."
            )
        err.print(f"spark connect server: {server.url} (driving {spark_master}); stop it with Ctrl-C or SIGTERM")
        code = server.wait()
    except RuntimeError as e:
        raise ConfigError(f"spark connect server on {host}:{port}: {e}") from None
    except KeyboardInterrupt:
        for stop in (*stops, signal.SIGINT):  # a second signal must not cut the stop short
            signal.signal(stop, signal.SIG_IGN)
        server.stop()
        raise typer.Exit(EXIT_OK) from None
    err.print(f"[red]spark connect server on {host}:{port} stopped on its own[/] (code {code}; its output above)")
    raise typer.Exit(EXIT_SOURCE)


def _loopback(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _warm_up_server(url: str) -> None:
    """Best effort: a server that could not warm up still serves, and says so."""
    import tempfile

    from audit.diff.connect_server import warm_up

    try:
        with tempfile.TemporaryDirectory(prefix="replica-audit-warm-up-") as work:
            secs = warm_up(url, Path(work))
        err.print(f"spark connect server: warmed up by a keyspace diff in {secs:.1f} s")
    except Exception as e:
        err.print(
            f"[yellow]spark connect server: the warm-up failed[/] ({type(e).__name__}: {escape(str(e))});"
            " serving anyway"
        )


def interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
