"""The fault-injection suites. Issue 9's: child processes that produce and consume while a
controller kills, stops, starves and fills the disk under them, and a checker of the
invariants the README promises, computed from what every client journaled.

- ``journal.py``   the fsync'd, line-per-event journal every child writes, and child setup
                   (descriptor limit, stop on SIGTERM)
- ``producer_child.py`` / ``member_child.py``  the clients (run as ``python -m faults.X``)
- ``controller.py`` starts, kills, stops and restarts children, fills the disk, then checks
- ``checker.py``   the invariants, from the journals and the recovered data directory
- ``txn_child.py``  transactional consume-transform-produce jobs (issue 22: commit or abort at
                   random, offsets sent in the transaction, one partition assigned or a topic
                   subscribed in a shared group; a ``zombie`` fault SIGSTOPs one and starts its
                   successor, which must fence it); ``txn_checker.py`` their
                   invariants (T1-T5: committed all there, aborted/unfinished never visible,
                   input offsets committed iff their records are, zombies fenced)

``python -m faults.controller --seconds 600 [--seed N]`` (with ``tests`` and ``tests/support`` on PYTHONPATH) runs
the long version; ``tests/faults/test_fault_injection.py`` the short one.

The server soak-and-fault suite (issue 21) reuses them around ``kafkalite serve``:

- ``server_controller.py`` the server as a child (kill -9, restart), network and embedded
                   clients, the probe, the attack episodes, RSS samples; then the checks
- ``server_producer_child.py`` / ``server_member_child.py``  network clients (confluent-kafka
                   idempotent acks=all; kafka-python group members through member_child's Member)
- ``server_probe.py``  ApiVersions/Metadata/Produce/Fetch/OffsetFetch latencies, all run long
- ``server_attacks.py`` hostile frames, fetch amplification, metadata floods, idle connections,
                   commits from outside the groups (one episode per process)
- ``server_txn_child.py`` network transactional consume-transform-produce jobs (confluent-kafka;
                   ``txn_child``'s journal, checked by ``txn_checker.py``)
- ``server_checker.py`` the invariants by name (the checker's rules plus deadlines, RSS,
                   non-owner commits)

``python -m faults.server_controller --seconds 900 [--seed N] [--attacks ...]`` runs the long
version; ``tests/faults/test_server_fault_injection.py`` the short one. Their wire client (framing with
deadlines, requests by kafka-python's protocol classes) is the tests' own, ``tests/support/server_wire.py``."""
