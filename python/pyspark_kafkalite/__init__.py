"""PySpark finds Python data sources in installed top-level modules named ``pyspark_*`` that
expose ``DefaultSource``: this makes ``spark.read.format("kafkalite")`` work with no register
call."""

from kafkalite.spark import KafkaliteDataSource as DefaultSource

__all__ = ["DefaultSource"]
