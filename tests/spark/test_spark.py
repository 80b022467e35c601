"""The PySpark data source in local mode: batch reads with the Kafka source's options, against
the consumer API and hand-built edge cases (broker files, compression, control batches,
compaction gaps, base offset not 0, several segments); streaming with a producer appending
between micro-batches and a restart from the checkpoint; batch and streaming writes."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

pytestmark = pytest.mark.spark  # starts a local Spark session: -m 'not spark' leaves it out

pyspark = pytest.importorskip("pyspark")
#: Admission control (maxOffsetsPerTrigger, minOffsetsPerTrigger, AvailableNow limits) came in 4.2.
ADMISSION_CONTROL = tuple(int(x) for x in pyspark.__version__.split(".")[:2]) >= (4, 2)
needs_admission_control = pytest.mark.skipif(
    not ADMISSION_CONTROL, reason="PySpark < 4.2 has no admission control"
)

from helpers import local_spark, start_stream_copy  # noqa: E402
from kafkalite import Admin, Consumer, Producer, TopicPartition  # noqa: E402
from kafkalite.log import Log  # noqa: E402

T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def spark():
    with local_spark(2, {"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g"}) as session:
        yield session


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """events: 3 partitions x 100 records, timestamps T0 + i, every 3rd record with a header;
    zipped: zstd topic in several segments."""
    path = str(tmp_path_factory.mktemp("spark") / "data")
    admin = Admin(path)
    admin.create_topic("events", 3)
    admin.create_topic("zipped", 1, {"compression.type": "zstd", "segment.bytes": 1024})
    with Producer(path, batch_size=2048) as producer:
        for i in range(300):
            headers = [("n", b"%d" % i)] if i % 3 == 0 else None
            producer.send(
                "events",
                value=b"value-%d" % i,
                key=b"key-%d" % i,
                partition=i % 3,
                timestamp_ms=T0 + i,
                headers=headers,
            )
        for i in range(500):
            producer.send("zipped", value=b"z" * 50 + b"%d" % i, key=b"%d" % i, timestamp_ms=T0 + i)
    return path


def rows(df):
    return sorted(
        (r.topic, r.partition, r.offset, bytes(r.key) if r.key is not None else None, bytes(r.value))
        for r in df.collect()
    )


def consumer_rows(path, topic, partitions):
    out = []
    consumer = Consumer(path)
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    consumer.seek_to_beginning()
    for batch in iter(lambda: consumer.poll(0, max_records=100_000), {}):
        for tp, records in batch.items():
            out += [(tp.topic, tp.partition, r.offset, r.key, r.value) for r in records]
    consumer.close()
    return sorted(out)


def load(spark, path, **options):
    reader = spark.read.format("kafkalite")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(path)


def test_batch_read_equals_the_consumer_api(spark, data):
    df = load(spark, data, subscribe="events")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,timestampType:int>"
    )
    assert rows(df) == consumer_rows(data, "events", 3)
    first = df.where("partition = 1 and offset = 0").collect()[0]
    assert first.timestampType == 0 and int(first.timestamp.timestamp() * 1000) == T0 + 1
    zipped = load(spark, data, subscribe="zipped")
    assert rows(zipped) == consumer_rows(data, "zipped", 1)
    assert len(Log(os.path.join(data, "zipped-0"), readonly=True).segments) >= 2


def test_headers_are_null_when_absent(spark, data):
    df = load(spark, data, subscribe="events", includeHeaders="true").where("partition = 0").orderBy("offset")
    got = [
        (r.offset, None if r.headers is None else [(h.key, bytes(h.value)) for h in r.headers])
        for r in df.limit(4).collect()
    ]
    assert got == [(0, [("n", b"0")]), (1, [("n", b"3")]), (2, [("n", b"6")]), (3, [("n", b"9")])]
    assert (
        load(spark, data, subscribe="events", includeHeaders="true")
        .where("partition = 1 and offset = 0")
        .collect()[0]
        .headers
        is None
    )


def test_topic_selection_and_offset_options(spark, data):
    count = lambda **o: load(spark, data, **o).count()  # noqa: E731
    assert count(subscribePattern="ev.*") == 300
    assert count(subscribe="events,zipped") == 800
    assert count(assign=json.dumps({"events": [0, 2]})) == 200
    assert (
        count(subscribe="events", startingOffsets=json.dumps({"events": {"0": 90, "1": -2, "2": 50}}))
        == 10 + 100 + 50
    )
    assert (
        count(subscribe="events", endingOffsets=json.dumps({"events": {"0": 10, "1": -1, "2": 0}}))
        == 10 + 100
    )
    # Timestamps: partition p holds T0 + p + 3k at offset k.
    assert count(subscribe="events", startingTimestamp=str(T0 + 150)) == 3 * 50
    by_ts = json.dumps({"events": {"0": T0 + 297, "1": T0, "2": T0 + 10_000}})
    assert (
        count(
            subscribe="events", startingOffsetsByTimestamp=by_ts, startingOffsetsByTimestampStrategy="latest"
        )
        == 1 + 100
    )
    assert count(subscribe="events", endingTimestamp=str(T0 + 30)) == 30
    ends = json.dumps({"events": {"0": T0 + 3, "1": T0 + 10_000, "2": T0 + 2}})
    assert count(subscribe="events", endingOffsetsByTimestamp=ends) == 1 + 100 + 0


def test_partitioning_options(spark, data):
    df = load(spark, data, subscribe="events")
    assert df.rdd.getNumPartitions() == 3
    assert load(spark, data, subscribe="events", minPartitions="7").rdd.getNumPartitions() >= 6
    split = load(spark, data, subscribe="events", maxRecordsPerPartition="30")
    assert split.rdd.getNumPartitions() == 12
    assert rows(split) == rows(df)


def test_invalid_options_get_the_kafka_source_messages(spark, data):
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    failures = [
        ({}, "One of the following options must be specified"),
        ({"subscribe": "events", "assign": "{}"}, "Only one of the following options"),
        (
            {"subscribe": "events", "startingOffsets": "latest"},
            "starting offset can't be latest for batch queries",
        ),
        (
            {"subscribe": "events", "endingOffsets": "earliest"},
            "ending offset can't be earliest for batch queries",
        ),
        ({"subscribe": "events", "minPartitions": "0"}, "must be a positive integer"),
        ({"subscribe": "events", "startingTimestamp": str(T0 + 10**9)}, "No offset matched the timestamp"),
    ]
    for options, message in failures:
        with pytest.raises((PySparkException, Py4JJavaError, ValueError), match=message):
            load(spark, data, **options).count()
    stream = (
        spark.readStream.format("kafkalite")
        .option("subscribe", "events")
        .option("endingOffsets", "latest")
        .load(data)
    )
    with pytest.raises(
        (PySparkException, Py4JJavaError, ValueError),
        match="endingOffsets option not valid in streaming queries",
    ):
        q = stream.writeStream.format("memory").queryName("bad").start()
        q.processAllAvailable()


def test_broker_files_compaction_gaps_and_data_loss(spark, tmp_path):
    from test_broker_layout import write_broker_partition

    broker = str(tmp_path / "broker")
    os.makedirs(broker)
    expected = write_broker_partition(os.path.join(broker, "orders-0"))  # lz4, control batch, base 1000
    got = load(spark, broker, subscribe="orders").orderBy("offset").collect()
    assert [(r.offset, bytes(r.value)) for r in got] == expected
    assert load(
        spark, broker, subscribe="orders", startingOffsets=json.dumps({"orders": {"0": 1149}})
    ).count() == len([o for o, _ in expected if o >= 1149])

    compacted = str(tmp_path / "kv")
    Admin(compacted).create_topic("kv", 1, {"cleanup.policy": "compact", "segment.bytes": 1000})
    with Producer(compacted, batch_size=200) as producer:
        for i in range(200):
            producer.send("kv", key=b"k%d" % (i % 5), value=b"v%d" % i)
    removed = Admin(compacted).compact_topic("kv").records_removed
    assert removed > 100
    df = load(spark, compacted, subscribe="kv")
    assert rows(df) == consumer_rows(compacted, "kv", 1)
    assert df.count() == 200 - removed

    with Log(os.path.join(compacted, "kv-0"), shared_writers=True) as log:  # retention moves the start
        log.delete_records_before(150)
    with pytest.raises(Exception, match="failOnDataLoss"):
        load(spark, compacted, subscribe="kv", startingOffsets=json.dumps({"kv": {"0": 0}})).count()
    lossy = load(
        spark, compacted, subscribe="kv", startingOffsets=json.dumps({"kv": {"0": 0}}), failOnDataLoss="false"
    )
    assert min(r.offset for r in lossy.collect()) >= 150


def test_batch_write_reads_back_exactly_once(spark, data, tmp_path):
    out = str(tmp_path / "out")
    Admin(out).create_topic("copy", 3)
    Admin(out).create_topic("routed", 2)
    src = load(spark, data, subscribe="events")
    src.select("key", "value").write.format("kafkalite").mode("append").option("topic", "copy").save(out)
    assert sorted(bytes(r.value) for r in load(spark, out, subscribe="copy").collect()) == sorted(
        bytes(r.value) for r in src.collect()
    )
    # Keys pick partitions with Kafka's murmur2, as a Kafka sink does.
    from kafkalite.producer.partitioner import partition_for_key

    for r in load(spark, out, subscribe="copy").collect():
        assert r.partition == partition_for_key(bytes(r.key), 3)
    # topic and partition columns, string values.
    spark.createDataFrame(
        [("routed", 1, "a"), ("routed", 0, "b"), ("routed", 1, "c")],
        "topic string, partition int, value string",
    ).write.format("kafkalite").mode("append").save(out)
    routed = [
        (r.partition, bytes(r.value))
        for r in load(spark, out, subscribe="routed").orderBy("partition", "offset").collect()
    ]
    assert routed == [(0, b"b"), (1, b"a"), (1, b"c")]
    with pytest.raises(Exception, match="Required attribute 'value' not found"):
        spark.createDataFrame([("x",)], "key string").write.format("kafkalite").mode("append").option(
            "topic", "copy"
        ).save(out)
    assert (
        not os.listdir(
            os.path.join(
                out, ".kafkalite-spark-staging", os.listdir(os.path.join(out, ".kafkalite-spark-staging"))[0]
            )
        )
        if os.path.isdir(os.path.join(out, ".kafkalite-spark-staging"))
        and os.listdir(os.path.join(out, ".kafkalite-spark-staging"))
        else True
    )


def test_streaming_three_batches_restart_exactly_once(spark, tmp_path):
    path = str(tmp_path / "live")
    Admin(path).create_topic("clicks", 2)
    sink, ck = str(tmp_path / "sink"), str(tmp_path / "ck")
    produced = []

    def produce(n):
        with Producer(path) as producer:
            for _ in range(n):
                i = len(produced)
                producer.send("clicks", value=b"c%d" % i, partition=i % 2)
                produced.append(b"c%d" % i)

    def start():
        stream = (
            spark.readStream.format("kafkalite")
            .option("subscribe", "clicks")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", 40)
            .load(path)
        )
        return (
            stream.select("partition", "offset", "value")
            .writeStream.format("parquet")
            .option("checkpointLocation", ck)
            .start(sink)
        )

    produce(30)
    query = start()
    query.processAllAvailable()
    produce(50)  # more than maxOffsetsPerTrigger: two micro-batches
    query.processAllAvailable()
    produce(20)
    query.processAllAvailable()
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert len(batches) >= 3
    if ADMISSION_CONTROL:
        assert max(p["numInputRows"] for p in batches) <= 40
    query.stop()
    offsets = sorted((n for n in os.listdir(os.path.join(ck, "offsets")) if n.isdigit()), key=int)
    last = open(os.path.join(ck, "offsets", offsets[-1])).read().splitlines()[-1]
    assert json.loads(last) == {"clicks": {"0": 50, "1": 50}}  # the Kafka source's offset JSON
    produce(25)
    query = start()  # restart from the checkpoint
    query.processAllAvailable()
    query.stop()
    got = spark.read.parquet(sink).collect()
    assert sorted(bytes(r.value) for r in got) == sorted(produced)  # each record exactly once
    assert len({(r.partition, r.offset) for r in got}) == len(produced)


def test_streaming_write_is_exactly_once_across_replays(spark, tmp_path):
    path = str(tmp_path / "pipe")
    Admin(path).create_topic("src", 1)
    Admin(path).create_topic("dst", 1)
    with Producer(path) as producer:
        for i in range(40):
            producer.send("src", value=b"s%d" % i)
    ck = str(tmp_path / "ck")

    def run():
        q = start_stream_copy(spark, path, "src", "dst", ck)
        q.processAllAvailable()
        q.stop()

    run()
    # Forget that the last micro-batch was committed, as a crash before Spark's commit log would.
    commits = sorted(os.listdir(os.path.join(ck, "commits")), key=lambda n: int(n) if n.isdigit() else -1)
    last = [n for n in commits if n.isdigit()][-1]
    os.unlink(os.path.join(ck, "commits", last))
    crc = os.path.join(ck, "commits", f".{last}.crc")
    if os.path.exists(crc):
        os.unlink(crc)
    run()  # Spark replays that micro-batch; the sink recognises its id
    with Log(os.path.join(path, "dst-0"), readonly=True) as log:
        values = [r.value for r in log.records()]
    assert sorted(values) == sorted(b"s%d" % i for i in range(40))
    shutil.rmtree(ck)


def _stream(spark, path, topic, **options):
    reader = (
        spark.readStream.format("kafkalite").option("subscribe", topic).option("startingOffsets", "earliest")
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(path)


@needs_admission_control
def test_available_now_honours_max_offsets_per_trigger(spark, tmp_path):
    path = str(tmp_path / "d")
    Admin(path).create_topic("t", 2)
    with Producer(path) as producer:
        for i in range(100):
            producer.send("t", value=b"%d" % i, partition=i % 2)
    q = (
        _stream(spark, path, "t", maxOffsetsPerTrigger=20)
        .writeStream.format("memory")
        .queryName("avail")
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 100 and max(sizes) <= 20  # five limited batches, then the query ends
    assert spark.table("avail").count() == 100


@needs_admission_control
def test_min_offsets_per_trigger_and_new_partitions(spark, tmp_path):
    path = str(tmp_path / "d")
    admin = Admin(path)
    admin.create_topic("t", 1)
    producer = Producer(path)
    for i in range(10):
        producer.send("t", value=b"a%d" % i)
    producer.flush()
    q = (
        _stream(spark, path, "t", minOffsetsPerTrigger=50, maxTriggerDelay="1h")
        .writeStream.format("memory")
        .queryName("minoff")
        .start()
    )
    q.processAllAvailable()
    assert spark.table("minoff").count() == 0  # 10 < minOffsetsPerTrigger: the trigger waits
    producer.close()
    admin.create_partitions("t", 2)
    with Producer(path) as late:
        for i in range(5):
            late.send("t", value=b"p1-%d" % i, partition=1)
        late.flush()
        # One append: the backlog jumps from 5 (below the minimum) to 50, so one trigger takes all.
        late.send_batch("t", [b"b%d" % i for i in range(45)], partition=0)
    deadline = time.monotonic() + 30
    while spark.table("minoff").count() < 60 and time.monotonic() < deadline:
        q.processAllAvailable()
        time.sleep(0.2)
    q.stop()
    got = spark.table("minoff").collect()
    assert len(got) == 60
    assert sorted(r.offset for r in got if r.partition == 1) == [
        0,
        1,
        2,
        3,
        4,
    ]  # a new partition, from earliest


def test_batch_read_while_another_process_appends(spark, tmp_path, spawn):
    path = str(tmp_path / "d")
    Admin(path).create_topic("t", 2)
    code = (
        "import sys\nfrom kafkalite import Producer\n"
        "with Producer(sys.argv[1]) as p:\n"
        "    for i in range(200000):\n"
        "        p.send('t', value=b'x%d' % i, partition=i % 2)\n"
    )
    writer = spawn.code(code, path)
    try:
        counts = []
        while writer.poll() is None:
            df = load(spark, path, subscribe="t")
            got = df.select("partition", "offset").collect()
            by_partition: dict[int, list[int]] = {}
            for r in got:
                by_partition.setdefault(r.partition, []).append(r.offset)
            for offsets in by_partition.values():  # a consistent prefix of each partition
                assert sorted(offsets) == list(range(len(offsets)))
            counts.append(len(got))
    finally:
        writer.wait()
    assert load(spark, path, subscribe="t").count() == 200000


def test_a_failed_batch_write_leaves_nothing_visible(spark, tmp_path):
    out = str(tmp_path / "out")
    Admin(out).create_topic("dst", 2)
    df = spark.range(0, 1000, numPartitions=4).selectExpr(
        "cast(id as string) as value", "if(id = 900, raise_error('boom'), cast(id as string)) as key"
    )
    with pytest.raises(Exception, match="boom"):
        df.write.format("kafkalite").mode("append").option("topic", "dst").save(out)
    assert load(spark, out, subscribe="dst").count() == 0  # the tasks that finished staged only
    staging = os.path.join(out, ".kafkalite-spark-staging")
    assert not any(files for _, _, files in os.walk(staging))  # abort removed what they staged


def test_register_works_too(spark, data):
    from kafkalite.spark import KafkaliteDataSource

    class KafkaliteRegistered(KafkaliteDataSource):
        @classmethod
        def name(cls) -> str:
            return "kafkalite_registered"  # PySpark 4.0 refuses to register a name found already

    spark.dataSource.register(KafkaliteRegistered)
    assert spark.read.format("kafkalite_registered").option("subscribe", "events").load(data).count() == 300
