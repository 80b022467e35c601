"""A network producer process for the server suite: confluent-kafka (librdkafka) with
enable.idempotence=true and acks=all against ``kafkalite serve``, small random steps of records
whose value carries (producer, seq) as producer_child's do; journals every acknowledged record
with the offset of its delivery report (``ack``, the format the checker reads) and every failed
one (``fail``). A delivery report that never comes (librdkafka promises one within
message.timeout.ms) is journaled as ``stuck``. KafkaException is the typed error; anything else
escapes as a traceback, which the checker reports."""

from __future__ import annotations

import random
import sys
import time

from faults.journal import EXIT_TYPED_ERROR, Journal, Stop, child_args, encode_value

STOP = Stop()

import confluent_kafka  # noqa: E402 (after STOP, see producer_child)

KEYS = 40
MESSAGE_TIMEOUT_MS = 30_000
FLUSH_SLACK_S = 30  # past message.timeout.ms: every report must have come by then


def main() -> None:
    parser = child_args(__doc__ or "")
    parser.add_argument("--bootstrap", required=True)
    args = parser.parse_args()
    journal = Journal(args.journal)
    rng = random.Random(args.seed)
    journal.write("start", name=args.name)
    topics = args.topics.split(",")
    fatal: list[str] = []
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "client.id": args.name,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": rng.choice([0, 5, 20]),
            "message.timeout.ms": MESSAGE_TIMEOUT_MS,
            "reconnect.backoff.max.ms": 500,
            "error_cb": lambda err: fatal.append(str(err)) if err.fatal() else None,
        }
    )
    seq = 0
    while not STOP.requested and not fatal:
        topic = rng.choice(topics)
        reports: list[tuple[int, bytes | None, object, object]] = []
        send_t = time.monotonic_ns()
        for _ in range(rng.randint(1, 40)):
            key = b"k%d" % rng.randrange(KEYS) if rng.random() < 0.5 else None
            s = seq
            seq += 1
            while True:
                try:
                    producer.produce(
                        topic,
                        encode_value(args.name, s, rng.randrange(200)),
                        key=key,
                        on_delivery=lambda err, msg, s=s, key=key, out=reports: out.append(
                            (s, key, err, msg)
                        ),
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
        pending = producer.flush(MESSAGE_TIMEOUT_MS / 1000 + FLUSH_SLACK_S)
        if pending:
            journal.write(
                "stuck", what=f"{pending} delivery reports missing {FLUSH_SLACK_S} s past message.timeout.ms"
            )
        acks, fails, error = [], [], None
        for s, key, err, msg in reports:
            k = None if key is None else key.decode()
            if err is None:
                acks.append([msg.topic(), msg.partition(), msg.offset(), s, k])  # type: ignore[attr-defined]
            else:
                fails.append([s, k])
                error = err
        if acks:
            journal.write("ack", send_t=send_t, recs=acks)
        if fails:
            journal.write(
                "fail", send_t=send_t, topic=topic, recs=fails, err=str(error), errno=None, fault=None
            )
            time.sleep(0.05)
    if fatal:
        journal.write("fatal", where="idempotent producer", msg=fatal[0][:300])
        sys.exit(EXIT_TYPED_ERROR)
    producer.flush(MESSAGE_TIMEOUT_MS / 1000)
    journal.write("closed")


if __name__ == "__main__":
    main()
