"""Where a worker is and how it reaches its peers (issue 22): the gloo interface chosen
from the real kernel's routes and interfaces (no mocks), the node a worker names, and the
worker records in the run directory."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer.policy.test_devices import FakeRuntime, _options
from trainer import rendezvous
from trainer import run as trainer_run
from trainer.rendezvous import (
    choose_gloo_interface,
    gloo_interface,
    interface_address,
    interface_with_address,
    local_address_towards,
    node_name,
    read_worker_records,
    worker_record,
    write_worker_record,
)

NO_SUCH_HOST = "no-such-host.invalid"  # RFC 6761: never resolves


def _other_interface() -> tuple[str, str] | None:
    """A non-loopback interface of this machine with an IPv4 address, or None."""
    for _, name in socket.if_nameindex():
        address = interface_address(name)
        if name != "lo" and address and not address.startswith("127."):
            return name, address
    return None


# --- the interface gloo binds to --------------------------------------------------------
def test_a_loopback_master_addr_picks_lo() -> None:
    assert local_address_towards("127.0.0.1", 29500) == "127.0.0.1"
    assert interface_address("lo") == "127.0.0.1"
    assert interface_with_address("127.0.0.1") == "lo"
    assert gloo_interface({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29511"}) == "lo"


def test_the_master_addrs_own_interface_is_picked_when_it_is_not_loopback() -> None:
    other = _other_interface()
    if other is None:
        pytest.skip("this machine has no non-loopback IPv4 interface")
    name, address = other

    assert gloo_interface({"MASTER_ADDR": address}) == name


def test_choosing_sets_gloo_socket_ifname_in_the_environment() -> None:
    env = {"MASTER_ADDR": "127.0.0.1"}

    assert choose_gloo_interface(env) == "lo"
    assert env == {"MASTER_ADDR": "127.0.0.1", "GLOO_SOCKET_IFNAME": "lo"}


def test_an_existing_gloo_socket_ifname_is_kept() -> None:
    env = {"MASTER_ADDR": "127.0.0.1", "GLOO_SOCKET_IFNAME": "ib0"}

    assert gloo_interface(env) is None
    assert choose_gloo_interface(env) is None
    assert env["GLOO_SOCKET_IFNAME"] == "ib0"


@pytest.mark.parametrize("env", [{}, {"MASTER_ADDR": ""}, {"MASTER_PORT": "29500"}])
def test_without_master_addr_nothing_is_chosen(env: dict[str, str]) -> None:
    before = dict(env)

    assert gloo_interface(env) is None
    assert choose_gloo_interface(env) is None
    assert env == before


def test_an_unresolvable_master_addr_chooses_nothing() -> None:
    env = {"MASTER_ADDR": NO_SUCH_HOST}

    assert local_address_towards(NO_SUCH_HOST, 29500) is None
    assert choose_gloo_interface(env) is None
    assert "GLOO_SOCKET_IFNAME" not in env


def test_unknown_interfaces_and_addresses_are_none() -> None:
    assert interface_address("nosuchif0") is None
    assert interface_with_address("203.0.113.77") is None  # TEST-NET-3: on no interface


# --- the node a worker names ------------------------------------------------------------
def test_node_name_prefers_slurms_name_for_the_node() -> None:
    assert node_name({"SLURMD_NODENAME": "mrl-node2"}) == "mrl-node2"
    assert node_name({}) == socket.gethostname()
    assert node_name({"SLURMD_NODENAME": ""}) == socket.gethostname()


def test_a_worker_record_says_who_and_where_the_worker_is() -> None:
    env = {"SLURMD_NODENAME": "node2", "SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0"}
    record = worker_record("qwen", 1, "cpu", env, now=1700000000.5)

    assert record == {
        "policy": "qwen",
        "rank": 1,
        "node": "node2",
        "pid": os.getpid(),
        "device": "cpu",
        "slurm_job_id": "42",
        "slurm_step_id": "0",
        "started_at": 1700000000.5,
    }
    outside = worker_record("qwen", 0, "cuda:0", {})
    assert outside["node"] == socket.gethostname()
    assert (outside["slurm_job_id"], outside["slurm_step_id"]) == ("", "")
    assert isinstance(outside["started_at"], float)


# --- the records in the run directory ---------------------------------------------------
def test_worker_records_round_trip_through_the_run_directory(tmp_path: Path) -> None:
    qwen = worker_record("qwen", 1, "cpu", {"SLURMD_NODENAME": "vm"}, now=1.0)
    gpt2 = worker_record("gpt2", 2, "cpu", {"SLURMD_NODENAME": "node2"}, now=2.0)

    path = write_worker_record(tmp_path, qwen)
    write_worker_record(tmp_path, gpt2)

    assert path == tmp_path / "workers" / "qwen.json"
    assert read_worker_records(tmp_path) == {"gpt2": gpt2, "qwen": qwen}
    assert sorted(p.name for p in (tmp_path / "workers").iterdir()) == ["gpt2.json", "qwen.json"]


def test_a_resumed_worker_replaces_its_record(tmp_path: Path) -> None:
    write_worker_record(tmp_path, worker_record("qwen", 1, "cpu", {"SLURMD_NODENAME": "vm"}))
    write_worker_record(tmp_path, worker_record("qwen", 1, "cpu", {"SLURMD_NODENAME": "node3"}))

    records = read_worker_records(tmp_path)
    assert list(records) == ["qwen"] and records["qwen"]["node"] == "node3"
    assert [p.name for p in (tmp_path / "workers").iterdir()] == ["qwen.json"]


def test_unreadable_records_are_skipped(tmp_path: Path) -> None:
    good = worker_record("gpt2", 2, "cpu", {"SLURMD_NODENAME": "node2"}, now=3.0)
    write_worker_record(tmp_path, good)
    workers = tmp_path / "workers"
    (workers / "half.json").write_text('{"policy": "qw')
    (workers / "list.json").write_text('["qwen"]')
    (workers / "nameless.json").write_text('{"node": "vm"}')
    (workers / "numbered.json").write_text('{"policy": 3, "node": "vm"}')
    (workers / "binary.json").write_bytes(b"\xff\xfe\x00")
    (workers / "llama.json.partial").write_text(json.dumps({"policy": "llama"}))

    assert read_worker_records(tmp_path) == {"gpt2": good}


def test_a_run_directory_without_workers_has_no_records(tmp_path: Path) -> None:
    assert read_worker_records(tmp_path) == {}
    assert read_worker_records(tmp_path / "missing") == {}


# --- the trainer writes its record ------------------------------------------------------
def test_run_worker_writes_its_record_before_training(
    zoo_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A real run_worker (one-worker gloo group on loopback) with the training loop
    # replaced: the record must be on disk by the time training starts.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    for name in ("MRL_DEVICES_BY_RANK", "MRL_MEMORY_FRACTION_BY_RANK", "GLOO_SOCKET_IFNAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", port)
    monkeypatch.setenv("SLURMD_NODENAME", "mrl-node2")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    options = dataclasses.replace(_options(zoo_dir), run_dir=tmp_path)
    seen: dict[str, Any] = {}

    def train(rank: int, *args: Any) -> None:
        seen.update(rank=rank, records=read_worker_records(tmp_path))

    monkeypatch.setattr(trainer_run, "_train", train)
    stop_handler = signal.getsignal(trainer_run.STOP_SIGNAL)
    threads = torch.get_num_threads()
    try:
        trainer_run.run_worker(0, 1, options, FakeRuntime(available=False))
    finally:
        signal.signal(trainer_run.STOP_SIGNAL, stop_handler)
        torch.set_num_threads(threads)

    assert seen["rank"] == 0
    record = seen["records"]["a"]
    assert {k: record[k] for k in ("policy", "rank", "node", "device", "slurm_job_id")} == {
        "policy": "a",
        "rank": 0,
        "node": "mrl-node2",
        "device": "cpu",
        "slurm_job_id": "4242",
    }
    assert record["pid"] == os.getpid()
    assert read_worker_records(tmp_path) == {"a": record}
    assert (tmp_path / rendezvous.WORKERS_DIR / "a.json").is_file()
