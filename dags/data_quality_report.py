"""Airflow DAG file: the `data_quality_report` DAG, from the replica-audit provider.

The DAG is defined in the provider distribution (providers/replica-audit), installed by `make setup`;
this file only makes Airflow's DAG processor find it. Its documentation is the DAG's doc_md.
"""

from __future__ import annotations

from replica_audit_provider.dags import data_quality_report_dag

dag = data_quality_report_dag()
