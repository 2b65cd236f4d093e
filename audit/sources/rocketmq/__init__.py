"""RocketMQ (kind `rocketmq`): the commit-log format and scanner (`commitlog`), HA state from broker logs and
mqadmin output (`ha`). The Spark diff of two stores lives in `audit.diff.commitlog`.

Reference: shared/reference/rocketmq.md; incidents: seeds 000 and 001 (negative "slave fall behind master").
"""

from __future__ import annotations
