"""The library's Spark code uses the DataFrame API only, so every kind runs on a Spark Connect master
(docs/spark.md): no SparkContext, RDD or JVM handle outside the session module's classic-only branches.

tests/integration/test_spark_connect.py runs the kinds through a server; this catches a job it does not
reach (a code path its pairs do not take) the moment such an attribute is written."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

CLASSIC_ONLY = {"sparkContext", "rdd", "_jvm", "_jsc", "_jdf", "_jsparkSession", "_gateway"}
# the session itself (log level, default parallelism: each behind is_connect/a local master) and the
# class-archive builder, which runs a local JVM of its own by design
ALLOWED = {Path("audit/diff/spark.py"), Path("audit/diff/build_class_cache.py")}


def _uses(path: Path, root: Path = REPO) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        f"{path.relative_to(root)}:{node.lineno} .{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in CLASSIC_ONLY
    ]


def test_no_classic_only_spark_attribute_in_the_library() -> None:
    found = [
        use
        for path in sorted((REPO / "audit").rglob("*.py"))
        if path.relative_to(REPO) not in ALLOWED
        for use in _uses(path)
    ]
    assert found == []


def test_the_check_sees_such_an_attribute(tmp_path: Path) -> None:
    job = tmp_path / "job.py"
    job.write_text("def f(spark, df):\n    return spark.sparkContext.parallelize([1]), df.rdd\n")
    assert sorted(_uses(job, tmp_path)) == ["job.py:2 .rdd", "job.py:2 .sparkContext"]
