"""Key filters of a pair: `keys: {include: [globs], exclude: [globs]}`, with Redis's glob semantics.

A key is audited when it matches some include pattern (or there is none) and no exclude pattern.
Patterns are matched exactly as Redis's `stringmatchlen` (KEYS, SCAN MATCH) matches them, quirks
included, so `SCAN MATCH p` and the in-reader filter always agree:

- `*` any run of bytes, `?` one byte, `\\x` the byte x (a trailing `\\` is itself);
- `[...]` one byte of the class: `^` first negates; `a-z` a range (reversed ends are swapped); `\\x`
  inside escapes x; the first `]` closes it (so `[]` matches nothing and `[^]` any byte); a range's end
  may be `]` (`[a-]` is the range `]`..`a`); an unclosed class takes the rest of the pattern;
- the empty key matches only the empty pattern and `*` (KEYS and SCAN special-case a lone `*` as
  "everything"; any other pattern, `**` included, needs at least one byte).

Each pattern is compiled once into a bytes regular expression (C speed for the per-key test). The
pattern's text is UTF-8 encoded into the bytes matched against keys.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field


class KeysSpec(BaseModel):
    """The inventory's `keys:` block of a pair."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    include: list[str] = Field(default_factory=list, description="globs; empty: every key")
    exclude: list[str] = Field(default_factory=list, description="globs; a key matching one is skipped")


def _byte(b: int) -> bytes:
    return b"\\x%02x" % b


def _class_regex(members: set[int], negate: bool) -> bytes:
    chosen = sorted(set(range(256)) - members if negate else members)
    if not chosen:
        return b"(?!)"  # matches nothing
    parts: list[bytes] = []
    start = prev = chosen[0]
    for b in [*chosen[1:], -1]:
        if b == prev + 1:
            prev = b
            continue
        parts.append(_byte(start) if start == prev else _byte(start) + b"-" + _byte(prev))
        start = prev = b
    return b"[" + b"".join(parts) + b"]"


def _bracket(p: bytes, i: int) -> tuple[bytes, int]:
    """The class starting after `[` at p[i]; returns its regex and the index after its closing `]`.

    Follows Redis's loop step by step; `n - j` plays the part of its `patternLen`.
    """
    n = len(p)
    j = i
    negate = j < n and p[j] == ord("^")
    if negate:
        j += 1
    members: set[int] = set()
    while True:
        if j < n and p[j] == ord("\\") and n - j >= 2:
            j += 1
            members.add(p[j])
        elif j < n and p[j] == ord("]"):
            break
        elif j >= n:
            return _class_regex(members, negate), n  # unclosed: the class took the rest of the pattern
        elif n - j >= 3 and p[j + 1] == ord("-"):
            lo, hi = sorted((p[j], p[j + 2]))
            members.update(range(lo, hi + 1))
            j += 2
        else:
            members.add(p[j])
        j += 1
    return _class_regex(members, negate), j + 1


def glob_regex(pattern: bytes) -> bytes:
    """The regular expression (for `re.fullmatch`, DOTALL) equivalent to a Redis glob."""
    out: list[bytes] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == ord("*"):
            while i < n and pattern[i] == ord("*"):
                i += 1
            out.append(b".*")
            continue
        if c == ord("?"):
            out.append(b".")
        elif c == ord("["):
            regex, i = _bracket(pattern, i + 1)
            out.append(regex)
            continue
        elif c == ord("\\") and n - i >= 2:
            i += 1
            out.append(_byte(pattern[i]))
        else:
            out.append(_byte(c))
        i += 1
    return b"".join(out)


def _compile(patterns: Sequence[str]) -> re.Pattern[bytes] | None:
    """One regex for any of the patterns; the empty key is decided by :func:`_matches_empty` instead."""
    if not patterns:
        return None
    alternation = b"|".join(b"(?:" + glob_regex(p.encode()) + b")" for p in patterns)
    return re.compile(b"(?=.)(?:" + alternation + b")", re.DOTALL)


def _matches_empty(patterns: Sequence[str]) -> bool:
    return any(p in ("", "*") for p in patterns)


@dataclass
class KeyFilter:
    """The compiled filter, counting what it drops. Picklable (Spark ships it to the snapshot tasks)."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    filtered_out: int = 0
    _inc: re.Pattern[bytes] | None = field(init=False, repr=False, default=None)
    _exc: re.Pattern[bytes] | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        self._inc = _compile(self.include)
        self._exc = _compile(self.exclude)

    @classmethod
    def of(cls, spec: KeysSpec | None) -> KeyFilter | None:
        """None when the spec filters nothing (no include, no exclude)."""
        if spec is None or (not spec.include and not spec.exclude):
            return None
        return cls(tuple(spec.include), tuple(spec.exclude))

    @property
    def active(self) -> bool:
        return self._inc is not None or self._exc is not None

    def scan_match(self) -> bytes | None:
        """The one pattern SCAN MATCH can apply server-side: set when there is exactly one include.

        Excludes are still applied by :meth:`keep` on what SCAN returns.
        """
        return self.include[0].encode() if len(self.include) == 1 else None

    def matches(self, key: bytes) -> bool:
        if not key:
            included = not self.include or _matches_empty(self.include)
            return included and not _matches_empty(self.exclude)
        if self._inc is not None and self._inc.fullmatch(key) is None:
            return False
        return self._exc is None or self._exc.fullmatch(key) is None

    def keep(self, keys: Iterable[bytes]) -> list[bytes]:
        """The keys to audit, in order; the others are added to `filtered_out`."""
        keys = list(keys)
        inc, exc = self._inc, self._exc
        kept = [
            k
            for k in keys
            if (k and (inc is None or inc.fullmatch(k)) and (exc is None or not exc.fullmatch(k)))
            or (not k and self.matches(k))
        ]
        self.filtered_out += len(keys) - len(kept)
        return kept

    def describe(self) -> dict[str, object]:
        match = self.scan_match()
        return {
            "include": list(self.include),
            "exclude": list(self.exclude),
            "scan_match": match.decode("utf-8", "replace") if match is not None else None,
        }

    def __getstate__(self) -> dict[str, object]:
        return {"include": self.include, "exclude": self.exclude, "filtered_out": self.filtered_out}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.include = tuple(state["include"])  # type: ignore[arg-type]
        self.exclude = tuple(state["exclude"])  # type: ignore[arg-type]
        self.filtered_out = int(state["filtered_out"])  # type: ignore[call-overload]
        self.__post_init__()
