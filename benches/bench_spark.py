"""Spark benchmark (issue 5): --records records of 100-byte values in 4 partitions, local[2].
In the same run: kafkalite -> count(), kafkalite -> Parquet, and Spark reading the same rows
from Parquet files and from JSON lines (count and Parquet copy). Reports rows/s and ratios.

    python benches/bench_spark.py [--records 10000000] [--out benches/results]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time

from report import write_report

HERE = os.path.dirname(os.path.abspath(__file__))


def best_of(n: int, fn) -> float:
    times = []
    for _ in range(n):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    import pyspark
    from kafkalite import Admin, Producer
    from pyspark.sql import SparkSession

    work = tempfile.mkdtemp(prefix="kl-spark-bench-")
    data = os.path.join(work, "data")
    Admin(data).create_topic("events", 4)
    n = args.records
    value = b"v" * 100
    began = time.perf_counter()
    with Producer(data) as producer:
        chunk = 100_000
        for start in range(0, n, chunk):
            producer.send_batch("events", [value] * min(chunk, n - start), partition=(start // chunk) % 4)
    produce_s = time.perf_counter() - began
    print(f"produced {n:,} records in {produce_s:.1f} s", flush=True)

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    kl = lambda: spark.read.format("kafkalite").option("subscribe", "events").load(data)  # noqa: E731
    parquet_src, json_src = os.path.join(work, "src.parquet"), os.path.join(work, "src.json")
    kl().write.parquet(parquet_src)  # the same rows, as Spark's own formats
    spark.read.parquet(parquet_src).write.json(json_src)
    assert kl().count() == n

    def copy(df_fn, name):
        def run():
            out = os.path.join(work, name)
            shutil.rmtree(out, ignore_errors=True)
            df_fn().write.parquet(out)

        return run

    results = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, pyspark {pyspark.__version__}",
        "records": n,
        "count_s": {
            "kafkalite": best_of(args.runs, lambda: kl().count()),
            "parquet": best_of(args.runs, lambda: spark.read.parquet(parquet_src).count()),
            "json": best_of(args.runs, lambda: spark.read.json(json_src).count()),
        },
        "to_parquet_s": {
            "kafkalite": best_of(args.runs, copy(kl, "out-kl")),
            "parquet": best_of(args.runs, copy(lambda: spark.read.parquet(parquet_src), "out-pq")),
            "json": best_of(args.runs, copy(lambda: spark.read.json(json_src), "out-js")),
        },
    }
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    rate = lambda s: n / s / 1e6  # noqa: E731
    c, w = results["count_s"], results["to_parquet_s"]
    lines = [
        "# Spark reading and writing kafkalite (`python benches/bench_spark.py`)",
        "",
        f"{n:,} records of 100-byte values in 4 partitions, `local[2]`; best of {args.runs}. Machine: {results['machine']}.",
        "",
        "| source | `count()` | rows/s | → Parquet | rows/s |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {src} | {c[src]:.2f} s | {rate(c[src]):.2f} M | {w[src]:.2f} s | {rate(w[src]):.2f} M |"
            for src in ("kafkalite", "parquet", "json")
        ),
        "",
        f"kafkalite / Parquet: count {c['parquet'] / c['kafkalite']:.2f}×, copy to Parquet {w['parquet'] / w['kafkalite']:.2f}× "
        f"(of Spark's own speed); kafkalite / JSON lines: count {c['json'] / c['kafkalite']:.2f}×, copy {w['json'] / w['kafkalite']:.2f}×.",
    ]
    write_report(args.out, "spark", results, lines)


if __name__ == "__main__":
    main()
