"""Job specs refuse anything that is not plainly safe; scripts quote what they carry."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path
from typing import Any

import pytest

from scheduler.jobs import JobSpec, JobSpecError, render_script

INJECTIONS = [
    "$(rm -rf ~)",
    "`id`",
    "a; rm -rf /",
    "a && curl evil",
    "a | sh",
    "a\nb",
    "a b",
    "'quoted'",
    '"dq"',
    "../../etc/passwd",
    "<script>",
    "x" * 300,
    "",
]


def spec(**overrides: Any) -> JobSpec:
    fields: dict[str, Any] = {
        "run_id": 7,
        "name": "sgt-trio-s0-r7",
        "run_dir": Path("/srv/runs/run-7"),
        "python": "/opt/venv/bin/python",
        "workdir": Path("/srv/mrl"),
        "ingest_url": "http://web:8000/api/v1/runs/7/ingest",
        "n_policies": 3,
        "partition": "gpu",
        "account": "lab-a",
        "qos": "normal",
        "time_limit": "1-00:00:00",
        "nodes": 1,
        "gpus_per_node": 2,
        "cpus_per_task": 4,
        "mem_gb": 32,
        "cuda_visible_devices": ("0", "1", "1"),
    }
    fields.update(overrides)
    return JobSpec(**fields)


@pytest.mark.parametrize(
    "field",
    [
        *("name", "run_dir", "python", "workdir", "ingest_url"),
        *("partition", "account", "qos", "time_limit", "zoo_dir"),
    ],
)
@pytest.mark.parametrize("payload", INJECTIONS)
def test_every_text_field_refuses_injection_payloads(field: str, payload: str) -> None:
    value: Any = Path(payload) if field in {"run_dir", "workdir"} else payload
    if field in {"partition", "account", "qos", "zoo_dir", "ingest_url"} and payload == "":
        spec(**{field: value})  # empty means "cluster default" / "none" there
        return
    with pytest.raises(JobSpecError) as error:
        spec(**{field: value})
    assert error.value.field == field


@pytest.mark.parametrize("devices", [("0;rm",), ("$(id)",), ("0 1",)])
def test_device_lists_are_digits_only(devices: tuple[str, ...]) -> None:
    with pytest.raises(JobSpecError, match="cuda_visible_devices"):
        spec(cuda_visible_devices=devices)


@pytest.mark.parametrize(
    ("field", "value"),
    [("n_policies", 0), ("n_policies", 9), ("nodes", 0), ("gpus_per_node", -1), ("mem_gb", 0)],
)
def test_numbers_are_bounded(field: str, value: int) -> None:
    with pytest.raises(JobSpecError, match=field):
        spec(**{field: value})


def test_the_slurm_script_requests_the_plan_and_parses(tmp_path: Path) -> None:
    script = render_script(spec(), slurm=True)
    for line in [
        "#SBATCH --job-name=mrl-sgt-trio-s0-r7",
        "#SBATCH --ntasks=3",
        "#SBATCH --gres=gpu:2",
        "#SBATCH --cpus-per-task=4",
        "#SBATCH --mem=32G",
        "#SBATCH --time=1-00:00:00",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=lab-a",
        "#SBATCH --requeue",
        "#SBATCH --signal=B:USR1@120",
        "export MRL_DEVICES_BY_RANK='0;1;1'",
    ]:
        assert line in script.splitlines(), line
    assert "srun --kill-on-bad-exit=1 /opt/venv/bin/python -m trainer run" in script
    assert "--config /srv/runs/run-7/job/config.json" in script
    path = tmp_path / "run.sbatch"
    path.write_text(script)
    subprocess.run(["bash", "-n", str(path)], check=True)


def test_the_local_script_has_no_slurm_parts() -> None:
    script = render_script(
        spec(n_policies=2, gpus_per_node=0, cuda_visible_devices=()), slurm=False
    )
    assert "#SBATCH" not in script and "srun" not in script and "scontrol" not in script
    assert "MRL_DEVICES_BY_RANK" not in script


def test_a_spec_is_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec().name = "other"  # type: ignore[misc]
