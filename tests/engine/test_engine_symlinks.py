"""No file of a data directory is opened through a symbolic link: a segment-, index-, lock- or
checkpoint-named link (to a decoy file standing in for "a file outside the data directory")
makes opening fail with a typed error that names the path, and the decoy is never written.
A partition directory that is itself a link is refused too."""

from __future__ import annotations

import os

import pytest
from kafkalite import KafkaliteError, Log

DECOY_BYTES = b"decoy: must never be truncated or written\n" * 100


@pytest.fixture
def decoy(tmp_path):
    path = tmp_path / "outside" / "decoy.bin"
    path.parent.mkdir()
    path.write_bytes(DECOY_BYTES)
    return path


def make_log(part_dir: str) -> None:
    with Log(part_dir, segment_bytes=4096) as log:
        for i in range(100):
            log.append_values([b"%d" % i + b"x" * 100])


LINKED = [
    "00000000000000000000.log",
    "00000000000000000000.index",
    "00000000000000000000.timeindex",
    ".kafkalite.lock",
    ".kafkalite.writers",
    ".kafkalite-log-start-offset",
]


@pytest.mark.parametrize("name", LINKED)
@pytest.mark.parametrize("mode", ["exclusive", "shared", "readonly", "fresh"])
def test_a_linked_file_is_refused_and_its_target_untouched(part_dir, decoy, name, mode):
    if mode == "fresh":
        os.makedirs(part_dir)
    else:
        make_log(part_dir)
        if os.path.exists(os.path.join(part_dir, name)):
            os.remove(os.path.join(part_dir, name))
    os.symlink(decoy, os.path.join(part_dir, name))
    kwargs = (
        {"readonly": True} if mode == "readonly" else {"shared_writers": True} if mode == "shared" else {}
    )
    try:
        with Log(part_dir, **kwargs) as log:
            log.append_values([b"must not land in the decoy"]) if mode != "readonly" else list(log.records())
            log.roll() if mode != "readonly" else None
    except KafkaliteError as e:
        assert isinstance(e, OSError)
        assert "symbolic link" in str(e) and name in str(e)
    else:
        # Where no error is right: a reader never opens lock files; a checkpoint link reads as
        # absent (and is replaced by rename when written); an index link without its .log is an
        # orphan a writer removes (the link, not its target).
        segment_file = name.endswith((".log", ".index", ".timeindex"))
        orphan_index = mode == "fresh" and name.endswith("index")
        assert (
            (mode == "readonly" and not segment_file) or name.startswith(".kafkalite-log") or orphan_index
        ), mode
    assert decoy.read_bytes() == DECOY_BYTES


def test_a_linked_checkpoint_is_replaced_not_written_through(part_dir, decoy):
    make_log(part_dir)
    os.symlink(decoy, os.path.join(part_dir, ".kafkalite-clean-shutdown.tmp"))
    with Log(part_dir) as log:
        log.append_values([b"y"])
    assert decoy.read_bytes() == DECOY_BYTES


def test_a_linked_partition_directory_is_refused(tmp_path, decoy):
    real = tmp_path / "elsewhere" / "t-0"
    make_log(str(real))
    link = tmp_path / "data" / "t-0"
    link.parent.mkdir()
    os.symlink(real, link)
    for kwargs in ({}, {"shared_writers": True}, {"readonly": True}):
        with pytest.raises(KafkaliteError, match="symbolic link") as info:
            Log(str(link), **kwargs)
        assert isinstance(info.value, OSError)
