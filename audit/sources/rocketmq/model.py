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

from typing import Literal

from pydantic import Field

from audit.kernel.pair import PairBase, Strict


class StoreEndpoint(Strict):
    store_dir: str = Field(min_length=1)
    broker_log: str | list[str] | None = None
    ha_status: str | None = None
    broker_status: str | None = None
    ha_addr: str | None = None


class RocketMQPair(PairBase):
    kind: Literal["rocketmq"]
    master: StoreEndpoint
    replica: StoreEndpoint
