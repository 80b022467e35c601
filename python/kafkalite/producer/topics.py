"""A producer's topic and partition state: ``_Topic`` (the topic's accumulator, its limits,
codec and partition count, reconfigured when the topic is re-created) and ``_Partition`` (one
partition's log, drain lock and bookkeeping: the native ``PartitionState`` the drain keeps).
Shared by ``Producer.send`` (which looks partitions up here, natively too) and the sender
(``sender``)."""

from __future__ import annotations

import random
from typing import Any

from kafkalite._native import Accumulator, PartitionState, StickyPartitioner
from kafkalite.datadir import is_compacted, log_options
from kafkalite.errors import UnknownTopicOrPartitionError

#: Per-partition state: the topic's accumulator that holds this partition's queued records,
#: the open log with the identity (device, inode) of the directory it was opened on (to notice
#: a deleted, perhaps re-created, topic), the drain lock, the records in flight and the time of
#: the last append. Native, because the drain (``rust/src/py/drain.rs``) keeps it.
_Partition = PartitionState


class _Topic:
    __slots__ = (
        "name",
        "partitions",
        "all",
        "sticky",
        "max_bytes",
        "limit_name",
        "limit_is_topics",
        "codec",
        "config",
        "compacted",
        "batch_size",
        "acc",
    )

    def __init__(
        self,
        name: str,
        meta: dict[str, Any],
        config: dict[str, Any],
        producer_codec: str,
        max_request_size: int,
        batch_size: int,
    ) -> None:
        self.name = name
        #: Grown and shrunk in place: ``ProducerCore.send`` holds this list (``_Sender.topic``).
        self.partitions: list[_Partition] = []
        self.batch_size = batch_size
        self.acc = Accumulator(name, batch_size)  # send()'s records, per partition, in Rust
        self.configure(meta, config, producer_codec, max_request_size)

    def configure(
        self, meta: dict[str, Any], config: dict[str, Any], producer_codec: str, max_request_size: int
    ) -> None:
        """Take the topic's (possibly new) metadata and effective config (``DataDir.resolve``):
        limits, codec, partition count."""
        self.config = config
        self.compacted = is_compacted(self.config)  # checked by every keyless send()
        options = log_options(self.config, producer_codec)
        self.codec = options["compression"]  # the same resolution as send_batch's Log (target_compression)
        # The hard cap of an encoded batch, and the setting to raise when a record exceeds it.
        if options["max_message_bytes"] <= max_request_size:
            self.max_bytes = options["max_message_bytes"]
            self.limit_name = f"the topic's max.message.bytes ({self.max_bytes})"
            self.limit_is_topics = True
        else:
            self.max_bytes = max_request_size
            self.limit_name = f"the producer's max_request_size ({max_request_size})"
            self.limit_is_topics = False
        count = int(meta["partitions"])
        resized = count != len(self.partitions)  # re-created with another partition count
        if resized:
            kept = self.partitions[:count]
            partitions = kept + [_Partition(self.name, p, self.acc) for p in range(len(kept), count)]
            # Other threads send meanwhile (the GIL may switch between these lines): send() looks
            # up the partition the accumulator chose in `partitions`, a custom partitioner picks
            # from `all`. So `partitions` grows before the accumulator and shrinks after it, and
            # `all` the other way round: neither names a partition the other lacks.
            if count > len(self.partitions):
                self.partitions[:] = partitions
            else:
                self.all = list(range(count))
            # Keyless records: Kafka's sticky partitioner (a new partition per batch_size bytes).
            self.sticky = StickyPartitioner(count, self.batch_size, random.getrandbits(64))
        failed = self.acc.configure(count, self.sticky, self.codec, self.compacted, self.max_bytes)
        if resized:
            self.partitions[:] = partitions
            self.all = list(range(count))
        for batch in failed:
            batch.fail(
                UnknownTopicOrPartitionError(
                    f"topic {self.name!r} has no partition {batch.partition} any more (it was deleted and "
                    f"created again with {count} partitions); its queued records were not written"
                )
            )
