"""Match findings against the signature catalog (signatures.yaml). Pure: findings in, findings out."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from audit.findings import Finding

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "gt": operator.gt,
    "ge": operator.ge,
    "lt": operator.lt,
    "le": operator.le,
    "ne": operator.ne,
    "in": lambda value, options: value in options,
}


@dataclass(frozen=True, slots=True)
class Signature:
    code: str
    kinds: tuple[str, ...]
    categories: tuple[str, ...]
    all: Mapping[str, Any]
    any: Mapping[str, Any]
    meaning: str
    source: str

    def matches(self, kind: str, finding: Finding) -> bool:
        if kind not in self.kinds or finding.category not in self.categories:
            return False
        ev = finding.evidence
        if not all(_holds(ev, name, cond) for name, cond in self.all.items()):
            return False
        return not self.any or any(_holds(ev, name, cond) for name, cond in self.any.items())


def _holds(evidence: Mapping[str, Any], name: str, condition: Any) -> bool:
    if name not in evidence:
        return False
    value = evidence[name]
    if isinstance(condition, dict):
        try:
            return all(_OPS[op](value, arg) for op, arg in condition.items())
        except TypeError:
            return False
    return bool(value == condition)


@cache
def catalog() -> tuple[Signature, ...]:
    return parse_catalog(resources.files("audit").joinpath("signatures.yaml").read_text())


def parse_catalog(text: str) -> tuple[Signature, ...]:
    """Signatures from catalog YAML (the shipped catalog, or a proposed entry in a test)."""
    return tuple(
        Signature(
            code=e["code"],
            kinds=tuple(e["kinds"]),
            categories=tuple(e["categories"]),
            all=e.get("all") or {},
            any=e.get("any") or {},
            meaning=" ".join(e["meaning"].split()),
            source=e["source"],
        )
        for e in yaml.safe_load(text)
    )


def diagnose(kind: str, findings: Iterable[Finding], signatures: Iterable[Signature] | None = None) -> list[Finding]:
    """Attach the first matching signature's code to each finding that has none yet."""
    sigs = tuple(signatures if signatures is not None else catalog())
    out = []
    for f in findings:
        if f.diagnosis is None:
            match = next((s for s in sigs if s.matches(kind, f)), None)
            if match is not None:
                f = f.with_diagnosis(match.code)
        out.append(f)
    return out


def meaning(code: str) -> str:
    return next((s.meaning for s in catalog() if s.code == code), "")
