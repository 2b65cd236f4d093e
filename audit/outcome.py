"""A pair's status and the process's exit status, from the pairs' states (README, "Exit status").

| code | meaning |
|---|---|
| 0 | every pair audited in full and every gate passed |
| 1 | a gate failed |
| 2 | usage or configuration error |
| 3 | a source could not be audited |
| 4 | internal error (a bug) |

A run's code is the most serious of its pairs': 4, then 2, then 3, then 1, then 0.
"""

from __future__ import annotations

from collections.abc import Iterable

from audit.errors import AuditError, ConfigError, StageInputError
from audit.kernel.state import PairState

EXIT_OK, EXIT_GATE_FAILED, EXIT_USAGE, EXIT_SOURCE, EXIT_INTERNAL = 0, 1, 2, 3, 4
_SERIOUSNESS = (EXIT_INTERNAL, EXIT_USAGE, EXIT_SOURCE, EXIT_GATE_FAILED, EXIT_OK)
VERDICTS = {
    EXIT_OK: "passed",
    EXIT_GATE_FAILED: "failed",
    EXIT_USAGE: "error",
    EXIT_SOURCE: "incomplete",
    EXIT_INTERNAL: "error",
}


def exit_code_of_error(error: BaseException) -> int:
    if isinstance(error, ConfigError | StageInputError):
        return EXIT_USAGE
    if isinstance(error, AuditError):
        return EXIT_SOURCE
    return EXIT_INTERNAL


def pair_status(state: PairState) -> str:
    """passed | failed (the gate's verdict) | error (could not be audited) | incomplete (no gate yet)."""
    if state.error is not None:
        return "error"
    if state.gate is None:
        return "incomplete"
    return "passed" if state.gate.success else "failed"


def pair_exit_code(state: PairState) -> int:
    if state.error is not None:
        return state.error.exit_code
    if state.gate is None:
        return EXIT_SOURCE  # the audit did not finish: never read as a pass
    return EXIT_OK if state.gate.success else EXIT_GATE_FAILED


def run_exit_code(codes: Iterable[int]) -> int:
    found = set(codes)
    return next((c for c in _SERIOUSNESS if c in found), EXIT_OK)
