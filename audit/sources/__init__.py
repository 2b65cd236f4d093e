"""The kinds, one package each; this registry maps a kind's name to the module that declares it.

A kind module exposes ``KIND = KindSpec(...)`` (audit/kernel/kind.py): its pair model, its checks and
its GX suite. docs/adding-a-kind.md is the checklist for a new one; kinds that live outside this
package register through the ``replica_audit.kinds`` entry point or ``REPLICA_AUDIT_KINDS``.
"""

from __future__ import annotations

BUILTIN_KINDS = {
    "redis": "audit.sources.redis.kind",
    "pika": "audit.sources.pika.kind",
    "rocketmq": "audit.sources.rocketmq.kind",
}
