"""Which interpreter Spark's Python workers run. The JVM reads ``PYSPARK_PYTHON`` (else
``PYSPARK_DRIVER_PYTHON``, else ``python3`` from PATH) once, when the driver process launches
it; a ``python3`` that is not this interpreter has no kafkalite, so PySpark's lookup of
``format("kafkalite")`` ends in DATA_SOURCE_NOT_FOUND. Importing ``kafkalite.spark`` before the
session starts points the workers at this interpreter unless the user chose one (the same
Python for driver and workers is also what PySpark requires). Nothing here imports pyspark.
"""

from __future__ import annotations

import os
import shutil
import sys

#: The line to run before the session starts, quoted in the warning and the README.
FIX = 'os.environ["PYSPARK_PYTHON"] = sys.executable  # before SparkSession.builder...getOrCreate()'


def _jvm_started() -> bool:
    pyspark = sys.modules.get("pyspark")
    context = getattr(pyspark, "SparkContext", None) if pyspark else None
    return getattr(context, "_gateway", None) is not None


def _path_python_is_this_one() -> bool:
    found = shutil.which("python3")
    return found is not None and os.path.dirname(os.path.abspath(found)) == os.path.dirname(
        os.path.abspath(sys.executable)
    )


def use_this_interpreter() -> None:
    """``PYSPARK_PYTHON`` defaults to ``sys.executable``; if Spark's JVM already runs without
    it and would start another ``python3``, say so with the line that fixes it."""
    if os.environ.get("PYSPARK_PYTHON") or not sys.executable:
        return
    if _jvm_started():
        if not os.environ.get("PYSPARK_DRIVER_PYTHON") and not _path_python_is_this_one():
            import logging  # only on this path: `import kafkalite` does not load logging

            logging.getLogger("kafkalite.spark").warning(
                "Spark started before kafkalite.spark was imported and its Python workers will run %s, not %s: "
                'format("kafkalite") may fail with DATA_SOURCE_NOT_FOUND. Import kafkalite.spark before creating the '
                "SparkSession, or set %s",
                shutil.which("python3") or "python3 (not found on PATH)",
                sys.executable,
                FIX,
            )
        return
    os.environ["PYSPARK_PYTHON"] = sys.executable
