"""A repair plan for a Redis pair, written as a file and never executed: `repair/<pair>.txt`.

Format (one key per line, UTF-8 text)::

    # replica-audit repair plan: never executed by replica-audit.
    # pair cache-main, run 20261123T041200Z; master redis://10.0.0.5:6379; replica redis://10.0.0.6:6379
    # ... (how to use it, below)
    RESYNC 0 "user:1"
    RESYNC 0 "bin:\\x00\\xff"
    DELETE 3 "tmp:only-on-replica"

- `RESYNC <db> <key>`: copy the key from the master (it is missing on the replica, or its type, value
  or TTL differs);
- `DELETE <db> <key>`: only the replica has the key;
- a fleet's plan (a cluster or a sentinel group) has its lines in sections, each under a comment
  `# on replica HOST:PORT (shard NAME)`: the node they are for (a key differing on two replicas of a
  shard is in both sections);
- `<key>` is in redis-cli's quoting (`"..."`, `\\"`, `\\\\`, `\\n`, `\\xHH`; :mod:`audit.sources.redis.display`),
  so it can follow a command on a redis-cli input line, spaces and binary bytes included; `#` lines are
  comments. RESYNC lines come first, then DELETE lines, each in the order the findings came; in a fleet's
  plan, within each node's one section (cut it out with the header's `sed -n` line to run the recipes on it).

Turning a plan into redis-cli input (`cut -f3-` keeps keys that contain spaces whole)::

    grep '^DELETE 0 ' PLAN | cut -d' ' -f3- | sed 's/^/DEL /' | redis-cli -h REPLICA -n 0
    grep '^RESYNC 0 ' PLAN | cut -d' ' -f3- \\
      | sed 's/^/MIGRATE REPLICA REPLICA-PORT "" 0 5000 COPY REPLACE KEYS /' | redis-cli -h MASTER -n 0

(MIGRATE runs on the master and copies each key with its TTL; add `AUTH2 user password` for a target
with auth. A read-only replica refuses writes: for a replication pair the usual repair is a full
resync of the replica, and the plan says which keys it must bring back. For a cluster target, send each
key's MIGRATE to the node owning its slot, `audit.sources.redis.routing.key_slot`.)
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from audit.findings import Finding
from audit.sources.redis.display import quote

RESYNC, DELETE = "RESYNC", "DELETE"
ACTION_BY_CATEGORY = {
    "missing_on_replica": RESYNC,
    "type_mismatch": RESYNC,
    "value_mismatch": RESYNC,
    "ttl_mismatch": RESYNC,
    "extra_on_replica": DELETE,
}
REPAIR_DIR = "repair"


@dataclass(frozen=True, slots=True)
class PlanCounts:
    path: Path
    resync: int
    delete: int


def _fields(finding: Finding | Mapping[str, Any] | Any) -> tuple[str | None, int | None, bytes | None, str | None]:
    """(category, db, key, target): target is the node a fleet's line is for (None for a pair)."""
    if isinstance(finding, Finding):
        return finding.category, finding.db, finding.key, None
    if hasattr(finding, "asDict"):  # a Spark Row (findings-schema or diff-candidate columns)
        finding = finding.asDict()
    key = finding.get("key")
    return finding.get("category"), finding.get("db"), bytes(key) if key is not None else None, finding.get("target")


def plan_line(action: str, db: int, key: bytes) -> str:
    return f"{action} {db} {quote(key)}"


def parse_line(line: str) -> tuple[str, int, bytes] | None:
    """(action, db, key) of a plan line; None for a comment or a blank line."""
    from audit.sources.redis.display import unquote

    if not line.strip() or line.startswith("#"):
        return None
    action, db, key = line.rstrip("\n").split(" ", 2)
    return action, int(db), unquote(key)


_MIGRATE = 'MIGRATE REPLICA REPLICA-PORT "" 0 5000 COPY REPLACE KEYS '
"""The RESYNC lines' recipe: the master copies each key to the replica (docs/redis-fleets.md, "What runs")."""


