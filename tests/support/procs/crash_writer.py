"""Child process for test_crash.py: appends forever with flush="always" and prints the last
offset of every acknowledged append. The value of offset o is value_for(o), so the parent
can check every acknowledged record after a SIGKILL."""

import random
import sys

from kafkalite import Log


def value_for(offset: int) -> bytes:
    return (b"%d;" % offset) * (1 + offset % 13)


def main(path: str, seed: int) -> None:
    rng = random.Random(seed)
    log = Log(path, segment_bytes=64 * 1024, flush="always")
    print("ready", log.end_offset, flush=True)
    while True:
        end = log.end_offset
        n = rng.randint(1, 200)
        _, last = log.append_values([value_for(o) for o in range(end, end + n)])
        print(last, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
