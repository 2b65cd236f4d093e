"""The kernel every kind plugs into: the pair's typed state, checks, the stage context, kinds.

- `state`: :class:`PairState`, what the stages of one pair leave for each other (work/<pair>/state.json).
- `check`: :class:`Check`, one thing a kind audits (a keyspace, a log, replication state), stage by stage.
- `context`: :class:`StageContext`, what a check's stage is given: pair, run, state, connections, progress.
- `staging`: findings staged by checks at any stage, consolidated into the pair's findings file.
- `kind`: :class:`KindSpec`, a kind = its pair model, its checks and its GX suite; the registry's loader.
- `suite`: where a kind's GX suite file lives and which gate thresholds it reads.

docs/architecture.md tells the whole flow; docs/adding-a-kind.md the checklist for a new kind.
"""

from __future__ import annotations
