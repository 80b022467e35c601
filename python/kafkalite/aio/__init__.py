"""``kafkalite.aio``: asyncio's API over the embedded data directory, with aiokafka's names.

``AIOProducer`` / ``AIOConsumer`` wrap the sync ``kafkalite.Producer`` / ``kafkalite.Consumer``
(the same log, group membership and typed errors); ``AIOKafkaProducer`` / ``AIOKafkaConsumer``
are the same classes under aiokafka's names, so code written for aiokafka ports by changing
``bootstrap_servers=...`` into the data directory's path.

Nothing here polls: a caught-up consumer sleeps on the same cross-process notifier as the sync
consumer, through one waiter thread per event loop and data directory (``_bridge``); a send's
future resolves through its kafkalite future's callback; blocking calls (start, flush, commit,
stop, a fetch that may rebalance) run in one bounded executor shared by the process.
"""

from kafkalite.aio.consumer import AIOConsumer
from kafkalite.aio.producer import AIOProducer

AIOKafkaProducer = AIOProducer
AIOKafkaConsumer = AIOConsumer

__all__ = ["AIOProducer", "AIOConsumer", "AIOKafkaProducer", "AIOKafkaConsumer"]
