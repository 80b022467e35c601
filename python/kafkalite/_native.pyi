"""Type stubs for kafkalite's private native module (the Rust engine)."""

from collections.abc import Callable, Iterable
from os import PathLike
from typing import Any, Literal, Self, final, overload

from typing_extensions import disjoint_base

__all__ = [
    "Log",
    "Record",
    "BatchView",
    "ArrowBatch",
    "ConsumerRecord",
    "Notifier",
    "BatchBuffer",
    "BatchState",
    "Accumulator",
    "ProducerCore",
    "SendGate",
    "FutureRecordMetadata",
    "StickyPartitioner",
    "NativeServer",
    "SEND_DRAIN",
    "SEND_FIRST",
    "SEND_NO_KEY_OR_VALUE",
    "SEND_NULL_KEY",
    "SEND_CLOSED",
    "APPEND_LOCK_FILE",
    "WRITERS_FILE",
    "TOPICS_FILE",
    "TOPICS_JOURNAL_FILE",
    "GROUPS_DIR",
    "GROUP_STATE_LOCK_FILE",
    "GROUP_NETWORK_OWNER_FILE",
    "ID_NAME_MAX",
    "COMPRESSION_TYPES",
    "HASHED_ID_PREFIX",
    "id_file_name",
    "ADMIN_LOCK_FILE",
    "NOTIFY_FILE",
    "NOTIFY_FILE_LEN",
    "KAFKA_META_PROPERTIES",
    "SEGMENT_BYTES_DEFAULT",
    "INDEX_INTERVAL_BYTES_DEFAULT",
    "MAX_MESSAGE_BYTES_DEFAULT",
    "FIRST_SINK_PRODUCER_ID",
    "read_metadata",
    "metadata_changes",
    "create_topic",
    "open_data_dir",
    "partition_folder",
    "validate_topic_name",
    "broker_owned",
    "refuse_internal",
    "delete_topic",
    "DurableMark",
    "wait_durable",
    "drain_partition",
    "drain_locked",
    "DrainHooks",
    "PartitionState",
    "DrainLock",
    "CallbackDepth",
    "create_partitions",
    "alter_topic_config",
    "update_metadata",
    "RECORD_TOO_LARGE",
    "PREALLOCATE_BUDGET_BYTES_DEFAULT",
    "murmur2",
    "partitions_for_keys",
    "partition_for_key",
    "crc32c",
    "failpoint_names",
    "OFFSETS_TOPIC",
    "INTERNAL_TOPICS",
    "warn_unapplied",
    "OFFSETS_PARTITIONS",
    "OFFSETS_TOPIC_CONFIG",
    "OFFSET_COMMIT_KEY_TYPES",
    "MAX_OFFSET_COMMIT_VALUE_VERSION",
    "java_string_hash",
    "offsets_partition",
    "offsets_encode_key",
    "offsets_encode_value",
    "offsets_decode_key",
    "offsets_decode_value",
    "CommittedOffsets",
    "Transaction",
    "list_transactions",
    "transaction_log_decode",
    "TRANSACTION_STATE_TOPIC",
    "MAX_TRANSACTION_TIMEOUT_MS",
    "TRANSACTION_STATES",
    "inspect_segment",
    "MAX_PARTITIONS",
    "FETCH_MAX_BYTES",
    "FETCH_MAX_BYTES_MIN",
    "topic_config_defs",
    "dir_config_defs",
    "validate_topic_config",
    "validate_dir_config",
    "effective_topic_config",
    "topic_log_options",
    "users_add",
    "users_list",
    "users_delete",
    "quotas_list",
    "quotas_alter",
    "QUOTAS_FILE",
    "USERS_FILE",
    "SCRAM_MECHANISMS",
    "SCRAM_DEFAULT_ITERATIONS",
    "SCRAM_MIN_ITERATIONS",
    "SCRAM_MAX_ITERATIONS",
    "__version__",
]

