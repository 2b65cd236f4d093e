"""Airflow DAG file: the `consistency_audit` DAG, from the replica-audit provider.

The DAG is defined in the provider distribution (providers/replica-audit), installed by `make setup`;
this file only makes Airflow's DAG processor find it. Its documentation is the DAG's doc_md.
"""

from __future__ import annotations

from replica_audit_provider.dags import consistency_audit_dag

dag = consistency_audit_dag()
