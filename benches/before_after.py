"""The same benchmarks against two builds of kafkalite, interleaved (before, after, before,
after...), to show what a change does to speed on a shared machine: CPU seconds per record
(this process and its threads) are the figure compared; wall-clock rates and the load are kept
beside them. Each side is a ``python/`` folder holding a built ``kafkalite`` (``make build``
in that checkout); the benchmark scripts are this checkout's, so both sides run the same code.

    python benches/before_after.py --before ../before/python --after python \\
        [--rounds 3] [--gib 0.25] [--records 300000] [--out benches/results] [--name before-after]

Runs bench_log.py (``--gib``) and bench_hot_paths.py (``--records``, one round each time) per
side and round; writes ``<name>.md`` (medians over the rounds, ratio after/before) and
``<name>.json`` (every run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from report import machine, write_report

BENCHES = os.path.dirname(os.path.abspath(__file__))


def side_env(python_dir: str) -> dict[str, str]:
    """The environment that makes a child import the kafkalite in ``python_dir`` (and checks it)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([python_dir, BENCHES]))
    where = subprocess.run(
        [sys.executable, "-c", "import kafkalite; print(kafkalite.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not where.startswith(python_dir + os.sep):
        raise SystemExit(f"{python_dir}: the child imported kafkalite from {where}")
    return env


def run_bench(script: str, args: list[str], env: dict[str, str], out: str) -> dict:
    """One benchmark run; returns its JSON (the script checks what it counted)."""
    subprocess.run([sys.executable, os.path.join(BENCHES, script), *args, "--out", out], env=env, check=True)
    name = {"bench_log.py": "log.json", "bench_hot_paths.py": "hot_paths.json"}[script]
    with open(os.path.join(out, name)) as f:
        return json.load(f)


def figures(log: dict, hot: dict) -> dict[str, dict[str, float]]:
    """CPU µs per record and records/s (wall) of every workload of one round of one side."""
    out = {}
    for name, r in log["results"].items():
        if name == "plain write()":
            continue  # not kafkalite code: the same on both sides
        out[f"Log {name}"] = {"cpu_us": r["cpu_us_per_record"], "wall_rate": r["records_per_s"]}
    for name, r in hot["throughput"].items():
        out[name] = {"cpu_us": 1e6 / r["records_per_cpu_s"], "wall_rate": r["records_per_s"]}
    # Not a rate: the MB column holds it (no CPU figure).
    out["producer peak VmRSS (MB)"] = {"cpu_us": 0.0, "wall_rate": hot["producer_rss_bytes"]["VmRSS"] / 2**20}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", required=True, help="python/ folder of the old build")
    parser.add_argument("--after", required=True, help="python/ folder of the new build")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gib", type=float, default=0.25)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--out", default=os.path.join(BENCHES, "results"))
    parser.add_argument("--name", default="before-after")
    args = parser.parse_args()
    sides = {"before": os.path.abspath(args.before), "after": os.path.abspath(args.after)}
    envs = {side: side_env(path) for side, path in sides.items()}
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="kafkalite-before-after-") as work:
        for r in range(args.rounds):
            for side in ("before", "after"):
                load = os.getloadavg()[0]
                out = os.path.join(work, f"{side}-{r}")
                log = run_bench("bench_log.py", ["--gib", str(args.gib)], envs[side], out)
                hot = run_bench(
                    "bench_hot_paths.py", ["--records", str(args.records), "--rounds", "1"], envs[side], out
                )
                runs.append({"round": r, "side": side, "load": load, "figures": figures(log, hot)})
                print(f"round {r} {side} done (1-minute load at its start {load:.1f})", flush=True)
    names = list(runs[0]["figures"])
    median = {
        (side, name, key): statistics.median(x["figures"][name][key] for x in runs if x["side"] == side)
        for side in sides
        for name in names
        for key in ("cpu_us", "wall_rate")
    }
    loads = [x["load"] for x in runs]
    lines = [
        f"# Before/after: {args.rounds} interleaved rounds, medians",
        "",
        f"Machine: {machine()}; 1-minute load at the start of each run {min(loads):.1f} to {max(loads):.1f}. "
        f"Log: {args.gib} GiB of 100-byte values in batches of 1,000; hot paths: {args.records:,} records.",
        "",
        "| workload | CPU ns/record before | after | after/before | records/s (wall) before | after |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in names:
        b, a = median[("before", name, "cpu_us")], median[("after", name, "cpu_us")]
        wb, wa = median[("before", name, "wall_rate")], median[("after", name, "wall_rate")]
        if name.startswith("producer peak"):
            lines.append(f"| {name} | | | {wa / wb:.2f} | {wb:.0f} | {wa:.0f} |")
        else:
            lines.append(
                f"| {name} | {b * 1000:,.1f} | {a * 1000:,.1f} | {a / b:.2f} | {wb:,.0f} | {wa:,.0f} |"
            )
    command = " ".join(["python", os.path.relpath(__file__), *sys.argv[1:]])
    lines += [
        "",
        f"Before: `{sides['before']}`; after: `{sides['after']}`. Command: `{command}`. CPU time is the",
        "benchmark process's own (all its threads, `time.process_time`); the producer's peak resident",
        "memory is in MB (`/proc/self/status`, 2 x records keyed sends).",
    ]
    write_report(args.out, args.name, {"sides": sides, "args": vars(args), "runs": runs}, lines)


if __name__ == "__main__":
    main()