__version__: str
SEND_DRAIN: int
SEND_FIRST: int
SEND_NO_KEY_OR_VALUE: int
SEND_NULL_KEY: int
SEND_CLOSED: int
APPEND_LOCK_FILE: str
WRITERS_FILE: str
TOPICS_FILE: str
TOPICS_JOURNAL_FILE: str
FIRST_SINK_PRODUCER_ID: int
GROUPS_DIR: str
GROUP_STATE_LOCK_FILE: str
GROUP_NETWORK_OWNER_FILE: str
ID_NAME_MAX: int
COMPRESSION_TYPES: list[str]
HASHED_ID_PREFIX: str
ADMIN_LOCK_FILE: str
NOTIFY_FILE: str
NOTIFY_FILE_LEN: int
KAFKA_META_PROPERTIES: str
SEGMENT_BYTES_DEFAULT: int
INDEX_INTERVAL_BYTES_DEFAULT: int
MAX_MESSAGE_BYTES_DEFAULT: int
RECORD_TOO_LARGE: int
PREALLOCATE_BUDGET_BYTES_DEFAULT: int

def murmur2(data: bytes) -> int: ...
def partitions_for_keys(keys: list[bytes], partitions: int) -> list[int]: ...
def partition_for_key(key: bytes, partitions: int) -> int: ...
def crc32c(data: bytes) -> int: ...
def failpoint_names() -> list[str]: ...
def id_file_name(value: str, what: str) -> str: ...
def drain_partition(hooks: DrainHooks, p: PartitionState, current: bool) -> bool: ...
def drain_locked(hooks: DrainHooks, p: PartitionState, current: bool) -> bool: ...

@final
class DrainHooks:
    """What the native drain calls back in the producer's sender (rust/src/py/drain.rs)."""

    def __new__(
        cls,
        notify: Callable[[], None],
        wake: Callable[[PartitionState], None],
        append_one: Callable[[PartitionState, BatchBuffer, BatchState], None],
        append_failed: Callable[[PartitionState, int, BatchState, Exception], None],
        hand: Callable[[tuple[BatchState, int, int | None], DurableMark, int, str], None],
    ) -> DrainHooks: ...

@final
class DrainLock:
    """``threading.Lock``'s interface; a blocked acquire waits without the GIL."""

    def acquire(self, blocking: bool = True, timeout: float = ...) -> bool: ...  # -1.0: wait without end
    def release(self) -> None: ...
    def locked(self) -> bool: ...
    def __enter__(self) -> bool: ...
    def __exit__(self, *exc: object) -> None: ...

@final
class PartitionState:
    """A producer's per-partition state (rust/src/py/partition.rs)."""

    def __new__(cls, topic: str, number: int, acc: Accumulator) -> PartitionState: ...
    @property
    def topic(self) -> str: ...
    @property
    def number(self) -> int: ...
    @property
    def acc(self) -> Accumulator: ...
    @property
    def drain_lock(self) -> DrainLock: ...
    @property
    def log(self) -> Any: ...  # the open kafkalite.log.Log, or None
    @property
    def identity(self) -> tuple[int, int] | None: ...
    def set_log(self, log: Any, native: Log, identity: tuple[int, int] | None) -> None: ...
    def clear_log(self) -> Any: ...
    inflight: int
    last_used: float

@final
class CallbackDepth:
    """Per thread, the producer's drains and acknowledgements under way."""

    depth: int

def wait_durable(marks: list[DurableMark], timeout_ms: int = 60000) -> list[BaseException | None]: ...

@final
class DurableMark:
    """What one appended batch waits for before ``acks='all'`` acknowledges it (group commit)."""

# `__consumer_offsets` records (rust/src/coordination/offsets_codec.rs).
OFFSETS_TOPIC: str
INTERNAL_TOPICS: list[str]
OFFSETS_PARTITIONS: int
OFFSETS_TOPIC_CONFIG: dict[str, Any]
OFFSET_COMMIT_KEY_TYPES: list[int]
MAX_OFFSET_COMMIT_VALUE_VERSION: int

