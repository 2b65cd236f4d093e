"""Source kinds. A plain registry dict: one module per kind, each describing itself."""

from __future__ import annotations

from audit.errors import ConfigError
from audit.sources.base import Source


def _redis() -> Source:
    from audit.sources.redis.source import RedisSource

    return RedisSource()


def _pika() -> Source:
    from audit.sources.pika.source import PikaSource

    return PikaSource()


def _rocketmq() -> Source:
    from audit.sources.rocketmq.source import RocketMQSource

    return RocketMQSource()


SOURCE_BY_KIND = {
    "redis": _redis,
    "pika": _pika,
    "rocketmq": _rocketmq,
}
"""kind -> factory. Factories import lazily, so loading the registry pulls in no driver."""


def source_for(kind: str) -> Source:
    try:
        factory = SOURCE_BY_KIND[kind]
    except KeyError:
        known = ", ".join(SOURCE_BY_KIND)
        raise ConfigError(f"kind {kind!r} is not implemented in this version (implemented: {known})") from None
    return factory()
