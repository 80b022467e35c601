"""A power-loss model for group commit (issue 14 target 2): several threads in two processes
append to one partition with ``flush="always"`` (what ``acks='all'`` uses), one process is
SIGKILLed in the middle of a group sync (fail point ``group_commit.sync=kill@N``: it holds the
sync lock and has not synced), and the other goes on.

The workload (tests/faults/group_commit_writer.py) runs under ``strace -f``, so the model sees,
in one order, every append lock release (a batch is in the page cache before its writer
releases the lock), every msync and fdatasync of a segment (with the file range it covered,
from the process's mmap calls), and every acknowledgement (a failing openat of a marker that
names the records). From them:

1. Every acknowledged batch was covered by a successful msync (or fdatasync) of its file that
   *started after* its writer took the append lock to write it (the writer publishes the batch
   to syncers before it releases the lock) and *finished before* the acknowledgement, by any
   thread or process. A watermark published for bytes nobody synced (a syncer trusting another
   process's claim, a killed syncer's half-written state) fails this.
2. Crash images: at an acknowledgement k, a batch is durable if such a sync covered it before
   k, and so is everything before it in its segment (a syncer syncs from the durable watermark
   on; test 1 checks the acknowledged batches themselves). An image keeps each segment's durable
   prefix and, page by page, cuts the rest at a chosen point (a page reaches the disk as it was
   at some writeback: the appends up to a point, zeros after). Each image is opened by a writer
   Log (recovery runs): every record acknowledged by k must be there with its value. Segments
   created after k are left out of the image (they did not exist yet).

Directory entries are not modelled here (every name is kept): tests/engine/test_power_loss.py models
them for flush="always". Needs strace (skipped without it, or where ptrace is not permitted)."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
import warnings
from dataclasses import dataclass, field

import pytest
from faults.group_commit_writer import values_for
from kafkalite import Log
from kafkalite._native import inspect_segment

PAGE = 4096
THREADS = 3
APPENDS = 60
SEGMENT_BYTES = 16384
KILL_AT = 30
IMAGES = 60
WRITER = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "faults", "group_commit_writer.py"
)

_LINE = re.compile(r"^(\d+)\s+(.*)$")
_OPENAT = re.compile(r'openat\(AT_FDCWD, "([^"]+)", [^)]*\)\s+= (-?\d+)')
_CLOSE = re.compile(r"^close\((\d+)\)")
_CLONE = re.compile(r"^(clone3?|vfork|fork)\(.*\)\s+= (\d+)$")
_MMAP = re.compile(r"^mmap\(\w+, (\d+), [A-Z_|]+, MAP_SHARED, (\d+), (\d+)\)\s+= (0x[0-9a-f]+)")
_MUNMAP = re.compile(r"^munmap\((0x[0-9a-f]+), (\d+)\)")
_MSYNC = re.compile(r"^msync\((0x[0-9a-f]+), (\d+), MS_SYNC\)\s+= 0")
_FSYNC = re.compile(r"^f(?:data)?sync\((\d+)\)\s+= 0")
_TRIM = re.compile(r"^ftruncate\((\d+), \d+\)\s+= 0")
_UNLOCK = re.compile(r"^flock\((\d+), LOCK_UN\)\s+= 0")
_ACK = re.compile(r"(p?)ack-(\d+)-(\d+)-(\d+)-(\d+)-(\d+)$")
_LOCKED = re.compile(r"^flock\((\d+), LOCK_EX\|LOCK_NB\)\s+= 0")


@dataclass
class Sync:
    entry: int  # trace index where the call started
    exit: int  # ... and returned
    path: str
    start: int  # file range covered
    end: int


@dataclass
class Ack:
    at: int
    first: int
    last: int
    pid: int
    thread: int
    seq: int
    written_by: int  # trace index where its writer took the append lock to write it
    producer: bool  # acknowledged by a Producer's future (else by Log.append_values returning)


@dataclass
class Model:
    syncs: list[Sync] = field(default_factory=list)
    acks: list[Ack] = field(default_factory=list)
    created: dict[str, int] = field(default_factory=dict)  # segment .log path -> trace index of its creation
    sealed: dict[str, int] = field(default_factory=dict)  # segment .log path -> its first trim (seal)
    # Append lock holds: (process, fd, thread, trace index of the lock, of the release).
    holds: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    ack_threads: set[tuple[int, int]] = field(default_factory=set)  # (process, tid) of Log threads' acks


def events(trace: str):
    """(index, tid, entry index, call text) per system call, joining strace's split lines."""
    pending: dict[int, tuple[int, str]] = {}
    for i, line in enumerate(trace.splitlines()):
        m = _LINE.match(line)
        if not m:
            continue
        tid, text = int(m.group(1)), m.group(2)
        if text.endswith("<unfinished ...>"):
            pending[tid] = (i, text[: -len("<unfinished ...>")].rstrip())
            continue
        if text.startswith("<..."):
            began, head = pending.pop(tid, (i, ""))
            yield i, tid, began, head + text.split("resumed>", 1)[1]
            continue
        yield i, tid, i, text


