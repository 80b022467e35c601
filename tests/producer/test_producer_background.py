"""Issue 9 point 8: the producer's sender thread (batches, retention, compaction) survives any
exception, logs it with its traceback through ``kafkalite.producer``, fails only the futures
it concerns, and if it dies anyway later sends fail at once."""

from __future__ import annotations

import logging
import threading
import time

import kafkalite
import pytest
from kafkalite import Admin, Producer
from kafkalite.datadir import DataDir

LOGGER = "kafkalite.producer"


def _records_with_traceback(caplog, exc_type):
    return [r for r in caplog.records if r.name == LOGGER and r.exc_info and r.exc_info[0] is exc_type]


def test_a_retention_pass_that_raises_is_logged_and_the_sender_keeps_sending(tmp_path, monkeypatch, caplog):
    data_dir = str(tmp_path / "data")
    admin = Admin(data_dir)
    admin.create_topic("t")
    admin.create_topic("other")  # not written by the producer: the sender runs Admin's retention on it
    calls = []
    original = Admin.enforce_retention

    def fails_once(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("injected: the engine cannot take this config value")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Admin, "enforce_retention", fails_once)
    caplog.set_level(logging.INFO, logger=LOGGER)
    with Producer(data_dir, retention_check_interval_ms=50) as p:
        p.send("t", b"first").get(timeout=10)
        deadline = time.monotonic() + 10
        while len(calls) < 2 and time.monotonic() < deadline:  # failed once, then retried
            time.sleep(0.02)
        assert len(calls) >= 2
        assert p.send("t", b"after").get(timeout=10).offset == 1
    assert _records_with_traceback(caplog, RuntimeError)


def test_a_batch_that_cannot_be_written_fails_its_futures_with_the_error(tmp_path, monkeypatch, caplog):
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t")
    original = DataDir.open_partition
    failures = [OSError("injected: topic file unreadable for a moment")]

    def fails_once(self, *args, **kwargs):
        if failures:
            raise failures.pop()
        return original(self, *args, **kwargs)

    monkeypatch.setattr(DataDir, "open_partition", fails_once)
    caplog.set_level(logging.INFO, logger=LOGGER)
    with Producer(data_dir) as p:
        with pytest.raises(OSError, match="injected"):
            p.send("t", b"lost").get(timeout=10)
        assert p.send("t", b"kept").get(timeout=10).offset == 0
    assert _records_with_traceback(caplog, OSError)


def test_a_callback_that_raises_is_logged_not_printed(tmp_path, caplog, capsys):
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t")
    caplog.set_level(logging.INFO, logger=LOGGER)

    def bad_callback(metadata):
        raise ValueError("injected callback failure")

    with Producer(data_dir) as p:
        p.send("t", b"v").add_callback(bad_callback).get(timeout=10)
        p.send("t", b"w").get(timeout=10)
    assert _records_with_traceback(caplog, ValueError)
    assert "Traceback" not in capsys.readouterr().err


def test_a_dead_sender_makes_later_sends_fail_at_once(tmp_path, monkeypatch, caplog):
    from kafkalite import producer as producer_module

    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t")
    died = threading.Event()

    def broken_loop(self):
        died.set()
        raise AssertionError("injected: a bug in the sender loop")

    monkeypatch.setattr(producer_module._Sender, "loop", broken_loop)
    caplog.set_level(logging.INFO, logger=LOGGER)
    p = Producer(data_dir, linger_ms=10_000)
    assert died.wait(10)
    p._sender.thread.join(10)
    started = time.monotonic()
    with pytest.raises(kafkalite.IllegalStateError, match="sender thread stopped"):
        p.send("t", b"v")
    assert time.monotonic() - started < 1.0
    assert _records_with_traceback(caplog, AssertionError)
    p.close(timeout=5)


def test_bounded_flushes_share_one_flusher_thread_that_close_stops(tmp_path):
    # flush(timeout) used to start a thread per call; one long-lived flusher serves them all.
    others = set(threading.enumerate())  # earlier tests' producers may still have theirs

    def flushers() -> list[threading.Thread]:
        return [
            t for t in threading.enumerate() if t.name == "kafkalite-producer-flusher" and t not in others
        ]

    producer = Producer(str(tmp_path / "data"))
    started: set[threading.Thread] = set()
    for i in range(20):
        producer.send("t", b"%d" % i)
        producer.flush(timeout=5)
        started.update(flushers())
        assert not [t for t in threading.enumerate() if t.name == "kafkalite-flush"]
    assert len(started) == 1
    producer.close(timeout=5)
    started.pop().join(5)
    assert not flushers(), "close() must stop the flusher thread"
