"""The PySpark data source (``format("kafkalite")``); needs ``pip install 'kafkalite[spark]'``."""

from kafkalite.spark.source import KafkaliteDataSource

__all__ = ["KafkaliteDataSource"]
