"""Producer memory (issue 14 target 6): a producer writing one partition stays within 100 MB
resident, file-backed pages included. The writer maps the whole active segment; before, every
page it wrote stayed mapped (2,000,000 keyed sends: 264 MB resident, 251 MB file-backed). Now
it keeps a window of 2-6 MiB around its write position faulted in and drops the pages behind
it (the page cache keeps them): bench_hot_paths' 600,000 keyed sends peak at 29 MB resident
(65 MB when it kept an allocation step behind and one ahead). Measured in a child process
from /proc/self/status, so the test's own memory does not count."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CHILD = r"""
import json, os, sys
from kafkalite import Admin, Consumer, Producer

def status():
    out = {}
    for line in open("/proc/self/status"):
        k, _, v = line.partition(":")
        if k in ("VmRSS", "RssFile"):
            out[k] = int(v.split()[0]) * 1024
    return out

data = sys.argv[1]
Admin(data).create_topic("t", partitions=1)
values = [b"v" * 1000] * 1000
peak = {"VmRSS": 0, "RssFile": 0}
with Producer(data) as p:
    for i in range(200):  # 200 MB of records into one segment (segment.bytes is 1 GiB)
        p.send_batch("t", values, partition=0)
        if i % 10 == 9:
            peak = {k: max(v, peak[k]) for k, v in status().items()}
    p.send("t", b"last").get(10)
    peak = {k: max(v, peak[k]) for k, v in status().items()}
size = os.path.getsize(os.path.join(data, "t-0", "00000000000000000000.log"))
# Released pages are still there: read back the first and the last records.
with Consumer(data, "t", auto_offset_reset="earliest") as c:
    first = next(iter(c)).value
print(json.dumps({**peak, "first": first.decode(), "log_bytes": size}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_a_producer_writing_one_partition_stays_within_100_mb_resident(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["first"] == "v" * 1000
    assert got["log_bytes"] > 200 * 1000 * 1000  # the records were written: 200 MB in the segment
    assert got["RssFile"] < 100 << 20, got
    assert got["VmRSS"] < 100 << 20, got  # all of it, the interpreter (~25 MB) included
