"""Child process for test_concurrency.py: appends `total` records in random-sized batches
(small segments, so it rolls often), value_for(offset) as each value, then exits."""

import random
import sys

from kafkalite import Log

from procs.crash_writer import value_for


def main(path: str, total: int) -> None:
    rng = random.Random(total)
    with Log(path, segment_bytes=32 * 1024) as log:
        while log.end_offset < total:
            end = log.end_offset
            n = min(rng.randint(1, 50), total - end)
            log.append_values([value_for(o) for o in range(end, end + n)])


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
