"""An index write that fails after its batch was published (ENOSPC on a full disk: the log's
blocks are reserved ahead, its index's are not) must not leave the writer's next offset behind:
before the fix the next batch got the same offsets, another writer then refused to follow the
log and cleared the "torn" bytes, destroying acknowledged records. Fail point `index.append`."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from kafkalite import Log

WRITER = textwrap.dedent(
    """
    import json, sys
    from kafkalite import Log
    from kafkalite.errors import KafkaliteError

    acked, failed = [], []
    with Log(sys.argv[1], index_interval_bytes=1, shared_writers=True, flush="always") as log:
        for i in range(60):
            try:
                first, last = log.append_values([b"v%d" % i])
                acked.append([first, i])
            except KafkaliteError as e:
                failed.append([i, type(e).__name__])
    print(json.dumps({"acked": acked, "failed": failed}))
    """
)


@pytest.mark.parametrize("nth", [3, 10, 25])
def test_a_failed_index_write_never_repeats_offsets(tmp_path, nth):
    part = str(tmp_path / "t-0")
    env = {**os.environ, "KAFKALITE_FAILPOINTS": f"index.append=enospc@{nth}"}
    done = subprocess.run(
        [sys.executable, "-c", WRITER, part], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    import json

    result = json.loads(done.stdout)
    assert len(result["failed"]) == 1, result["failed"]  # the one append whose index write failed is reported
    with Log(part) as log:  # a writer's open recovers and rebuilds the index
        records = list(log.records(0))
    offsets = [r.offset for r in records]
    assert offsets == list(range(len(records))), "offsets must stay dense and unique"
    by_offset = {r.offset: r.value for r in records}
    for first, i in result["acked"]:
        assert by_offset.get(first) == b"v%d" % i, (
            f"acknowledged v{i} at {first} holds {by_offset.get(first)!r}"
        )


@pytest.mark.slow
def test_a_second_writer_never_writes_over_a_published_batch(tmp_path, spawn):
    """Two shared writers alternate while index writes fail now and then: every acknowledged
    record stays at its offset (the follower must never clear published bytes)."""
    part = str(tmp_path / "t-0")
    env = {**os.environ, "KAFKALITE_FAILPOINTS": "index.append=enospc@7"}
    procs = [spawn.code(WRITER, part, env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    import json

    results = []
    for p in procs:
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 0
        results.append(json.loads(out))
    with Log(part) as log:
        by_offset = {r.offset: r.value for r in log.records(0)}
    assert sorted(by_offset) == list(range(len(by_offset)))
    seen = set()
    for result in results:
        for first, i in result["acked"]:
            assert first not in seen, f"offset {first} acknowledged twice"
            seen.add(first)
            assert by_offset.get(first) == b"v%d" % i
