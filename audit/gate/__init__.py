"""The gate: checks one audited pair's numbers against a Great Expectations suite and renders Data Docs."""