def model_from_strace(trace: str, part_dir: str) -> Model:
    model = Model()
    # Threads first: a new thread's first calls can be logged before its parent's clone returns.
    parent: dict[int, int] = {}
    for _, tid, _, text in events(trace):
        if (m := _CLONE.match(text)) and "CLONE_THREAD" in text:
            parent[int(m.group(2))] = tid

    def process_of(tid: int) -> int:
        while tid in parent:
            tid = parent[tid]
        return tid

    fds: dict[int, dict[int, str]] = {}  # process -> fd -> path
    maps: dict[int, list[tuple[int, int, str, int]]] = {}  # process -> (addr, len, path, file offset)
    # tid -> trace index where it last took the append lock. A batch counts as written from its
    # writer's lock taken on: the writer stores it and publishes it to syncers (the shared
    # "appended" end) while holding the lock, so a sync of it may start before the release.
    last_lock: dict[int, int] = {}
    locked: dict[tuple[int, int], int] = {}  # (process, fd) -> trace index of the lock taken
    trims: dict[str, list[int]] = {}  # segment .log path -> its ftruncate calls (recovery cuts, seals)
    for i, tid, began, text in events(trace):
        proc = process_of(tid)
        table = fds.setdefault(proc, {})
        if (m := _CLONE.match(text)) and "CLONE_THREAD" not in text:
            child = int(m.group(2))  # a new process starts with its parent's descriptors and maps
            fds[child] = {**table, **fds.get(child, {})}
            maps[child] = list(maps.get(proc, [])) + maps.get(child, [])
        elif m := _OPENAT.search(text):
            path, fd = m.group(1), int(m.group(2))
            if fd >= 0:
                table[fd] = os.path.normpath(path)
                if "O_CREAT" in text and path.endswith(".log"):
                    model.created.setdefault(os.path.normpath(path), i)
            elif a := _ACK.search(path):
                first, last, pid, thread, seq = (int(g) for g in a.groups()[1:])
                model.acks.append(
                    Ack(i, first, last, pid, thread, seq, last_lock.get(tid, -1), a.group(1) == "p")
                )
                if a.group(1) != "p":
                    model.ack_threads.add((proc, tid))
        elif m := _CLOSE.match(text):
            table.pop(int(m.group(1)), None)
        elif m := _MMAP.match(text):
            path = table.get(int(m.group(2)), "")
            if path.endswith(".log"):
                maps.setdefault(proc, []).append(
                    (int(m.group(4), 16), int(m.group(1)), path, int(m.group(3)))
                )
        elif m := _MUNMAP.match(text):
            addr = int(m.group(1), 16)
            maps[proc] = [x for x in maps.get(proc, []) if x[0] != addr]
        elif m := _MSYNC.match(text):
            addr, length = int(m.group(1), 16), int(m.group(2))
            for base, size, path, offset in maps.get(proc, []):
                if base <= addr < base + size:
                    start = addr - base + offset
                    model.syncs.append(Sync(began, i, path, start, start + length))
        elif m := _FSYNC.match(text):
            path = table.get(int(m.group(1)), "")
            if path.endswith(".log"):
                model.syncs.append(Sync(began, i, path, 0, 1 << 62))
        elif m := _TRIM.match(text):
            path = table.get(int(m.group(1)), "")
            if path.endswith(".log"):
                trims.setdefault(path, []).append(began)
        elif m := _LOCKED.match(text):
            if table.get(int(m.group(1)), "").endswith(".kafkalite.lock"):
                locked[(proc, int(m.group(1)))] = i
                last_lock[tid] = i
        elif m := _UNLOCK.match(text):
            if table.get(int(m.group(1)), "").endswith(".kafkalite.lock"):
                start = locked.pop((proc, int(m.group(1))), None)
                if start is not None:
                    model.holds.append((proc, int(m.group(1)), tid, start, began))
    # A segment's seal is its last trim before the next segment was created (earlier trims are
    # recovery cutting a torn tail at open; the active segment has no seal).
    for path, created in model.created.items():
        older = [p for p in trims if p < path and p in model.created]
        for p in older:
            if p == max(older):
                seals = [t for t in trims[p] if t < created]
                if seals:
                    model.sealed[p] = seals[-1]
    return model


