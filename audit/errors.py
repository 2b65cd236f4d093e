"""One exception tree for the whole library. The CLI maps these to exit codes; nothing else does."""

from __future__ import annotations


class AuditError(Exception):
    """Raised for any failure the auditor understands; the message is meant for an operator."""


class ConfigError(AuditError):
    """Raised when the inventory or an option is malformed; the message names the pair and field."""


class SourceError(AuditError):
    """Raised when a source (server, file store) could not be audited."""

    def __init__(self, message: str, *, where: str = "") -> None:
        super().__init__(message)
        self.where = where


class SourceConnectError(SourceError):
    """Raised when a server cannot be reached or refuses the auditor's credentials."""


class SnapshotError(SourceError):
    """Raised when a snapshot started but could not be completed."""


class ParseError(AuditError):
    """Raised when bytes do not follow the format they claim to be in."""


class CorruptRecordError(ParseError):
    """Raised by a pure parser for one damaged record; readers turn it into a finding."""

    def __init__(self, message: str, *, offset: int) -> None:
        super().__init__(f"{message} at offset {offset}")
        self.offset = offset


class DiffError(AuditError):
    """Raised when the Spark diff of two snapshots fails."""


class GateError(AuditError):
    """Raised when the gate itself could not run (not when it fails: that is a verdict)."""


class StageInputError(AuditError):
    """Raised when a stage is run on an output directory that lacks the previous stage's results."""
