"""pyarrow is optional: the extra ``kafkalite[arrow]`` (included in ``[spark]``). The producer,
consumer, CLI and ``Log`` work without it; the methods that return pyarrow objects import it
through ``require_pyarrow``, which says what to install. Arrow data also leaves the engine
without pyarrow, through the Arrow PyCapsule interface (``Log.read_arrow_c``), which polars,
duckdb and pyarrow all take."""

from __future__ import annotations

from types import ModuleType

from kafkalite.errors import MissingDependencyError

INSTALL_HINT = "pip install 'kafkalite[arrow]'"


def require_pyarrow(what: str) -> ModuleType:
    """The pyarrow module, or MissingDependencyError naming the extra to install."""
    try:
        import pyarrow
    except ImportError:
        raise MissingDependencyError(
            f"{what} returns pyarrow objects, and pyarrow is not installed: {INSTALL_HINT}; "
            "or take the same data without pyarrow from Log.read_arrow_c (the Arrow PyCapsule interface, "
            "for polars.from_arrow, duckdb or pyarrow)"
        ) from None
    return pyarrow
