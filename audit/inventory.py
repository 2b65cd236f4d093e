"""The inventory: which master/replica pairs to audit, and how strictly.

Loaded from YAML, validated with pydantic: each pair with the model its `kind` declares (a
discriminated union over the registered kinds, audit/kernel/kind.py). Every error names the pair and
the field, e.g. ``pairs[1] (cache-main).gate.max_missing: Input should be a valid integer``. Unknown
keys are rejected so a typo never silently falls back to a default.

``${VAR}`` (or ``${VAR:-default}``) in any string is replaced by the environment variable, so a
password can stay out of the file; a variable that is not set is an error naming the field. Server
URLs are kept as ``SecretStr`` and only ever shown through :func:`redact_url`.
"""

from __future__ import annotations

import hashlib
import os
import re
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from audit.connections import endpoint_url, env_conn_resolver
from audit.errors import ConfigError
from audit.kernel.kind import KindSpec, registered_kinds
from audit.kernel.pair import PairBase, display_endpoint, gate_field_names, gate_fields_of
from audit.kernel.suite import suite_parameters
from audit.urls import ConnResolver, redact_url

__all__ = [
    "ConnResolver",
    "Inventory",
    "Pair",
    "display_endpoint",
    "endpoint_url",
    "env_conn_resolver",
    "load_inventory",
    "parse_inventory",
    "redact_url",
]

Pair = PairBase
"""A validated pair of any kind (each kind's model derives from PairBase)."""


