"""Spark jobs that compare two snapshots. Library code: no Airflow, no servers."""
