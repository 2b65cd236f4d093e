"""Ctrl-C and SIGTERM: a command stops as far as it got, keeps what it did, says so in one line, and
exits 128 + the signal (130, 143), as a shell reports a process a signal ended."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator

from audit.cli.options import err


class _Stopped:
    """The signal that interrupted the command (None: none did), and whether that was said."""

    signal: signal.Signals | None = None
    said = False


@contextlib.contextmanager
def armed() -> Iterator[None]:
    """While a command runs: SIGTERM raises KeyboardInterrupt as Ctrl-C does, both are recorded (typer
    turns a KeyboardInterrupt into a plain exit code 130), and a log record of an interrupt is dropped.
    The previous handlers come back after it (the tests run commands in their own process)."""
    _Stopped.signal, _Stopped.said = None, False
    for handler in logging.getLogger().handlers:
        handler.addFilter(_not_an_interrupt)
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set a handler
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGTERM, _stop)
    if previous[signal.SIGINT] is signal.default_int_handler:  # not where SIGINT is ignored (nohup)
        signal.signal(signal.SIGINT, _stop)
    try:
        yield
    finally:
        for signum, was in previous.items():
            signal.signal(signum, was)


def _stop(signum: int, frame: object) -> None:
    """SIGTERM (`kill`, systemd, a scheduler's timeout) stops the command as Ctrl-C does: its default
    action ended the process at once, so no `finally` ran and the snapshot processes went on reading the
    servers, orphaned, to the end."""
    _Stopped.signal = signal.Signals(signum)
    raise KeyboardInterrupt


def interrupted() -> bool:
    return _Stopped.signal is not None


def _not_an_interrupt(record: logging.LogRecord) -> bool:
    """A log record is kept unless its exception comes of an interrupt: py4j logs the KeyboardInterrupt
    that stops a Spark call, and what broke after it, with their tracebacks."""
    error = record.exc_info[1] if record.exc_info else None
    while error is not None:
        if isinstance(error, KeyboardInterrupt):
            return False
        error = error.__cause__ or error.__context__
    return True


def say(what: str) -> None:
    """The interrupted command's line (rich markup), said instead of the generic one."""
    _Stopped.said = True
    err.print(f"[red]interrupted ({(_Stopped.signal or signal.SIGINT).name}):[/] {what}")


def exit_code() -> int:
    """The exit status of an interrupted command, once it is said."""
    if not _Stopped.said:
        say("stopped; what was done is kept")
    return 128 + int(_Stopped.signal or signal.SIGINT)
