"""The fault-injection suite (issue 9): child processes that produce and consume while a
controller kills, stops, starves and fills the disk under them, and a checker of the
invariants the README promises, computed from what every client journaled.

- ``journal.py``   the fsync'd, line-per-event journal every child writes, and child setup
                   (descriptor limit, stop on SIGTERM)
- ``producer_child.py`` / ``member_child.py``  the clients (run as ``python -m faults.X``)
- ``controller.py`` starts, kills, stops and restarts children, fills the disk, then checks
- ``checker.py``   the invariants, from the journals and the recovered data directory

``python -m faults.controller --seconds 600 [--seed N]`` (with ``tests`` on PYTHONPATH) runs
the long version; ``tests/test_fault_injection.py`` the short one."""
