"""kcat (Debian's package; librdkafka underneath, a build independent of confluent-kafka's) against
`kafkalite serve`: produce with every codec, headers and NULL keys/values (``-Z``), consume what
confluent-kafka and the embedded Producer wrote, and ``-L`` metadata. `.ci/run` installs kcat;
elsewhere the tests skip saying so when it is not installed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import kafkalite
import pytest
from server_clients import embedded_read, items, stored_codecs, write_from_python
from test_server import CODECS

pytest_plugins = ["kafkalite.testing"]

N = 150
#: One line per record, fields split by "|" (no value here holds one); -Z prints null as NULL.
FORMAT = "%t|%p|%o|%k|%s|%h\n"


@pytest.fixture(scope="module")
def kcat() -> str:
    path = shutil.which("kcat") or shutil.which("kafkacat")
    if path is None:
        pytest.skip("kcat is not installed: sudo apt-get install kcat (Debian, Ubuntu); .ci/run installs it")
    return path


def run(kcat: str, *args: str, stdin: str | None = None, output: str = "stdout") -> str:
    """kcat's stdout (or stderr, its log), failing the test when it exits non-zero."""
    done = subprocess.run([kcat, *args], input=stdin, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"kcat {' '.join(args)} failed:\n{done.stderr[-3000:]}"
    return done.stdout if output == "stdout" else done.stderr


def kcat_lines(n: int) -> str:
    """``key:value`` lines for ``kcat -K: -Z``: an empty key or value is sent as NULL."""
    return "".join(f"{(key or b'').decode()}:{(value or b'').decode()}\n" for key, value, _ in items(n))


#: How librdkafka's ``-d msg`` log names the codec of each Produce request it sent.
SENT = re.compile(r"Produce MessageSet with \d+ message\(s\) \(.*, (\w+)\)$", re.M)


@pytest.mark.parametrize("codec", CODECS)
def test_kcat_produces_every_codec_with_headers_and_nulls(kafkalite_server, kcat, codec):
    topic = f"kcat-{codec}"
    args = ["-b", kafkalite_server.bootstrap_servers, "-t", topic, "-P", "-z", codec, "-K:", "-Z"]
    args += ["-H", "src=kcat", "-H", "e=", "-d", "msg"]
    log = run(kcat, *args, stdin=kcat_lines(N), output="stderr")
    got = embedded_read(kafkalite_server.path, topic, N)
    assert [(r.offset, r.key, r.value, r.headers) for r in got] == [
        (i, key, value, [("src", b"kcat"), ("e", b"")]) for i, (key, value, _) in enumerate(items(N))
    ]
    # Stored as sent. librdkafka before the fix of confluentinc/librdkafka#4956 (Debian 12 ships
    # 2.0.2) sends gzip, snappy and lz4 batches uncompressed to a server whose Produce starts at
    # v3, as Kafka 4's does since KIP-896, and says so in its log; zstd and none go as asked.
    sent = {"uncompressed": 0, **{c: CODECS.index(c) for c in CODECS[1:]}}
    sent_codecs = {sent[name] for name in SENT.findall(log)}
    assert sent_codecs, log[-3000:]
    if codec == "none":
        assert sent_codecs == {0}, log[-3000:]
    elif codec == "zstd" or "does not support compression type" not in log:
        # librdkafka sends a set uncompressed when compressing would not shrink it (a set of
        # one record, split off by timing on a loaded machine): every other set goes as asked.
        assert CODECS.index(codec) in sent_codecs, log[-3000:]
        assert sent_codecs <= {0, CODECS.index(codec)}, log[-3000:]
    assert stored_codecs(kafkalite_server.path, topic) == sent_codecs


def test_kcat_consumes_what_python_wrote(kafkalite_server, kcat):
    written = write_from_python(kafkalite_server, N)

    def shown(b: bytes | None) -> str:
        return "NULL" if b is None else b.decode()

    for topic, want in written.items():
        out = run(
            kcat,
            "-b",
            kafkalite_server.bootstrap_servers,
            "-t",
            topic,
            "-C",
            "-o",
            "beginning",
            "-e",
            "-Z",
            "-f",
            FORMAT,
        )
        assert out.splitlines() == [
            f"{topic}|0|{i}|{shown(key)}|{shown(value)}|" + ",".join(f"{k}={shown(v)}" for k, v in headers)
            for i, (key, value, headers) in enumerate(want)
        ], topic


def test_kcat_metadata_lists_the_data_directory(kafkalite_server, kcat):
    kafkalite.Admin(kafkalite_server.path).create_topic("embedded-made", partitions=3)
    run(kcat, "-b", kafkalite_server.bootstrap_servers, "-t", "net-made", "-P", stdin="x\n")
    meta = json.loads(run(kcat, "-b", kafkalite_server.bootstrap_servers, "-L", "-J"))
    assert meta["brokers"] == [{"id": 0, "name": kafkalite_server.bootstrap_servers}]
    assert meta["controllerid"] == 0
    topics = {t["topic"]: t for t in meta["topics"]}
    assert set(topics) >= {"embedded-made", "net-made"}
    assert [p["partition"] for p in topics["embedded-made"]["partitions"]] == [0, 1, 2]
    assert all(p["leader"] == 0 and p["isrs"] == [{"id": 0}] for p in topics["embedded-made"]["partitions"])
    assert "error" not in topics["embedded-made"]
    only = json.loads(run(kcat, "-b", kafkalite_server.bootstrap_servers, "-L", "-J", "-t", "net-made"))
    assert [t["topic"] for t in only["topics"]] == ["net-made"]
