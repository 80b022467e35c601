"""Child process for test_shared_writers.py: writer `wid` appends `count` records to a shared
partition in random-sized batches; each value is b"<wid>:<seq>". Prints the last acknowledged
seq after each append when asked to (for the kill test)."""

import random
import sys

from kafkalite import Log


def main(path: str, wid: int, count: int, report: bool) -> None:
    rng = random.Random(wid)
    log = Log(path, segment_bytes=64 * 1024, shared_writers=True, flush="always" if report else "os")
    seq = 0
    while seq < count:
        n = min(rng.randint(1, 300), count - seq)
        log.append_values([b"%d:%d" % (wid, s) for s in range(seq, seq + n)])
        seq += n
        if report:
            print(seq - 1, flush=True)
    log.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), len(sys.argv) > 4)