def java_string_hash(s: str) -> int: ...
def offsets_partition(group_id: str) -> int: ...
def offsets_encode_key(group_id: str, topic: str, partition: int) -> bytes: ...
def offsets_encode_value(offset: int, metadata: str, timestamp_ms: int) -> bytes: ...
def offsets_decode_key(key: bytes) -> tuple[str, str, int] | None: ...
def offsets_decode_value(value: bytes) -> tuple[int, str]: ...

@final
class CommittedOffsets:
    """One group's committed offsets, read incrementally (rust/src/coordination/committed_offsets.rs)."""

    def __new__(cls, group_id: str) -> CommittedOffsets: ...
    def read(self, log: Log) -> tuple[dict[tuple[str, int], tuple[int, str]], set[tuple[str, int]]]: ...

# Transactions (rust/src/coordination/transactions/, rust/src/py/transactions.rs).
TRANSACTION_STATE_TOPIC: str
MAX_TRANSACTION_TIMEOUT_MS: int
TRANSACTION_STATES: list[str]

@final
class Transaction:
    def __new__(
        cls,
        data_dir: str | PathLike[str],
        transactional_id: str,
        transaction_timeout_ms: int = 60000,
        lock_wait_ms: int = 5000,
    ) -> Transaction: ...
    @property
    def transactional_id(self) -> str: ...
    @property
    def producer(self) -> tuple[int, int] | None: ...
    @property
    def in_transaction(self) -> bool: ...
    @property
    def partitions(self) -> list[tuple[str, int]]: ...
    def init_producer_id(self, expected: tuple[int, int] | None = None) -> tuple[int, int]: ...
    def begin(self) -> None: ...
    def add_partitions(self, partitions: list[tuple[str, int]]) -> None: ...
    def send_offsets(self, group_id: str, offsets: list[tuple[str, int, int, str | None]]) -> None: ...
    def end(self, commit: bool) -> None: ...
    def abort_expired_and_complete_pending(self) -> int: ...
    def describe(self, transactional_id: str | None = None) -> dict[str, Any] | None: ...
    def close(self) -> None: ...

def list_transactions(data_dir: str | PathLike[str]) -> list[dict[str, Any]]: ...
def transaction_log_decode(key: bytes, value: bytes | None) -> tuple[str, dict[str, Any] | None]: ...

# A segment judged by recovery's rules (rust/src/storage/inspect.rs), for `kafkalite dump-log`.
def inspect_segment(log_path: str | PathLike[str], is_last: bool) -> dict[str, Any]: ...

MAX_PARTITIONS: int
# `kafkalite serve`'s fetch.max.bytes default and least value (rust/src/server/fetch.rs).
FETCH_MAX_BYTES: int
FETCH_MAX_BYTES_MIN: int

# SASL/SCRAM users of a data directory (rust/src/coordination/users.rs).
USERS_FILE: str
SCRAM_MECHANISMS: list[str]
SCRAM_DEFAULT_ITERATIONS: int
SCRAM_MIN_ITERATIONS: int
SCRAM_MAX_ITERATIONS: int

def users_add(
    data_dir: str | PathLike[str], name: str, password: bytes, mechanisms: list[str], iterations: int
) -> None: ...
def users_list(data_dir: str | PathLike[str]) -> list[tuple[str, list[tuple[str, int]]]]: ...
def users_delete(data_dir: str | PathLike[str], name: str) -> bool: ...

QUOTAS_FILE: str

