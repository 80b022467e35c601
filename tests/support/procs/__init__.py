"""Child-process scripts the tests start through the ``spawn`` fixture (tests/conftest.py).

Each runs as ``python tests/support/procs/<name>.py ARGS``; tests import shared helpers from them
as ``procs.<name>`` (for example ``procs.crash_writer.value_for``)."""
