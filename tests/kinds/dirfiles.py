"""Kind `dirfiles`: two directories of files compared by content (a test's own kind).

    - name: assets
      kind: dirfiles
      master: {path: /srv/assets}
      replica: {path: /mnt/mirror/assets}

Registered with REPLICA_AUDIT_KINDS="dirfiles=tests.kinds.dirfiles"; its GX suite is dirfiles.json
beside this file. Findings: `missing_on_replica`, `extra_on_replica` and `value_mismatch`, keyed by the
file's path relative to the directory.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import xxhash

from audit.errors import SnapshotError
from audit.findings import Finding
from audit.kernel.check import Check, Uncovered
from audit.kernel.context import StageContext
from audit.kernel.kind import KindSpec
from audit.kernel.pair import PairBase, Strict
from audit.kernel.state import MetricValue

SIDES = ("master", "replica")
LISTING = "files.json"


class DirEndpoint(Strict):
    path: str


class DirPair(PairBase):
    kind: Literal["dirfiles"]
    master: DirEndpoint
    replica: DirEndpoint


def listing(root: Path) -> tuple[dict[str, str], list[str]]:
    """Every regular file under `root` -> its content digest; and the files that could not be read."""
    digests: dict[str, str] = {}
    unreadable: list[str] = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            rel = path.relative_to(root).as_posix()
            try:
                digests[rel] = xxhash.xxh3_128_hexdigest(path.read_bytes())
            except OSError:
                unreadable.append(rel)
    return digests, unreadable


class FilesCheck(Check):
    name = "files"
    coverage = ("master_files", "replica_files", "files_compared")

    def __init__(self, pair: DirPair) -> None:
        self.pair = pair

    def snapshot(self, ctx: StageContext) -> None:
        for side in SIDES:
            root = Path(getattr(self.pair, side).path)
            if not root.is_dir():
                raise SnapshotError(f"pair {self.pair.name}: {side} {root}: no such directory", where=str(root))
            digests, unreadable = listing(root)
            out = ctx.snapshot_dir(side)
            out.mkdir(parents=True, exist_ok=True)
            (out / LISTING).write_text(json.dumps(digests, sort_keys=True))
            ctx.metrics[f"{side}_files"] = len(digests)
            ctx.metrics[f"{side}_files_unreadable"] = len(unreadable)
            ctx.state.servers[side] = {"endpoint": str(root), "version": None}
        ctx.done("both directories listed")

    def diff(self, ctx: StageContext) -> None:
        m, r = (json.loads((ctx.snapshot_dir(side) / LISTING).read_text()) for side in SIDES)
        found = [
            Finding("files", "missing_on_replica", key=k.encode(), master_digest=m[k]) for k in sorted(m.keys() - r)
        ]
        found += [
            Finding("files", "extra_on_replica", key=k.encode(), replica_digest=r[k]) for k in sorted(r.keys() - m)
        ]
        found += [
            Finding("files", "value_mismatch", key=k.encode(), master_digest=m[k], replica_digest=r[k])
            for k in sorted(m.keys() & r.keys())
            if m[k] != r[k]
        ]
        ctx.add_findings(found)
        ctx.metrics["files_compared"] = len(m.keys() & r.keys())

    def uncovered(self, metrics: Mapping[str, MetricValue]) -> list[Uncovered]:
        n = int(metrics.get("master_files_unreadable") or 0) + int(metrics.get("replica_files_unreadable") or 0)
        return [Uncovered(n, f"{n} files could not be read")]


def checks(pair: Any) -> Sequence[Check]:
    return [FilesCheck(pair)]


KIND = KindSpec(
    name="dirfiles",
    pair_model=DirPair,
    checks=checks,
    suite=str(Path(__file__).with_name("dirfiles.json")),
    endpoint_help="{path: DIRECTORY}",
    uses_spark=False,
)