def quotas_list(
    data_dir: str | PathLike[str],
) -> list[tuple[list[tuple[str, str | None]], list[tuple[str, float]]]]: ...
def quotas_alter(
    data_dir: str | PathLike[str],
    entity: list[tuple[str, str | None]],
    changes: list[tuple[str, float | None]],
) -> None: ...
def topic_config_defs() -> list[dict[str, Any]]: ...
def dir_config_defs() -> list[dict[str, Any]]: ...
def validate_topic_config(config: dict[str, Any]) -> dict[str, Any]: ...
def warn_unapplied(what: str, before: dict[str, Any], after: dict[str, Any]) -> None: ...
def read_metadata(path: str | PathLike[str]) -> dict[str, Any] | None: ...
def metadata_changes(
    dir: str | PathLike[str], position: list[int] | None = None
) -> tuple[list[int], str, str | None]: ...
def create_topic(dir: str | PathLike[str], name: str, partitions: int, config: dict[str, Any]) -> bool: ...
def update_metadata(
    dir: str | PathLike[str], change: Callable[[dict[str, Any] | None], dict[str, Any]]
) -> None: ...
def open_data_dir(dir: str | PathLike[str]) -> None: ...
def refuse_internal(topic: str, what: str) -> None: ...
def broker_owned(dir: str | PathLike[str]) -> bool: ...
def partition_folder(name: str) -> tuple[str, int] | None: ...
def validate_topic_name(name: object) -> str: ...
def delete_topic(dir: str | PathLike[str], name: str) -> None: ...
def create_partitions(dir: str | PathLike[str], name: str, total: int) -> None: ...
def alter_topic_config(
    dir: str | PathLike[str], name: str, set: dict[str, Any], remove: list[str]
) -> None: ...
def validate_dir_config(config: dict[str, Any]) -> dict[str, Any]: ...
def effective_topic_config(
    dir_config: dict[str, Any] | None, topic_config: dict[str, Any] | None
) -> dict[str, Any]: ...
def topic_log_options(
    dir_config: dict[str, Any] | None,
    topic_config: dict[str, Any] | None,
    producer_compression: str | None = None,
) -> dict[str, Any]: ...

@final
class ConsumerRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    headers: list[tuple[str, bytes | None]]
    serialized_key_size: int
    serialized_value_size: int
    serialized_header_size: int
    @property
    def leader_epoch(self) -> int | None: ...
    @property
    def checksum(self) -> int | None: ...
    def _with_key_value(self, key: Any, value: Any) -> ConsumerRecord: ...
    def __eq__(self, other: object, /) -> bool: ...

@final
class Notifier:
    def __new__(cls, path: str | PathLike[str]) -> Notifier: ...
    def sequence(self) -> int: ...
    def notify(self) -> None: ...
    def wait(self, seen: int, timeout_ms: int) -> bool: ...

@final
class NativeServer:
    def __new__(
        cls,
        data_dir: str | PathLike[str],
        listen: str,
        advertised: str | None = None,
        auto_create_topics: bool = True,
        idle_timeout_ms: int = 600000,
        sasl: bool = False,
        fetch_max_bytes: int = ...,  # FETCH_MAX_BYTES (Kafka's fetch.max.bytes, 55 MiB)
        acks_all: str = "disk",
        metrics: str | None = None,
        metrics_allow_remote: bool = False,
        max_open_partitions: int | None = None,
        authorizer: bool = False,
        super_users: list[str] = ...,
        tls_cert: str | PathLike[str] | None = None,
        tls_key: str | PathLike[str] | None = None,
        tls_client_ca: str | PathLike[str] | None = None,
        allow_plaintext: bool = False,
        group_consumer_session_timeout_ms: int = 45000,
        group_consumer_heartbeat_interval_ms: int = 5000,
        controller_mutation_rate: float | None = None,
        max_connections: int = 10000,
        max_connections_per_ip: int | None = None,
        max_connections_per_ip_overrides: str | None = None,
        max_connection_creation_rate: int | None = None,
        authentication_timeout_ms: int = 10000,
    ) -> NativeServer: ...
    @property
    def local_addr(self) -> str: ...
    @property
    def advertised(self) -> str: ...
    @property
    def security_protocol(self) -> str: ...
    @property
    def metrics_addr(self) -> str | None: ...
    @property
    def open_file_limit(self) -> int | None: ...
    @property
    def max_open_partitions(self) -> int: ...
    def stop(self, timeout_ms: int) -> None: ...

@final
class BatchBuffer:
    def __len__(self) -> int: ...
    def size_bytes(self) -> int: ...