def attribute_producer_batches(model: Model, part_dir: str, batches) -> None:
    """A producer's future is resolved by its acks thread, not by the thread that appended, so
    its batch's write is found another way: the producing process is the only one writing its
    values, each of its append lock holds after the first on a descriptor (the log's open) and
    before its last acknowledgement appends exactly one batch (a drain), in file order. Sets
    `written_by` of every producer acknowledgement to the start of that hold."""
    log_threads = {tid for _, tid in model.ack_threads}  # their holds are their own appends
    for pid in {a.pid for a in model.acks if a.producer}:
        last_ack = max(a.at for a in model.acks if a.pid == pid and a.producer)
        holds, opened = [], set()
        theirs = [h for h in model.holds if h[0] == pid and h[2] not in log_threads]
        for proc, fd, _tid, start, _end in sorted(theirs, key=lambda h: h[3]):
            if (proc, fd) not in opened:
                opened.add((proc, fd))  # the open's hold: recovery or following, no batch
            elif start < last_ack:
                holds.append(start)
        holds.sort()
        with Log(part_dir, readonly=True) as log:
            mine = [
                base
                for base in sorted(batches)
                if next(iter(log.records(base, base + 1))).value.startswith(b"%d-p" % pid)
            ]
        assert len(mine) == len(holds), (
            f"the producer (pid {pid}) wrote {len(mine)} batches in {len(holds)} append lock holds: "
            "the model's one batch per hold does not hold"
        )
        written = dict(zip(mine, holds, strict=True))
        for a in model.acks:
            if a.producer and a.pid == pid:
                a.written_by = written[batch_of(batches, a.first)]


def batch_of(batches, offset: int) -> int:
    """The base offset of the batch holding `offset`."""
    return max(base for base in batches if base <= offset)


def batches_on_disk(part_dir: str) -> dict[int, tuple[str, int, int]]:
    """base offset -> (segment path, position, size) of every batch in the files."""
    out = {}
    names = sorted(n for n in os.listdir(part_dir) if n.endswith(".log"))
    for k, name in enumerate(names):
        path = os.path.join(part_dir, name)
        info = inspect_segment(path, k == len(names) - 1)
        for b in info["batches"]:
            out[b["base_offset"]] = (os.path.normpath(path), b["position"], b["size"])
    return out


def written_before(model: Model, batches: dict[int, tuple[str, int, int]]) -> dict[int, int]:
    """For every batch up to the last acknowledged one: a trace index by which it was in the page
    cache. Acknowledged batches have their writer's lock release; batches are written in file
    order (under the append lock), so any other batch was written before the next acknowledged one,
    and before its segment was sealed (trimmed)."""
    known: dict[int, int] = {}
    for a in model.acks:
        base = batch_of(batches, a.first)
        known[base] = min(known.get(base, a.written_by), a.written_by)
    bound, out = None, {}
    for base in sorted(batches, reverse=True):
        if base in known:
            bound = known[base] if bound is None else min(bound, known[base])
        seal = model.sealed.get(batches[base][0])
        if seal is not None:
            bound = seal if bound is None else min(bound, seal)
        if bound is not None:
            out[base] = bound
    return out


def durable_at(model: Model, batches, written, k: int) -> set[int]:
    """Base offsets of the batches a sync finished before trace index k covered, having started
    after the batch was written."""
    out = set()
    for base, w in written.items():
        path, pos, size = batches[base]
        if any(
            s.exit < k and s.entry > w and s.path == path and s.start <= pos and s.end >= pos + size
            for s in model.syncs
        ):
            out.add(base)
    return out