def _header(pair: str, run_id: str, master: str, replica: str, extra: Mapping[str, Any] | None) -> list[str]:
    lines = [
        "# replica-audit repair plan: never executed by replica-audit.",
        f"# pair {pair}, run {run_id}; master {master}; replica {replica}",
        "# RESYNC <db> <key>: copy from the master. DELETE <db> <key>: only on the replica. Keys in redis-cli quoting.",
        "# redis-cli: grep '^DELETE 0 ' PLAN | cut -d' ' -f3- | sed 's/^/DEL /' | redis-cli -h REPLICA -n 0",
        f"# redis-cli: grep '^RESYNC 0 ' PLAN | cut -d' ' -f3- | sed 's/^/{_MIGRATE}/' | redis-cli -h MASTER -n 0",
        "# (MIGRATE runs on the master and copies each key with its TTL; for db N, write N for each 0.)",
    ]
    if extra:
        lines.append(f"# {json.dumps(dict(extra), sort_keys=True, default=str)}")
    if replica == FLEET_REPLICAS:
        lines.append("# A fleet: the lines under '# on replica HOST:PORT (shard NAME)' are for that node.")
        lines.append(_SECTION_CUT)
    return lines


_SECTION_CUT = (
    "# One section a node; the recipes above take one: "
    "sed -n '/^# on replica HOST:PORT /,/^# on replica /p' PLAN > NODE-PLAN"
)
"""How to cut one node's section out of a fleet's plan, to feed the recipes as their PLAN (MASTER: its shard)."""

FLEET_REPLICAS = "(the fleet's replicas)"
"""The header's replica for a fleet, whose lines are in a section per replica."""


class _Sections:
    """The plan's lines, a `# on replica ...` comment before the first line of each target: a section holds
    its target's RESYNC lines, then its DELETE lines (spooled to `deletes` until the target changes)."""

    def __init__(self, out: Any, deletes: Any) -> None:
        self.out, self.deletes = out, deletes
        self.target: str | None = None
        self.lines = {RESYNC: 0, DELETE: 0}

    def write(self, action: str, line: str, target: str | None) -> None:
        if target is not None and target != self.target:
            self.close()
            self.out.write(f"# on replica {target}\n")
            self.target = target
        (self.out if action == RESYNC else self.deletes).write(line)
        self.lines[action] += 1

    def close(self) -> None:
        """The section's DELETE lines, after its RESYNC lines."""
        self.deletes.seek(0)
        shutil.copyfileobj(self.deletes, self.out)
        self.deletes.seek(0)
        self.deletes.truncate()


def write_plan(
    findings: Iterable[Finding | Mapping[str, Any] | Any],
    out_dir: Path,
    *,
    pair: str,
    run_id: str,
    master: str,
    replica: str,
    extra: Mapping[str, Any] | None = None,
) -> PlanCounts:
    """Write `out_dir/repair/<pair>.txt` from keyspace findings (Finding values, findings-schema rows as
    mappings or Spark Rows; diff candidates work too: they have category, db and key).

    `master`/`replica` are shown in the header: pass them redacted. A row's `target` (a fleet's: the
    replica and shard it was compared on) puts its line in that replica's section. Findings of other categories (and
    keyspace findings without a key) are ignored. Streams: DELETE lines are spooled to a temporary file
    while RESYNC lines are written, so a plan of millions of keys needs no memory for them.
    """
    path = out_dir / REPAIR_DIR / f"{pair}.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out, tempfile.TemporaryFile("w+", encoding="utf-8") as deletes:
        out.write("\n".join(_header(pair, run_id, master, replica, extra)) + "\n")
        sections = _Sections(out, deletes)
        for f in findings:
            category, db, key, target = _fields(f)
            action = ACTION_BY_CATEGORY.get(category or "")
            if action is None or key is None:
                continue
            sections.write(action, plan_line(action, int(db or 0), key) + "\n", target)
        sections.close()
    return PlanCounts(path, sections.lines[RESYNC], sections.lines[DELETE])


def findings_rows(findings_path: str | Path, pair: str) -> Iterable[dict[str, Any]]:
    """The keyspace findings of `pair` from a findings.parquet dataset, batch by batch."""
    import pyarrow.dataset as ds

    dataset = ds.dataset(str(findings_path), format="parquet")
    flt = (ds.field("pair") == pair) & ds.field("category").isin(list(ACTION_BY_CATEGORY))
    for batch in dataset.to_batches(columns=["category", "db", "key"], filter=flt):
        yield from batch.to_pylist()
