"""Hypothesis: arbitrary records round-trip through every API, and the log behaves like a
list across append, roll, reopen, delete_records_before and retention."""

from __future__ import annotations

import shutil
import tempfile
import warnings

import hypothesis.strategies as st
import pytest
from conftest import kafka_python_records
from hypothesis import HealthCheck, given, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from kafkalite import Log, Record

maybe_bytes = st.one_of(st.none(), st.binary(max_size=300))
headers = st.lists(st.tuples(st.text(max_size=20), maybe_bytes), max_size=4)
timestamps = st.integers(min_value=0, max_value=2**53)
records = st.builds(lambda v, k, h, t: (v, k, h, t), maybe_bytes, maybe_bytes, headers, timestamps)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(records, min_size=1, max_size=60), st.sampled_from(["none", "gzip", "snappy", "lz4", "zstd"]))
def test_arbitrary_records_round_trip_everywhere(tmp_path_factory, recs, compression):
    path = str(tmp_path_factory.mktemp("p") / "t-0")
    with Log(path, compression=compression, segment_bytes=4096) as log:
        log.append([Record(v, key=k, headers=h, timestamp=t) for v, k, h, t in recs])
        got = [(r.value, r.key, r.headers, r.timestamp) for r in log.records()]
        assert got == [(v, k, [tuple(x) for x in h], t) for v, k, h, t in recs]
        table = log.read_arrow(0)
        assert table.column("value").to_pylist() == [v for v, _, _, _ in recs]
        assert table.column("key").to_pylist() == [k for _, k, _, _ in recs]
        arrow_headers = [
            [(d["key"], d["value"]) for d in hs] if hs is not None else []
            for hs in table.column("headers").to_pylist()
        ]
        assert arrow_headers == [[tuple(x) for x in h] for _, _, h, _ in recs]
    assert [(r[3], r[2], r[1]) for r in kafka_python_records(path)] == [(v, k, t) for v, k, _, t in recs]
    with Log(path) as reopened:
        assert [(r.value, r.key) for r in reopened.records()] == [(v, k) for v, k, _, _ in recs]


class LogMachine(RuleBasedStateMachine):
    """The log against a model: a dict offset -> value, and the log start offset."""

    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.path = self.dir + "/t-0"
        self.log = Log(self.path, segment_bytes=2048, index_interval_bytes=256)
        self.model: dict[int, bytes] = {}
        self.start = 0
        self.end = 0
        self.clock = 1_000_000
        self.crashes = 0

    def teardown(self):
        self.log.close()
        shutil.rmtree(self.dir)

    @rule(values=st.lists(st.binary(min_size=0, max_size=200), min_size=1, max_size=30))
    def append_values(self, values):
        self.clock += 1000
        first, last = self.log.append_values(values, timestamp=self.clock)
        assert (first, last) == (self.end, self.end + len(values) - 1)
        for v in values:
            self.model[self.end] = v
            self.end += 1

    @rule(value=st.binary(max_size=100), key=st.binary(max_size=10))
    def append_record(self, value, key):
        self.clock += 1000
        first, _ = self.log.append([Record(value, key=key, timestamp=self.clock)])
        assert first == self.end
        self.model[self.end] = value
        self.end += 1

    @rule()
    def roll(self):
        self.log.roll()

    @rule(clean=st.booleans())
    def reopen(self, clean):
        if clean:
            self.log.close()
        else:
            # A crash image: the files as they are while the writer is open (preallocated,
            # untrimmed, no clean-shutdown marker), opened in a copy of the directory.
            self.crashes += 1
            crashed = f"{self.dir}/crash{self.crashes}-0"
            shutil.copytree(self.path, crashed)
            self.log.close()
            self.path = crashed
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            self.log = Log(self.path, segment_bytes=2048, index_interval_bytes=256)

    @precondition(lambda self: self.end > self.start)
    @rule(data=st.data())
    def delete_records_before(self, data):
        offset = data.draw(st.integers(min_value=self.start, max_value=self.end))
        assert self.log.delete_records_before(offset) == offset
        self.start = offset

    @rule(keep=st.integers(min_value=1, max_value=6000))
    def retention_by_size(self, keep):
        # retention_bytes is a setting of the open log: reopen with it, enforce, reopen without.
        deleted_before = self.log.start_offset
        self.log.close()
        self.log = Log(self.path, segment_bytes=2048, index_interval_bytes=256, retention_bytes=keep)
        self.log.enforce_retention()
        self.start = max(self.start, self.log.start_offset)
        assert self.log.start_offset >= deleted_before
        self.log.close()
        self.log = Log(self.path, segment_bytes=2048, index_interval_bytes=256)

    @invariant()
    def matches_model(self):
        assert self.log.start_offset == self.start
        assert self.log.end_offset == self.end
        got = {r.offset: r.value for r in self.log.records()}
        assert got == {o: v for o, v in self.model.items() if o >= self.start}

    @invariant()
    def random_reads_find_their_batch(self):
        if self.end > self.start:
            mid = (self.start + self.end) // 2
            recs = list(self.log.records(mid, mid + 1))
            assert [r.offset for r in recs] == [mid]


LogMachine.TestCase.settings = settings(max_examples=30, stateful_step_count=25, deadline=None)
test_log_state_machine = LogMachine.TestCase
test_log_state_machine.pytestmark = [pytest.mark.slow]
