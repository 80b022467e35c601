"""What a Spark read or write names (the data directory, its topics and partitions), checked on
the driver before any task runs: ``load()`` checks the path and the subscribed or assigned
topics, ``save()``/``start()`` the path and the ``topic`` option. Each error is one line that
names the path or topic and says what to do; Spark shows it with a one-frame traceback.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from functools import wraps
from typing import Any, TypeVar

from kafkalite.errors import KafkaliteError, UnknownTopicError
from kafkalite.spark.options import DataDirNotFoundError, SparkOptionError, get


def _create_hint(path: str, topic: str = "NAME") -> str:
    return f"`kafkalite --data-dir {path} topics create {topic}` or kafkalite.Admin({path!r}).create_topic({topic!r}, partitions)"


def data_dir_path(options: Mapping[str, str], call: str) -> str:
    """The data directory given to ``call`` (load/save/start), which must exist."""
    path = get(options, "path")
    if not path:
        raise SparkOptionError(f"give the kafkalite data directory: {call}('/path/to/data')")
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        what = "is a file, not" if os.path.exists(path) else "does not exist; it is not"
        raise DataDirNotFoundError(
            f"{path} {what} a kafkalite data directory. Fix the path given to {call}(), or create the directory "
            f"and its topics first: {_create_hint(path)}"
        )
    return path


def topics_of(path: str) -> dict[str, int]:
    from kafkalite.datadir import DataDir

    return {name: int(meta["partitions"]) for name, meta in DataDir(path, create=False).topics().items()}


def unknown_topic(path: str, topic: str, named_by: str, topics: Mapping[str, int]) -> UnknownTopicError:
    """``named_by`` says where the name came from, e.g. "option 'subscribe'"."""
    known = (
        ", ".join(sorted(t for t in topics if not t.startswith("__"))) or "none: is this the data directory?"
    )
    return UnknownTopicError(
        f"topic {topic!r} ({named_by}) does not exist in {path} (its topics: {known}). "
        f"Fix the name, or create the topic: {_create_hint(path, topic)}"
    )


def check_read_targets(options: Mapping[str, str]) -> None:
    """The data directory exists, every topic named by ``subscribe`` or ``assign`` exists, and
    every assigned partition is one of its topic's. (``subscribePattern`` matches what exists.)"""
    path = data_dir_path(options, "load")
    topics = topics_of(path)
    subscribe = get(options, "subscribe")
    if subscribe is not None:
        for topic in (t.strip() for t in subscribe.split(",")):
            if topic and topic not in topics:
                raise unknown_topic(path, topic, "option 'subscribe'", topics)
    assign = get(options, "assign")
    if assign is not None:
        try:
            wanted = {str(t): [int(p) for p in ps] for t, ps in json.loads(assign).items()}
        except (ValueError, AttributeError, TypeError):
            return  # the options parser reports the malformed JSON with Kafka's message
        for topic, partitions in wanted.items():
            if topic not in topics:
                raise unknown_topic(path, topic, "option 'assign'", topics)
            bad = [p for p in partitions if not 0 <= p < topics[topic]]
            if bad:
                raise SparkOptionError(
                    f"option 'assign' names partition(s) {bad} of topic {topic!r} in {path}, which has partitions "
                    f"0..{topics[topic] - 1}; fix 'assign' or add partitions (kafkalite.Admin(path).create_partitions)"
                )


def ensure_topics(path: str, names: Iterable[str], named_by: Callable[[str], str]) -> dict[str, int]:
    """The data directory's topics, after creating those of ``names`` that are missing as a
    producer would (``auto.create.topics.enable``, ``num.partitions`` of the data directory);
    where auto-creation is off, the error names the topic and where it came from."""
    from kafkalite.datadir import DataDir

    topics = topics_of(path)
    missing = sorted(set(names) - set(topics))
    if missing:
        data_dir = DataDir(path)
        for name in missing:
            try:
                data_dir.auto_create(name)
            except UnknownTopicError:
                raise unknown_topic(
                    path, name, f"{named_by(name)}; auto.create.topics.enable=false", topics
                ) from None
        topics = topics_of(path)
    return topics


def check_write_target(options: Mapping[str, str], call: str) -> str:
    """On the driver, before any task runs: the data directory exists and is kafkalite's (not a
    broker's), and the ``topic`` option names a topic, created here if missing and the data
    directory auto-creates topics (rows that carry their own ``topic`` are created or refused
    at commit, before anything is appended)."""
    from kafkalite.datadir import DataDir
    from kafkalite.errors import ReadOnlyDataDirError

    path = data_dir_path(options, call)
    if DataDir(path).broker_owned():
        raise ReadOnlyDataDirError(
            f"{path} is a Kafka broker's log directory: the broker's metadata log owns its topics, so kafkalite "
            f"only reads it. Write to a kafkalite data directory, or adopt this one on purpose (no broker may use "
            f"it afterwards): `kafkalite init --adopt {path}`"
        )
    topic = get(options, "topic")
    if topic is not None:
        ensure_topics(path, [topic], lambda _: "option 'topic'")
    return path


F = TypeVar("F", bound=Callable[..., Any])


def short_errors(method: F) -> F:
    """Spark prints a data source error with its whole Python traceback; for kafkalite's own
    errors (what the user must fix, said in the message) keep only this frame."""

    @wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except KafkaliteError as e:
            raise e.with_traceback(None) from None

    return call  # type: ignore[return-value]
