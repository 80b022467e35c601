"""The pipeline demo: a producer process appends click events to a kafkalite data directory
while a Spark Structured Streaming job aggregates them (clicks per page per 5-second window)
straight from the segment files and writes Parquet.

    pip install '.[spark]' && python examples/spark_pipeline.py [--seconds 20] [--dir /tmp/kl-pipeline]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time

PRODUCER = r"""
import json, random, sys, time
from kafkalite import Producer
deadline = time.time() + float(sys.argv[2])
pages = ["home", "search", "cart", "checkout"]
with Producer(sys.argv[1], linger_ms=5) as producer:
    while time.time() < deadline:
        user = random.randrange(1000)
        event = {"user": user, "page": random.choice(pages)}
        producer.send("clicks", json.dumps(event).encode(), key=b"user-%d" % user)
        time.sleep(0.0005)
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--dir", default="/tmp/kl-pipeline")
    args = ap.parse_args()
    import kafkalite.spark  # noqa: F401  before the session: Spark's workers run this interpreter
    from kafkalite import Admin
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import col, from_json, window

    shutil.rmtree(args.dir, ignore_errors=True)
    data, out, ck = (os.path.join(args.dir, name) for name in ("data", "clicks-per-page", "checkpoint"))
    Admin(data).create_topic("clicks", 3)
    producer = subprocess.Popen([sys.executable, "-c", PRODUCER, data, str(args.seconds)])

    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    clicks = (
        spark.readStream.format("kafkalite")  # no register(): found through pyspark_kafkalite
        .option("subscribe", "clicks")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 200_000)
        .load(data)
    )
    per_page = (
        clicks.select(from_json(col("value").cast("string"), "user int, page string").alias("e"), "timestamp")
        .withWatermark("timestamp", "1 second")
        .groupBy(window("timestamp", "5 seconds"), col("e.page").alias("page"))
        .count()
    )
    query = (
        per_page.writeStream.format("parquet")
        .outputMode("append")
        .option("checkpointLocation", ck)
        .trigger(processingTime="2 seconds")
        .start(out)
    )
    producer.wait()
    time.sleep(4)  # let the last micro-batches run
    query.processAllAvailable()
    query.stop()
    result = spark.read.parquet(out).orderBy("window", "page")
    result.show(40, truncate=False)
    total = spark.read.format("kafkalite").option("subscribe", "clicks").load(data).count()
    print(f"{total:,} clicks produced; windows closed by the watermark are in {out}")
    spark.stop()


if __name__ == "__main__":
    main()
