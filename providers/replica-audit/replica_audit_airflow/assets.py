"""Moved to :mod:`replica_audit_provider.assets`."""

from __future__ import annotations

from replica_audit_provider.assets import ASSET_SCHEME, PAIR_VERDICTS, pair_asset

__all__ = ["ASSET_SCHEME", "PAIR_VERDICTS", "pair_asset"]
