"""The fuzz tests' budget and corpus: how many examples a property runs, and where failing inputs are kept.

Profiles are registered in tests/conftest.py: `ci` (default, derandomized, the fixed budget of the normal
suite) and `fuzz` (`make fuzz`). A property asks for `examples(n)`: n examples under `ci`, FUZZ_SCALE
times n under `fuzz`.

Under `fuzz` a failing input is written to tests/fuzz_corpus/found/<test>.bin (the last one written is the
shrunk example hypothesis reports); move it next to the others in tests/fuzz_corpus/<reader>/ with a name
that says what it is, and tests/unit/test_fuzz_corpus.py replays it in every run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hypothesis import settings

CORPUS = Path(__file__).resolve().parent / "fuzz_corpus"
FUZZING = settings.get_current_profile_name() == "fuzz"
FUZZ_SCALE = int(os.environ.get("FUZZ_SCALE", "40")) if FUZZING else 1


def examples(n: int) -> settings:
    return settings(max_examples=n * FUZZ_SCALE)


@contextmanager
def keep_on_failure(name: str, data: bytes | bytearray) -> Iterator[None]:
    """Under the `fuzz` profile, save `data` as tests/fuzz_corpus/found/<name>.bin when the block fails."""
    try:
        yield
    except BaseException:
        if FUZZING:
            found = CORPUS / "found"
            found.mkdir(parents=True, exist_ok=True)
            (found / f"{name}.bin").write_bytes(bytes(data))
        raise
