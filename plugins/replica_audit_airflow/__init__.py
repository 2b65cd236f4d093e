"""Airflow adapters for replica-audit: hooks on Airflow connections and operators that call one library function."""
