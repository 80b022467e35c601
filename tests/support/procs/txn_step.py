"""One consume-transform-produce transaction, for the kill tests of tests/transactions/test_transactions.py:
read partition in-0 of DATA from group "g"'s committed offset, write each value with a
"out-" prefix to topic "out" (keyed, so both of its partitions are written), send the input
offsets to the transaction, then commit (or abort with MODE "abort"). With
KAFKALITE_FAILPOINTS set, the process is killed at that step; "finished" is printed only if
it was not.

    python txn_step.py DATA TRANSACTIONAL_ID MODE
"""

import sys

from kafkalite import Consumer, Producer, TopicPartition

data, txn_id, mode = sys.argv[1], sys.argv[2], sys.argv[3]
tp = TopicPartition("in", 0)
consumer = Consumer(data, group_id="g", enable_auto_commit=False, auto_offset_reset="earliest")
consumer.assign([tp])
records = consumer.poll(timeout_ms=1000, max_records=1000).get(tp, [])
producer = Producer(data, transactional_id=txn_id)
producer.init_transactions()
producer.begin_transaction()
for r in records:
    producer.send("out", b"out-" + r.value, key=r.value)
producer.flush()
if records:
    producer.send_offsets_to_transaction({tp: records[-1].offset + 1}, consumer.group_metadata())
if mode == "abort":
    producer.abort_transaction()
else:
    producer.commit_transaction()
producer.close()
print("finished", flush=True)
