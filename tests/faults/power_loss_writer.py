"""The workload of tests/engine/test_power_loss.py: a ``Log(flush="always")`` with small segments,
appended batch by batch. After each acknowledged append it copies the partition's files to
``SNAPSHOTS/<k>/`` (what flush="always" promises is durable at that point), records the end
offset in ``SNAPSHOTS/<k>.end``, and opens ``MARKERS/<k>`` (which does not exist): that failing
openat() is the point in the strace log where ack k happened. It ends with os._exit, as a crash
would: no close, no clean-shutdown marker.

usage: power_loss_writer.py PARTITION_DIR SNAPSHOTS MARKERS SEED BATCHES SEGMENT_BYTES"""

from __future__ import annotations

import os
import random
import shutil
import sys

from kafkalite import Log


def value_for(offset: int) -> bytes:
    return (b"%d;" % offset) * (1 + offset % 13)


def main(part_dir: str, snapshots: str, markers: str, seed: int, batches: int, segment_bytes: int) -> None:
    rng = random.Random(seed)
    log = Log(part_dir, segment_bytes=segment_bytes, flush="always")
    for k in range(batches):
        end = log.end_offset
        n = rng.randint(1, 40)
        log.append_values([value_for(o) for o in range(end, end + n)])
        snap = os.path.join(snapshots, str(k))
        os.makedirs(snap)
        for name in os.listdir(part_dir):
            shutil.copyfile(os.path.join(part_dir, name), os.path.join(snap, name))
        with open(os.path.join(snapshots, f"{k}.end"), "w") as f:
            f.write(str(log.end_offset))
        try:
            os.open(os.path.join(markers, str(k)), os.O_RDONLY)
        except FileNotFoundError:
            pass
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], a[1], a[2], int(a[3]), int(a[4]), int(a[5]))
