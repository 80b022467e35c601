"""A group member for bench_groups.py: consumes topic "t" and prints, unbuffered,
``OWNS <monotonic ns> t:p,...`` whenever its assignment changes and ``FIRST <ns> t:p`` when it
first gets a record of a newly assigned partition.

usage: group_member.py DATA_DIR GROUP STRATEGY"""

from __future__ import annotations

import sys
import time

from kafkalite import Consumer

data_dir, group, strategy = sys.argv[1:4]
fresh: set = set()


class Listener:
    def on_partitions_revoked(self, revoked):
        pass

    def on_partitions_assigned(self, assigned):
        fresh.update(assigned)


consumer = Consumer(
    data_dir, group_id=group, auto_offset_reset="latest", partition_assignment_strategy=[strategy]
)
consumer.subscribe(["t"], listener=Listener())
print("READY", flush=True)
owned: set = set()
while True:
    if consumer.assignment() != owned:
        owned = consumer.assignment()
        print(f"OWNS {time.monotonic_ns()} " + ",".join(sorted(f"{t}:{p}" for t, p in owned)), flush=True)
    for tp in consumer.poll(timeout_ms=100, max_records=1000):
        if tp in fresh:
            fresh.discard(tp)
            print(f"FIRST {time.monotonic_ns()} {tp.topic}:{tp.partition}", flush=True)
    consumer.commit()
