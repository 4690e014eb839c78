"""Where a worker is and how it reaches its peers: the network side of a pool that spans
nodes (issue 22).

torch.distributed's gloo backend binds each worker to the address its hostname resolves
to, unless ``GLOO_SOCKET_IFNAME`` names an interface. On many clusters (and on the dev
cluster, where this host's name resolves to 127.0.0.1) the hostname is the wrong
answer: peers on other nodes cannot reach it. :func:`gloo_interface` picks instead the
interface this node uses to reach the rendezvous (``MASTER_ADDR``, rank 0's node as
Slurm knows it), which is by construction one the other nodes can reach too.
:func:`worker_record` is what a worker writes about itself in the run directory
(``workers/<policy>.json``): the node it runs on (Slurm's name for it), its rank, pid
and device, which the scheduler's sync shows on the run page.

Linux only (``SIOCGIFADDR``); anywhere else :func:`gloo_interface` finds nothing and
gloo keeps its default.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import struct
import time
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SIOCGIFADDR = 0x8915
"""The ioctl that reads an interface's IPv4 address."""
WORKERS_DIR = "workers"
"""Under the run directory: one ``<policy>.json`` per worker (:func:`write_worker_record`)."""


def local_address_towards(host: str, port: int) -> str | None:
    """This machine's IPv4 address on the route to ``host`` (a UDP ``connect`` sends
    nothing; it only asks the kernel for the route), or None if ``host`` does not
    resolve or has no route."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((host, port))
            return str(probe.getsockname()[0])
    except OSError:
        return None


def interface_address(name: str) -> str | None:
    """The IPv4 address of interface ``name``, or None (no address, not Linux)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            packed = struct.pack("256s", name.encode()[:15])
            reply = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, packed)
    except OSError:
        return None
    return socket.inet_ntoa(reply[20:24])


def interface_with_address(address: str) -> str | None:
    """The name of the interface that holds ``address``, or None."""
    try:
        interfaces = socket.if_nameindex()
    except OSError:
        return None
    for _, name in interfaces:
        if interface_address(name) == address:
            return name
    return None


def gloo_interface(env: Mapping[str, str]) -> str | None:
    """The interface gloo should bind to: the one on the route to ``MASTER_ADDR``; None
    when ``GLOO_SOCKET_IFNAME`` is set already (the lab's choice wins), when there is no
    ``MASTER_ADDR``, or when the route's address is on no interface found."""
    if env.get("GLOO_SOCKET_IFNAME") or not env.get("MASTER_ADDR"):
        return None
    port = int(env.get("MASTER_PORT") or 29500)
    address = local_address_towards(env["MASTER_ADDR"], port)
    return interface_with_address(address) if address else None


def choose_gloo_interface(env: MutableMapping[str, str]) -> str | None:
    """Set ``GLOO_SOCKET_IFNAME`` in ``env`` from :func:`gloo_interface` (before the
    process group starts); returns what it set, None if it left ``env`` as it was."""
    interface = gloo_interface(env)
    if interface is not None:
        env["GLOO_SOCKET_IFNAME"] = interface
        log.info("gloo binds to %s (the route to MASTER_ADDR %s)", interface, env["MASTER_ADDR"])
    return interface


def node_name(env: Mapping[str, str]) -> str:
    """The node this worker runs on: Slurm's name for it (``SLURMD_NODENAME``) inside a
    Slurm step, else the hostname."""
    return env.get("SLURMD_NODENAME") or socket.gethostname()


def worker_record(
    policy: str, rank: int, device: str, env: Mapping[str, str], *, now: float | None = None
) -> dict[str, Any]:
    """What a worker says of itself: policy, rank, node, pid, device, Slurm job and
    step, and when it started (epoch seconds)."""
    return {
        "policy": policy,
        "rank": rank,
        "node": node_name(env),
        "pid": os.getpid(),
        "device": device,
        "slurm_job_id": env.get("SLURM_JOB_ID", ""),
        "slurm_step_id": env.get("SLURM_STEP_ID", ""),
        "started_at": time.time() if now is None else now,
    }


def write_worker_record(run_dir: Path, record: Mapping[str, Any]) -> Path:
    """Write ``record`` to ``run_dir/workers/<policy>.json`` (atomically: a reader never
    sees half a file; a resumed worker replaces its old record)."""
    directory = run_dir / WORKERS_DIR
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{record['policy']}.json"
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(dict(record), sort_keys=True))
    partial.replace(path)
    return path


def read_worker_records(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Every worker record of ``run_dir``, by policy; unreadable files are skipped."""
    records: dict[str, dict[str, Any]] = {}
    for path in sorted((run_dir / WORKERS_DIR).glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and isinstance(record.get("policy"), str):
            records[record["policy"]] = record
    return records
