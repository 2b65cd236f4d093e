"""Moved to :mod:`replica_audit_provider.operators`."""

from __future__ import annotations

from replica_audit_provider.operators import (
    SOURCE_RETRY_ARGS,
    SOURCE_RETRY_POLICY,
    AuditReportOperator,
    AuditStageOperator,
    DailyReportOperator,
    PairVerdictOperator,
    PlanPairsOperator,
    SourceUnavailable,
    VerificationCertificateOperator,
)

__all__ = [
    "SOURCE_RETRY_ARGS",
    "SOURCE_RETRY_POLICY",
    "AuditReportOperator",
    "AuditStageOperator",
    "DailyReportOperator",
    "PairVerdictOperator",
    "PlanPairsOperator",
    "SourceUnavailable",
    "VerificationCertificateOperator",
]
