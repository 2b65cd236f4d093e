"""Airflow assets: one per audited pair, `replica-audit://<pair>`, updated by every audit of the pair.

The pairs are known only at run time (they come from the inventory), so tasks emit the events
through one asset alias; Airflow creates a pair's asset on its first event. Each event's extra is
the pair's verdict: `{"run_id", "pair", "status", "divergences", "counts", "failed_checks", ...}`.
A DAG that should run after a pair was audited schedules on `pair_asset("cache-main")`.
"""

from __future__ import annotations

from airflow.sdk import Asset, AssetAlias

ASSET_SCHEME = "replica-audit"
PAIR_VERDICTS = AssetAlias("replica-audit-pair-verdicts")
"""The alias every pair's verdict event goes through."""


def pair_asset(pair: str) -> Asset:
    return Asset(uri=f"{ASSET_SCHEME}://{pair}", name=f"{ASSET_SCHEME}/{pair}")
