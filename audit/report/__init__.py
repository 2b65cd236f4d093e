"""summary.json and report.html for a run."""
