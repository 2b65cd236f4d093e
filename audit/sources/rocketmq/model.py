"""The rocketmq kind's inventory model: each side is a store directory, not a server.

    master: {store_dir: /data/rmq-a/store, broker_log: /data/rmq-a/logs/broker.log, ha_status: /tmp/ha.txt}
    replica: {store_dir: /data/rmq-a-s/store}

`store_dir` holds `commitlog/` (or is it; `a;b` for several paths); `broker_log` (one path or a list:
broker.log, store.log) gives the master's `Slave fall behind master` lines and HA requests; `ha_status`
a saved `mqadmin haStatus` output, `broker_status` (either side) a saved `brokerStatus` whose
commitLogMaxOffset is set beside the files' max offset, `ha_addr` the slave's HA address. What is not
given is skipped, and the summary says so; a given file with nothing parsable is an error or, for broker
logs without an HA line, uncovered (audit/sources/rocketmq/ha_check.py).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from audit.errors import ConfigError
from audit.kernel.pair import PairBase, Strict
from audit.urls import ConnResolver


class StoreEndpoint(Strict):
    store_dir: str = Field(min_length=1)
    broker_log: str | list[str] | None = None
    ha_status: str | None = None
    broker_status: str | None = None
    ha_addr: str | None = None


def _endpoint_or_conn(value: Any) -> Any:
    if isinstance(value, str) and not value.startswith("conn:"):
        raise ValueError("expected a mapping {store_dir: ..., broker_log: ...} or conn:<airflow_conn_id>")
    return value


StoreSide = Annotated[StoreEndpoint | str, BeforeValidator(_endpoint_or_conn)]
"""A store as a mapping, or `conn:<id>`: an Airflow connection of type replica_audit_rocketmq (or fs/file)."""


class RocketMQPair(PairBase):
    kind: Literal["rocketmq"]
    master: StoreSide
    replica: StoreSide

    def store(self, side: str, resolver: ConnResolver | None = None) -> StoreEndpoint:
        """The side's store; a `conn:<id>` is read through `resolver` (AIRFLOW_CONN_<ID> when None)."""
        value = getattr(self, side)
        if isinstance(value, StoreEndpoint):
            return value
        from audit.connections import endpoint_url

        text = str(endpoint_url(value, resolver))
        if "://" in text:  # a server's URL (its secret included): never quoted, never read as a path
            raise ConfigError(f"{side}: {value} is a server connection; a RocketMQ side needs a file-store one")
        fields = json.loads(text) if text.lstrip().startswith("{") else {"store_dir": text}
        return StoreEndpoint.model_validate(fields)
