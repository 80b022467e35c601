"""An embedded group member for tests/groups/test_group_mix.py: subscribes to TOPIC in GROUP and
prints one line once it knows its fate, ``joined t:p,...`` (its assignment) or ``refused
MESSAGE`` (InconsistentGroupProtocolError), then keeps polling until killed.

usage: embedded_group_holder.py DATA_DIR TOPIC GROUP"""

from __future__ import annotations

import sys
import time

from kafkalite import Consumer, InconsistentGroupProtocolError

data_dir, topic, group = sys.argv[1:4]
consumer = Consumer(data_dir, group_id=group, session_timeout_ms=6000, heartbeat_interval_ms=500)
try:
    consumer.subscribe([topic])  # joins the group
except InconsistentGroupProtocolError as e:
    print("refused", e, flush=True)
    sys.exit(0)
while not consumer.assignment():
    consumer.poll(timeout_ms=50)
print("joined", ",".join(f"{tp.topic}:{tp.partition}" for tp in sorted(consumer.assignment())), flush=True)
while True:
    consumer.poll(timeout_ms=100)
    time.sleep(0.05)
