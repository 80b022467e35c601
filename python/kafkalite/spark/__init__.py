"""The PySpark data source (``format("kafkalite")``); needs ``pip install 'kafkalite[spark]'``.

Importing this package (it does not import pyspark) makes Spark's Python workers run this
interpreter unless ``PYSPARK_PYTHON`` is set (``kafkalite.spark.interpreter``): import it before
the SparkSession starts."""

from typing import Any

from kafkalite.spark.interpreter import use_this_interpreter

use_this_interpreter()

__all__ = ["KafkaliteDataSource"]


def __getattr__(name: str) -> Any:
    if name == "KafkaliteDataSource":  # imports pyspark: only when asked for
        from kafkalite.spark.source import KafkaliteDataSource

        return KafkaliteDataSource
    raise AttributeError(f"module 'kafkalite.spark' has no attribute {name!r}")
