"""Child process: producer `pid` sends `count` records keyed b"p<pid>", value b"<pid>:<seq>"."""

import sys

from kafkalite import Producer


def main(data_dir: str, topic: str, pid: int, count: int) -> None:
    with Producer(data_dir, linger_ms=2) as producer:
        key = b"p%d" % pid
        for seq in range(count):
            producer.send(topic, b"%d:%d" % (pid, seq), key=key)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
