"""The broker stress test's two halves, as programs of their own.

``record`` is a task a real worker loads with ``-I tests.integration.broker_stress``: it
appends the tag it is given to the file named by ``MRL_STRESS_RECORD`` (one line a
delivery, so a message handled twice shows as a repeated line). Run as a program, this
module is one producer process: it sends ``--count`` messages tagged ``<prefix>-<i>``.

    python -m tests.integration.broker_stress --prefix p0 --count 500 --queue Q
"""

from __future__ import annotations

import argparse
import os
import random
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")

from scheduler.celery import app

TASK_NAME = "tests.broker_stress.record"


@app.task(name=TASK_NAME)
def record(tag: str) -> None:
    """Append ``tag`` and a newline to the record file (O_APPEND: one write a line)."""
    fd = os.open(os.environ["MRL_STRESS_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{tag}\n".encode())
    finally:
        os.close(fd)


def produce(prefix: str, count: int, queue: str, pause: float, start_at: float = 0.0) -> None:
    """Send ``count`` ``record`` messages to ``queue`` over one producer connection, with
    a random pause of 0 to 2 x ``pause`` seconds between two (so that the worker keeps up
    and reads at the head of the queue, where a message may still be being written).
    The first send waits for the wall-clock time ``start_at``, so that several producers
    can open a new broker file at the same moment."""
    jitter = random.Random(prefix)
    with app.producer_or_acquire() as producer:
        while time.time() < start_at:
            time.sleep(0.0005)
        for index in range(count):
            app.send_task(TASK_NAME, args=[f"{prefix}-{index}"], queue=queue, producer=producer)
            time.sleep(jitter.uniform(0, 2 * pause))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--pause", type=float, default=0.0, help="mean seconds between sends")
    parser.add_argument("--start-at", type=float, default=0.0, help="epoch seconds to start")
    args = parser.parse_args()
    produce(args.prefix, args.count, args.queue, args.pause, args.start_at)


if __name__ == "__main__":
    main()
