"""The producer's callback rules: futures' callbacks run in whichever thread drains a
partition (holding its drain lock, so one partition's callbacks run in order, as Kafka's do)
or, under acks='all', in the acknowledging thread; ``_in_callbacks`` counts, per thread, the
drains and acknowledgements under way (native, ``CallbackDepth``: the drain, ``rust/src/py/drain.rs``,
keeps it too), and the calls that would wait for the very drain running the callback are refused."""

from __future__ import annotations

from typing import Any

from kafkalite._native import CallbackDepth
from kafkalite.errors import IllegalStateError

#: Per thread, the drains and acknowledgements under way (``depth``, 0 in a new thread).
_in_callbacks = CallbackDepth()

#: Why each blocking call is refused inside a callback (``_refuse_in_callback``).
_WAITS_FOR_ITSELF = {
    "flush": "flush() would wait for the records being written, the callback's own among them",
    "close": "close() would wait for the records being written, the callback's own among them",
    "send_batch": "send_batch() appends at once and would wait for the partition the callback's thread "
    "is writing (its own, or one another callback holds); use send(), which queues",
}


def _refuse_in_callback(what: str) -> None:
    """flush(), close() or send_batch() from a callback would wait for the drain (or the
    acknowledgement) that runs the callback: a deadlock. Kafka's Java producer refuses flush()
    in a callback too; send() stays allowed (``_after_send`` never waits there)."""
    if getattr(_in_callbacks, "depth", 0):
        raise IllegalStateError(
            f"{what}() inside a producer callback is not permitted: the callback runs while records are "
            f"being written or acknowledged, and {_WAITS_FOR_ITSELF[what]}; call it from another thread"
        )


def _finish_batch(appended: tuple[Any, int, int | None], error: BaseException | None) -> None:
    """A batch appended under acks='all' is on disk, or its sync failed: resolve its futures.
    ``appended``: the native batch with the first offset and log-append time it was given."""
    batch, first_offset, log_append_time = appended
    # The callbacks run in the acknowledging thread, which flush() and close() wait for.
    _in_callbacks.depth = getattr(_in_callbacks, "depth", 0) + 1
    try:
        if error is None:
            batch.complete(first_offset, log_append_time)
        else:
            batch.fail(error)
    finally:
        _in_callbacks.depth -= 1
