"""A shared writer driven line by line on stdin, for tests of how writers follow each other's
rolls and deletions (tests/engine/test_segment_follow_counter.py).

    segment_follower.py PART_DIR SEGMENT_BYTES [RETENTION_BYTES]

Commands, one per line; each answers one line on stdout once done (an acknowledgement):
  append VALUE     -> "FIRST LAST" of the one-record append
  appendn N        -> "FIRST LAST" after N one-record appends (values b"n<offset>")
  retention        -> how many segments enforce_retention deleted
  view             -> "BASE,BASE,..." the segments as this writer saw them at its last append
  quit             -> closes the log and exits
"""

from __future__ import annotations

import sys

from kafkalite import Log

path, segment_bytes = sys.argv[1], int(sys.argv[2])
retention = int(sys.argv[3]) if len(sys.argv) > 3 else None
log = Log(path, segment_bytes=segment_bytes, shared_writers=True, retention_bytes=retention)
print("ready", flush=True)
for line in sys.stdin:
    cmd, _, arg = line.strip().partition(" ")
    if cmd == "append":
        first, last = log.append_values([arg.encode()], timestamp=1)
        print(first, last, flush=True)
    elif cmd == "appendn":
        first = last = -1
        for i in range(int(arg)):
            f, last = log.append_values([b"n%d" % log.end_offset], timestamp=1)
            first = f if i == 0 else first
        print(first, last, flush=True)
    elif cmd == "retention":
        print(log.enforce_retention(), flush=True)
    elif cmd == "view":
        print(",".join(str(s.base_offset) for s in log.segments), flush=True)
    elif cmd == "quit":
        break
    else:
        raise SystemExit(f"unknown command {line!r}")
log.close()
