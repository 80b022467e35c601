"""Consumer groups on one host without a coordinator process: a member's side (``member``), the
group's files (``files``), the heartbeat thread (``heartbeat``), rebalances (``assignment``) with
Kafka's assignors (``assignors``), committed offsets in ``__consumer_offsets`` (``offsets``) and
the admin operations on groups (``admin``).

Nothing is imported here: the data directory and the argument checks import ``offsets`` and
``assignors`` alone, without the membership machinery."""