class Inventory(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    pairs: list[PairBase]
    digest: str = ""

    def select(self, names: list[str] | None) -> list[PairBase]:
        if not names:
            return list(self.pairs)
        known = {p.name: p for p in self.pairs}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ConfigError(f"--pair {', '.join(unknown)}: not in the inventory (known: {', '.join(known)})")
        return [known[n] for n in dict.fromkeys(names)]  # a name given twice is one pair, audited once

    def pair(self, name: str) -> PairBase:
        return self.select([name])[0]


# --- ${VAR} ------------------------------------------------------------------------------------------
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _expand(value: Any, path: str) -> Any:
    if isinstance(value, str):

        def one(m: re.Match[str]) -> str:
            name, default = m.group(1), m.group(2)
            got = os.environ.get(name)
            if got is None and default is None:
                raise ConfigError(f"{path}: ${{{name}}} is not set in the environment")
            return got if got is not None else default

        return _VAR.sub(one, value)
    if isinstance(value, dict):
        return {k: _expand(v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def _expand_inventory(raw: dict[str, Any]) -> dict[str, Any]:
    """${VAR}s expanded; a missing one is named by the path validation errors use: `pairs[0] (name).master`."""
    out = {}
    for key, value in raw.items():
        if key == "pairs" and isinstance(value, list):
            out[key] = [_expand(pair, _pair_label(i, pair)) for i, pair in enumerate(value)]
        else:
            out[key] = _expand(value, str(key))
    return out


def _pair_label(index: int, pair: Any) -> str:
    name = pair.get("name") if isinstance(pair, dict) else None
    return f"pairs[{index}] ({name})" if name else f"pairs[{index}]"


# --- defaults: and per-kind settings -----------------------------------------------------------------
def settings_keys(spec: KindSpec | None) -> set[str]:
    """The settings a pair of the kind takes (its model's `settings`)."""
    if spec is None:
        return set()
    model = spec.pair_model.model_fields["settings"].annotation
    return set(model.model_fields) if isinstance(model, type) and issubclass(model, BaseModel) else set()


def _merge_defaults(raw: dict[str, Any]) -> list[Any]:
    """Push the `defaults:` block into every pair whose kind takes the setting; a pair's own keys win."""
    kinds = registered_kinds()
    base = dict(_mapping(raw.get("defaults"), "defaults"))
    base_gate = _mapping(base.pop("gate", None), "defaults.gate")
    known = set().union(*(settings_keys(s) for s in kinds.values()))
    unknown = set(base) - known
    if unknown:
        raise ConfigError(f"defaults.{sorted(unknown)[0]}: unknown setting (known: {', '.join(sorted(known))})")
    pairs = []
    for item in raw.get("pairs") or []:
        if not isinstance(item, dict):
            pairs.append(item)
            continue
        pair = dict(item)
        keys = settings_keys(kinds.get(str(pair.get("kind"))))
        own = {k: pair.pop(k) for k in list(pair) if k in keys}
        inherited = {k: v for k, v in base.items() if k in keys}
        where = f"pairs[{len(pairs)}] ({pair.get('name')})"
        if inherited or own or "settings" in pair:
            pair["settings"] = {**inherited, **_mapping(pair.get("settings"), f"{where}.settings"), **own}
        gate = pair.get("gate")
        if gate is None or isinstance(gate, dict):  # anything else is left to the model, which names it
            pair["gate"] = _pair_gate(kinds.get(str(pair.get("kind"))), base_gate, gate or {}, where)
        pairs.append(pair)
    return pairs


def _pair_gate(spec: KindSpec | None, base_gate: dict[str, Any], own: dict[str, Any], where: str) -> dict[str, Any]:
    """The pair's gate: the `defaults.gate` keys its kind's suite reads, then its own.

    A key of the pair's own that is a gate key but one its kind's suite never reads is refused: it
    would be accepted and do nothing. A misspelled key is left to the model, which names it.
    """
    if spec is None:
        return {**base_gate, **own}
    every = set(gate_field_names())
    used = set(gate_fields_of(suite_parameters(spec.suite)))
    for key in own:
        if key in every and key not in used:
            raise ConfigError(
                f"{where}.gate.{key}: kind {spec.name} is not gated on this (its keys: {', '.join(sorted(used))})"
            )
    return {**{k: v for k, v in base_gate.items() if k in used or k not in every}, **own}


def _mapping(value: Any, where: str) -> dict[str, Any]:
    """`value` as a mapping of settings (None: empty); anything else is a ConfigError naming `where`."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping of setting: value, got {type(value).__name__} {value!r}")
    return value


@cache
def _pairs_adapter(models: tuple[type[PairBase], ...]) -> TypeAdapter[list[PairBase]]:
    member: Any = models[0] if len(models) == 1 else Annotated[Union[models], Field(discriminator="kind")]  # noqa: UP007
    return TypeAdapter(list[member])


# --- error messages ------------------------------------------------------------------------------------
_IDENT = re.compile(r"^[a-z_][a-z0-9_]*$")
_TYPE_LABELS = {"str", "int", "float", "bool", "list", "dict", "function-after", "function-before", "tagged-union"}


def _field_path(loc: tuple[int | str, ...], raw: list[Any], kind_tags: set[str]) -> str:
    parts = ["pairs"]
    for i, part in enumerate(loc):
        if isinstance(part, int):
            label = f"[{part}]"
            if i == 0:
                try:
                    label += f" ({raw[part]['name']})"
                except (KeyError, IndexError, TypeError):
                    pass
            parts.append(label)
        elif i == 1 and part in kind_tags:
            continue  # the union's branch: the pair's kind
        elif part in _TYPE_LABELS or not _IDENT.match(str(part)):
            continue  # pydantic's union-branch labels say nothing to an operator
        else:
            parts.append("." + str(part))
    return "".join(parts)


def _problems(e: ValidationError, raw: list[Any], kind_tags: set[str]) -> str:
    problems: dict[str, list[str]] = {}
    for err in e.errors():
        path = _field_path(tuple(err["loc"]), raw, kind_tags)
        if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
            path += ".kind"
        problems.setdefault(path, []).append(str(err["msg"]).removeprefix("Value error, "))
    shown = [f"{path}: {' or '.join(dict.fromkeys(msgs))}" for path, msgs in list(problems.items())[:5]]
    more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
    return "; ".join(shown) + more


def _yaml_problem(e: yaml.YAMLError) -> str:
    """One line: where and what. PyYAML's own text spans lines (the source line and a caret under it)
    and says "<unicode string>" for the file the operator named."""
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None)
    if mark is None or not problem:
        return " ".join(str(e).split())
    context = getattr(e, "context", None)
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" + (f" ({context})" if context else "")


def parse_inventory(text: str, source: str = "inventory") -> Inventory:
    """Validate inventory YAML text; raise ConfigError naming the first bad field."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {_yaml_problem(e)}") from None
    if not isinstance(raw, dict) or "pairs" not in raw:
        raise ConfigError(f"{source}: expected a mapping with a `pairs:` list")
    unknown_top = set(raw) - {"defaults", "pairs"}
    if unknown_top:
        raise ConfigError(f"{source}: {sorted(unknown_top)[0]}: unknown key (expected defaults, pairs)")
    if not isinstance(raw.get("defaults") or {}, dict):
        raise ConfigError(f"{source}: defaults: expected a mapping")
    if not isinstance(raw["pairs"], list) or not raw["pairs"]:
        raise ConfigError(f"{source}: pairs: expected a non-empty list")
    try:
        raw = _expand_inventory(raw)
        merged = _merge_defaults(raw)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    kinds = registered_kinds()
    try:
        pairs = _pairs_adapter(tuple(s.pair_model for s in kinds.values())).validate_python(merged)
    except ValidationError as e:
        raise ConfigError(f"{source}: {_problems(e, merged, set(kinds))}") from None
    names = [p.name for p in pairs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"{source}: pairs: pair names must be unique; repeated: {', '.join(dupes)}")
    return Inventory(pairs=pairs, digest=hashlib.sha256(text.encode()).hexdigest())


def load_inventory(path: str | Path) -> Inventory:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"inventory {p}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"inventory {p}: not UTF-8 text (at byte {e.start})") from None
    return parse_inventory(text, source=str(p))
