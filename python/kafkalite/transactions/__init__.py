"""Transactions over the engine's coordinator: the embedded producer's side (``manager``,
``Producer(transactional_id=...)``) and the admin operations on transactional ids (``admin``,
``Admin.list/describe/abort_transaction``).

Nothing is imported here, so the command line's ``transactions`` loads only ``admin``."""
