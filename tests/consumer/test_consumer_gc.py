"""Issue 14 target 3: consumer iteration makes one ``ConsumerRecord`` per record. The cyclic GC
must not walk them again and again (a collection every 700 allocations, over every record still
held): they are left out of it (the class has no ``__traverse__``, so the GC could see nothing
through them anyway)."""

from __future__ import annotations

import gc

from kafkalite import Admin, Consumer, Producer


def test_consumed_records_are_not_walked_by_the_gc(tmp_path):
    data_dir = str(tmp_path / "data")
    Admin(data_dir).create_topic("t")
    with Producer(data_dir) as p:
        for i in range(100):
            p.send("t", b"v%d" % i, key=b"k%d" % i)
        p.send("t", b"with", headers=[("h", b"1")])
    with Consumer(data_dir, "t", auto_offset_reset="earliest", consumer_timeout_ms=0) as c:
        records = list(c)
    assert not any(gc.is_tracked(r) for r in records)
    gc.collect()  # untracked records keep what they hold
    assert [(r.key, r.value) for r in records[:100]] == [(b"k%d" % i, b"v%d" % i) for i in range(100)]
    assert records[100].headers == [("h", b"1")] and records[100].offset == 100