@final
class BatchState:
    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def done(self) -> bool: ...
    @property
    def error(self) -> Any: ...
    def complete(self, first_offset: int, log_append_time: int | None = None) -> None: ...
    def fail(self, error: BaseException) -> None: ...

@final
class FutureRecordMetadata:
    @property
    def is_done(self) -> bool: ...
    def succeeded(self) -> bool: ...
    def failed(self) -> bool: ...
    @property
    def value(self) -> Any: ...
    @property
    def exception(self) -> BaseException | None: ...
    def get(self, timeout: float | None = None) -> Any: ...
    def add_callback(self, func: Callable[..., Any], *args: Any) -> FutureRecordMetadata: ...
    def add_errback(self, func: Callable[..., Any], *args: Any) -> FutureRecordMetadata: ...

@final
class Accumulator:
    def __new__(cls, topic: str, batch_size: int) -> Accumulator: ...
    def configure(
        self, partitions: int, sticky: StickyPartitioner, compression: str, compacted: bool, max_bytes: int
    ) -> list[BatchState]: ...
    def close(self) -> None: ...
    def send(
        self,
        value: bytes | None,
        key: bytes | None,
        headers: Iterable[tuple[str, bytes | None]] | None,
        partition: int | None,
        timestamp: int | None,
    ) -> FutureRecordMetadata | tuple[int, int, FutureRecordMetadata | None]: ...
    def take(self, partition: int, current: bool) -> list[tuple[BatchBuffer, BatchState]]: ...
    def pending(self, partition: int | None = None) -> int: ...
    def taken(self) -> tuple[int, int, int, int]: ...
    def linger_left(self, partition: int, linger: float) -> float | None: ...

@final
class SendGate:
    def __new__(cls) -> SendGate: ...
    def shut(self) -> None: ...
    def reopen(self) -> None: ...
    @property
    def open(self) -> bool: ...

