"""The metrics/events report goes to rank 0 only, over a real gloo process group."""

from __future__ import annotations

import multiprocessing
import socket
from pathlib import Path

import pytest
import torch.distributed as dist

from trainer.exchange import ScheduleMismatchError, SharedExperienceExchange, StepRecord


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _worker(rank: int, port: int, step_of_rank_1: int, out: Path) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        exchange = SharedExperienceExchange()
        step = step_of_rank_1 if rank == 1 else 3
        record = StepRecord(
            f"p{rank}", step, ("a", "b"), {"train/reward_mean": float(rank)},
            events=[{"source": "p0", "target": f"p{rank}", "samples": ["x" * 100]}],
        )  # fmt: skip
        try:
            got = exchange.report(record)
        except ScheduleMismatchError as exc:
            (out / f"{rank}.txt").write_text(f"mismatch: {exc}")
            return
        if got is None:
            (out / f"{rank}.txt").write_text("none")
        else:
            shown = ";".join(f"{r.policy}:{r.metrics['train/reward_mean']}" for r in got)
            (out / f"{rank}.txt").write_text(shown)
        exchange.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(
    ("step_of_rank_1", "rank_0_sees"),
    [(3, "p0:0.0;p1:1.0"), (4, "mismatch: policy 'p1' is at step 4")],
)
def test_rank_0_alone_receives_every_policys_report(
    tmp_path: Path, step_of_rank_1: int, rank_0_sees: str
) -> None:
    context = multiprocessing.get_context("spawn")
    port = _free_port()
    workers = [
        context.Process(target=_worker, args=(rank, port, step_of_rank_1, tmp_path))
        for rank in (0, 1)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert (tmp_path / "0.txt").read_text().startswith(rank_0_sees)
    assert (tmp_path / "1.txt").read_text() == "none"


def test_a_report_carries_no_topics() -> None:
    exchange = SharedExperienceExchange.__new__(SharedExperienceExchange)
    record = StepRecord("p0", 1, (), topics={"rewards": [1.0]})
    with pytest.raises(ValueError, match="not topics"):
        exchange.report(record)
