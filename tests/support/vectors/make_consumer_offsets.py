"""Regenerates ``consumer_offsets.json``: real ``__consumer_offsets`` records written by an Apache
Kafka broker's group coordinator (``tests/support/kafka_broker.py``'s version), for the codec tests in
``tests/groups/test_offsets_format.py``. Run from the repository root with the broker jars present:
``PYTHONPATH=python:tests/support python tests/support/vectors/make_consumer_offsets.py``. The records are read
back with kafkalite's ``Log`` (only batches and records: the keys and values are kept as hex)."""

from __future__ import annotations

import glob
import json
import os
import sys
import tempfile
from pathlib import Path

from kafka_broker import KAFKA_VERSION, KafkaBroker, commit_as_group, require_jars
from kafkalite import Log

OUT = Path(__file__).with_name("consumer_offsets.json")


def main() -> None:
    from kafka import KafkaProducer

    require_jars()
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp) / "logs"
        with KafkaBroker(logs, Path(tmp) / "work") as broker:
            producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers)
            for i in range(10):
                producer.send("orders", b"v%d" % i, partition=0)
            producer.close()
            # Two commits: metadata with a non-ASCII character, then an empty one.
            commit_as_group(
                broker.bootstrap_servers, "orders", "billing", read=10, commits=[(7, "nöte"), (10, "")]
            )
        records = []
        for part in sorted(glob.glob(str(logs / "__consumer_offsets-*"))):
            with Log(part, readonly=True) as log:
                for r in log.records(log.start_offset, log.end_offset):
                    records.append(
                        {
                            "partition": os.path.basename(part),
                            "offset": r.offset,
                            "key_hex": None if r.key is None else r.key.hex(),
                            "value_hex": None if r.value is None else r.value.hex(),
                        }
                    )
    json.dump(
        {
            "about": f"__consumer_offsets records written by Apache Kafka {KAFKA_VERSION} (KRaft, group "
            "coordinator of Kafka 4.x) for group 'billing' committing topic 'orders' partition 0 at "
            "offsets 7 (metadata 'nöte') then 10 (metadata ''); made by make_consumer_offsets.py",
            "records": records,
        },
        open(OUT, "w", encoding="utf-8"),
        indent=1,
        ensure_ascii=False,
    )
    print(f"{len(records)} records -> {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
