"""The training script's task layout on the real two-node dev cluster: each rank lands on
the node the MWRA plan gave it, even when that is not Slurm's block order, and every
rank is told the same rendezvous, rank 0's node's address as Slurm knows it.

The trainer here is a stand-in (a shell script in place of the job's Python) that only
writes down where Slurm started it: the layout is the batch script's and Slurm's work,
which is what this checks; the real trainer across two nodes is
tests/integration/test_multinode.py.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from scheduler.jobs import JobSpec, render_script
from scheduler.slurm import sbatch, squeue

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

PARTITION = "multinode"
STAND_IN = """#!/bin/bash
# Called as: <python> -m trainer run --config C --run-dir D [--resume]
run_dir=$7
mkdir -p "$run_dir/ranks"
echo "$SLURMD_NODENAME $MASTER_ADDR $MASTER_PORT $SLURM_NTASKS" > "$run_dir/ranks/$SLURM_PROCID"
"""


def nodes_of(partition: str) -> dict[str, str]:
    """node -> address (``NodeAddr``) of the partition's nodes."""
    out = subprocess.run(
        ["sinfo", "-h", "-N", "-p", partition, "-o", "%N %o"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


@pytest.fixture
def two_nodes() -> list[str]:
    nodes = nodes_of(PARTITION)
    if len(nodes) != 2:
        pytest.fail(
            f"partition {PARTITION!r} has {len(nodes)} node(s): start the two-node dev cluster "
            "with `scripts/slurm-dev-cluster start --nodes 2` (scripts/services-up does)"
        )
    return sorted(nodes)


@pytest.mark.parametrize("node_by_rank", [(1, 0, 1), (0, 1, 1)])
def test_each_rank_runs_on_its_planned_node(
    tmp_path: Path, two_nodes: list[str], node_by_rank: tuple[int, ...]
) -> None:
    stand_in = tmp_path / "python"
    stand_in.write_text(STAND_IN)
    stand_in.chmod(0o755)
    run_dir = tmp_path / "run"
    (run_dir / "job").mkdir(parents=True)
    spec = JobSpec(
        run_id=1,
        name="layout",
        run_dir=run_dir,
        python=str(stand_in),
        workdir=tmp_path,
        n_policies=3,
        partition=PARTITION,
        time_limit="00:05:00",
        nodes=2,
        node_by_rank=node_by_rank,
        mem_gb=1,
    )
    spec.script_path.write_text(render_script(spec, slurm=True))

    job_id = sbatch(spec.script_path)
    deadline = time.monotonic() + 60
    while not (job := squeue().get(job_id)) or not job.finished:
        assert time.monotonic() < deadline, f"job {job_id} did not finish"
        time.sleep(0.3)

    assert (job.state, job.exit_code) == ("COMPLETED", 0), spec.log_path.read_text()
    seen = {int(path.name): path.read_text().split() for path in (run_dir / "ranks").iterdir()}
    assert {rank: fields[0] for rank, fields in seen.items()} == {
        rank: two_nodes[node] for rank, node in enumerate(node_by_rank)
    }
    addresses = nodes_of(PARTITION)
    rank0_address = addresses[two_nodes[node_by_rank[0]]]
    # One rendezvous for all, on rank 0's node; the step has one task per policy.
    assert {tuple(fields[1:]) for fields in seen.values()} == {
        (rank0_address, str(20000 + int(job_id) % 20000), "3")
    }