@disjoint_base  # subclassed by kafkalite.Producer; its layout is native
class ProducerCore:
    def __new__(cls, *_args: Any, **_kwargs: Any) -> Self: ...
    def _setup_send(
        self,
        accumulators: dict[str, tuple[Accumulator, list[PartitionState]]],
        gate: SendGate,
        direct: bool,
        hooks: DrainHooks,
    ) -> None: ...
    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Iterable[tuple[str, bytes | None]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> FutureRecordMetadata: ...

@final
class StickyPartitioner:
    def __new__(cls, partitions: int, batch_size: int, seed: int) -> StickyPartitioner: ...
    @property
    def current(self) -> int: ...
    def appended(self, size: int) -> None: ...
    def runs(self, values: list[bytes | None], timestamp: int) -> list[tuple[int, int, int]]: ...

@final
class Record:
    offset: int | None
    timestamp: int | None
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    def __new__(
        cls,
        value: bytes | bytearray | memoryview | None = None,
        key: bytes | bytearray | memoryview | None = None,
        headers: Iterable[tuple[str, bytes | None]] | None = None,
        timestamp: int | None = None,
        offset: int | None = None,
    ) -> Record: ...
    def __eq__(self, other: object, /) -> bool: ...

@final
class BatchView:
    """A read-only buffer over whole record batches of a mapped segment."""

    def __len__(self) -> int: ...
    # Implemented in C (tp_as_buffer); Python 3.11 has no __buffer__ attribute to inspect.
    def __buffer__(self, flags: int, /) -> memoryview: ...

@final
class ArrowBatch:
    """An Arrow record batch exported through the Arrow PyCapsule interface."""

    def __arrow_c_array__(self, requested_schema: Any = None) -> tuple[Any, Any]: ...
    def __len__(self) -> int: ...

@final
class Log:
    def __new__(
        cls,
        path: str | PathLike[str],
        segment_bytes: int | None = None,
        index_interval_bytes: int | None = None,
        segment_ms: int | None = None,
        retention_bytes: int | None = None,
        retention_ms: int | None = None,
        compression: str = "none",
        flush: str | int | None = None,
        timestamp_type: str = "create",
        max_message_bytes: int | None = None,
        readonly: bool = False,
        shared_writers: bool = False,
        compact: bool = False,
        preallocate_budget_bytes: int | None = None,
    ) -> Log: ...
    def append(self, records: Iterable[Record]) -> tuple[int, int]: ...
    def append_values(self, values: Iterable[bytes], timestamp: int | None = None) -> tuple[int, int]: ...
    def append_batches(self, data: bytes) -> tuple[int, int]: ...
    def encode_batches(
        self,
        values: Iterable[bytes | None],
        keys: Iterable[bytes | None] | None = None,
        headers: Iterable[Iterable[tuple[str, bytes | None]] | None] | None = None,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        timestamp: int | None = None,
        transactional: bool = False,
    ) -> bytes: ...
    def append_produce(self, data: bytes) -> tuple[int, int, bool]: ...
    def batch_headers(
        self, start: int, max_batches: int = 4096
    ) -> list[tuple[int, int, int, int, int, int, bool]]: ...
    def producer_sequence(self, producer_id: int) -> tuple[int, int] | None: ...
    def read(self, offset: int, max_bytes: int = 1048576) -> BatchView: ...
    def read_records(
        self,
        start: int,
        end: int | None = None,
        max_records: int = 8192,
        isolation_level: str = "read_uncommitted",  # or "read_committed" (kafka-python's values),
    ) -> tuple[list[Record], int]: ...
    def producers(self) -> list[tuple[int, int, int, int, int, int]]: ...
    def write_txn_marker(
        self, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int
    ) -> int | None: ...
    def attach_transaction(self, txn: Transaction) -> None: ...
    def append_buffer(self, buffer: BatchBuffer) -> tuple[int, int, int | None] | None: ...
    @overload
    def append_buffer_deferred(
        self, buffer: BatchBuffer
    ) -> tuple[int, int, int | None, DurableMark | None] | None: ...
    @overload
    def append_buffer_deferred(
        self, buffer: BatchBuffer, if_current: bool
    ) -> tuple[int, int, int | None, DurableMark | None] | None | Literal[False]: ...
    def read_consumer_records(
        self,
        topic: str,
        partition: int,
        start: int,
        max_records: int = 500,
        end: int | None = None,
        isolation_level: str = "read_uncommitted",  # or "read_committed" (kafka-python's values),
    ) -> tuple[list[ConsumerRecord], int]: ...
    def read_arrow(
        self,
        start: int,
        end: int | None = None,
        max_records: int | None = None,
        isolation_level: str = "read_uncommitted",  # or "read_committed" (kafka-python's values),
    ) -> tuple[ArrowBatch, int]: ...
    def read_spark_arrow(
        self,
        topic: str,
        partition: int,
        start: int,
        end: int | None = None,
        max_records: int | None = None,
        include_headers: bool = False,
        isolation_level: str = "read_uncommitted",  # or "read_committed" (kafka-python's values),
    ) -> tuple[ArrowBatch, int]: ...
    @property
    def last_stable_offset(self) -> int: ...
    def aborted_transactions(self) -> list[tuple[int, int, int, int]]: ...
    def offset_for_timestamp(self, ts: int) -> tuple[int, int] | None: ...
    @property
    def start_offset(self) -> int: ...
    @property
    def end_offset(self) -> int: ...
    @property
    def segments(self) -> list[tuple[int, int, int, int]]: ...
    @property
    def recovery_reports(self) -> list[tuple[int, int, int, str | None]]: ...
    def delete_records_before(self, offset: int) -> int: ...
    def enforce_retention(self, now_ms: int | None = None) -> int: ...
    def clean(
        self, delete_retention_ms: int, min_compaction_lag_ms: int = 0, now_ms: int | None = None
    ) -> dict[str, int]: ...
    def dirty_ratio(self, min_compaction_lag_ms: int = 0, now_ms: int | None = None) -> float: ...
    def roll(self) -> None: ...
    def refresh(self) -> None: ...
    def flush(self) -> None: ...
    def close(self, timeout: float | None = None) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def path(self) -> str: ...