@pytest.fixture(scope="module", params=["log-threads", "with-producer"])
def run(request, tmp_path_factory):
    strace = shutil.which("strace")
    if not strace:
        pytest.skip("strace is not installed: the group commit model needs the system calls")
    root = tmp_path_factory.mktemp("group-commit")
    part_dir = os.path.normpath(str(root / "events-0"))
    markers = str(root / "no-such-dir")
    trace_file = str(root / "strace.txt")
    syscalls = "openat,close,mmap,munmap,msync,fsync,fdatasync,flock,ftruncate,clone,clone3,vfork,fork"
    cmd = [
        sys.executable,
        WRITER,
        "--pair",
        part_dir,
        markers,
        "7",
        str(THREADS),
        str(APPENDS),
        str(SEGMENT_BYTES),
        str(KILL_AT),
    ] + (["--producer"] if request.param == "with-producer" else [])
    done = subprocess.run(
        [strace, "-f", "-qq", "-e", f"trace={syscalls}", "-o", trace_file, *cmd],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0 or not os.path.exists(trace_file):
        pytest.skip(f"strace could not run the workload (status {done.returncode}): {done.stderr[-300:]}")
    statuses = done.stdout.split()
    assert statuses == ["-9", "0"], (
        f"expected the first writer killed and the second finished, got {statuses}"
    )
    with open(trace_file) as f:
        model = model_from_strace(f.read(), part_dir)
    log_acks = sorted(
        sum(not a.producer and a.pid == pid for a in model.acks) for pid in {a.pid for a in model.acks}
    )
    assert len(log_acks) == 2 and 0 < log_acks[0] < THREADS * APPENDS == log_acks[1], (
        f"both processes acknowledged appends, the killed one fewer: {log_acks}"
    )
    producer_acks = sum(a.producer for a in model.acks)
    assert producer_acks == (THREADS * APPENDS * 4 if request.param == "with-producer" else 0)
    batches = batches_on_disk(part_dir)
    attribute_producer_batches(model, part_dir, batches)
    return part_dir, model, batches


def test_every_acknowledged_batch_was_synced_after_it_was_written(run):
    part_dir, model, batches = run
    for a in model.acks:
        path, pos, size = batches[batch_of(batches, a.first)]
        covering = [
            s
            for s in model.syncs
            if s.entry > a.written_by
            and s.exit < a.at
            and s.path == path
            and s.start <= pos
            and s.end >= pos + size
        ]
        assert covering, (
            f"offsets {a.first}..{a.last} (pid {a.pid} thread {a.thread}) were acknowledged at trace line "
            f"{a.at + 1} but no msync/fdatasync of {os.path.basename(path)} [{pos}, {pos + size}) started "
            f"after they were written (line {a.written_by + 1}) and finished before"
        )


def test_every_acknowledged_record_survives_every_crash_image(run, tmp_path):
    part_dir, model, batches = run
    written = written_before(model, batches)
    rng = random.Random(11)
    files = {
        n: open(os.path.join(part_dir, n), "rb").read()
        for n in os.listdir(part_dir)
        if os.path.isfile(os.path.join(part_dir, n))
    }
    for image in range(IMAGES):
        ack = rng.choice(model.acks)
        acked = [a for a in model.acks if a.at <= ack.at]
        durable = durable_at(model, batches, written, ack.at + 1)
        keep: dict[str, int] = {}  # segment -> end of its durable prefix
        for base in durable:
            path, pos, size = batches[base]
            name = os.path.basename(path)
            keep[name] = max(keep.get(name, 0), pos + size)
        path = tmp_path / f"image-{image}" / "events-0"
        path.mkdir(parents=True)
        notes = []
        for name, content in files.items():
            segment = os.path.join(part_dir, name[:20] + ".log")
            if model.created.get(segment, -1) > ack.at:
                continue  # a segment created after the acknowledgement does not exist yet
            data = bytearray(content)
            if name.endswith(".log") and model.sealed.get(segment, 1 << 62) > ack.at:
                # Not sealed yet at the acknowledgement: the file still had its reserved tail (the
                # final file was trimmed when it was sealed later).
                data += bytes((len(data) // PAGE + 2) * PAGE - len(data))
            if name.endswith(".log"):
                prefix = keep.get(name, 0)
                for page in range(0, len(data), PAGE):
                    floor = min(max(prefix, page), page + PAGE)
                    cut = rng.choice([floor, page + PAGE, rng.randint(floor, page + PAGE)])
                    data[cut : page + PAGE] = bytes(len(data[cut : page + PAGE]))
                notes.append(f"{name}: durable below {prefix}")
            (path / name).write_bytes(bytes(data))
        where = (
            f"image {image} at the ack of {ack.first}..{ack.last} (trace line {ack.at + 1}); "
            + "; ".join(notes)
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # RecoveryWarning: the unsynced tail is cut
            log = Log(str(path), segment_bytes=SEGMENT_BYTES, flush="always")
        try:
            got = {r.offset: r.value for r in log.records(0, max(a.last for a in acked) + 1)}
            for a in acked:
                want = values_for(a.pid, a.thread, a.seq, a.last - a.first + 1, a.producer)
                for i, v in enumerate(want):
                    assert got.get(a.first + i) == v, (
                        f"acknowledged offset {a.first + i} reads {got.get(a.first + i)!r}; {where}"
                    )
        finally:
            log.close()
        shutil.rmtree(path.parent)
