"""Misuse the adversarial review found still untyped or silently accepted after the first
round of validation: 64-bit offsets, commit metadata UTF-8 cannot store, a file given as the
data directory, and two CLI inputs."""

from __future__ import annotations

import pytest
from helpers import run_cli
from kafkalite import Admin, Consumer, OffsetAndMetadata, Producer, TopicPartition
from kafkalite.errors import InvalidConfigError, KafkaliteError, NotADataDirError


@pytest.fixture
def data(tmp_path):
    path = str(tmp_path / "d")
    Admin(path).create_topic("keep", 1)
    return path


@pytest.mark.parametrize(
    "call",
    [
        lambda c, tp: c.commit({tp: OffsetAndMetadata(2**63, "")}),
        lambda c, tp: c.commit({tp: 2**63}),
        lambda c, tp: c.seek(tp, 2**64),
        lambda c, tp: c.commit({tp: OffsetAndMetadata(1, "\udc80")}),
        lambda c, tp: c.commit({tp: OffsetAndMetadata(1, "x" * 40_000)}),
    ],
    ids=["commit-2**63", "commit-int-2**63", "seek-2**64", "lone-surrogate-metadata", "metadata-too-long"],
)
def test_offsets_and_metadata_kafka_cannot_store_are_refused(data, call):
    tp = TopicPartition("keep", 0)
    with Consumer(data, group_id="g", enable_auto_commit=False) as consumer:
        consumer.assign([tp])
        with pytest.raises(InvalidConfigError):
            call(consumer, tp)
        assert consumer.committed(tp) is None  # nothing was written


def test_a_file_is_not_a_data_directory(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    for make in (Producer, lambda p: Admin(p).list_topics(), Consumer):
        with pytest.raises(NotADataDirError):
            make(str(f))
    assert f.read_text() == "x"


def test_cli_reset_offsets_with_a_bad_partition_list_is_one_line(data):
    done = run_cli(
        "--data-dir", data, "groups", "reset-offsets", "g", "--topic", "keep:x", "--to-earliest", text=True
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr and "partition numbers" in done.stderr


def test_cli_alter_to_zero_partitions_is_refused(data):
    done = run_cli("--data-dir", data, "topics", "alter", "keep", "--partitions", "0", text=True)
    assert done.returncode == 1 and "Altered" not in done.stdout
    assert isinstance(KafkaliteError, type)
