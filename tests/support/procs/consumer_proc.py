"""Child process: consume `topic` from the beginning until `expected` records arrived (or a
timeout), writing "partition offset value" lines to `out`. With expected=1, prints the
wall-clock time at which the first record arrived (the wake-up test)."""

import sys
import time

from kafkalite import Consumer


def main(data_dir: str, topic: str, expected: int, out: str) -> None:
    consumer = Consumer(data_dir, topic, auto_offset_reset="earliest")
    print("ready", flush=True)
    seen = 0
    deadline = time.time() + 240
    with open(out, "w") as f:
        while seen < expected and time.time() < deadline:
            for records in consumer.poll(timeout_ms=1000, max_records=10_000).values():
                arrived = time.time()
                for r in records:
                    f.write(f"{r.partition} {r.offset} {r.value.decode()} {arrived}\n")
                seen += len(records)
    consumer.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
