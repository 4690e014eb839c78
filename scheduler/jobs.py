"""What a run's job is (:class:`JobSpec`) and the batch scripts that run it: the
training job (:func:`render_script`) and an evaluation job (:func:`render_eval_script`).

No user string reaches a shell unchecked: every field of a :class:`JobSpec` is validated
against a strict pattern when the spec is built, and every value in the rendered script
is additionally quoted with :func:`shlex.quote`. The run's config travels as a file path,
never inline; the ingestion token is read from a 0600 file in the run directory.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.mwra import PlacementPlan, SlurmRequest

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
SLURM_WORD = re.compile(r"^[A-Za-z0-9_.-]{0,64}$")  # partition, account, qos ("" = default)
TIME_LIMIT = re.compile(r"^(\d{1,3}-)?\d{1,3}:[0-5]\d:[0-5]\d$", re.ASCII)  # [D-]HH:MM:SS
PATH = re.compile(r"^/[A-Za-z0-9_./+-]{0,1000}$")  # absolute, no spaces or shell syntax
URL = re.compile(r"^https?://[A-Za-z0-9.-]+(:\d{1,5})?(/[A-Za-z0-9_./-]*)?$", re.ASCII)
CUDA_DEVICES = re.compile(r"^(\d{1,2}(,\d{1,2})*)?$", re.ASCII)
# \d is ASCII 0-9 in these (re.ASCII): a job script holds no other digits.
# A policy's share of its devices' memory, in (0, 1] with at most 4 decimals ("0.45",
# "1"); "" for none (no cap). MWRA rounds fractions down to 4 decimals.
MEMORY_FRACTION = re.compile(r"^(0\.(?!0*$)\d{1,4}|1(\.0{1,4})?)?$", re.ASCII)
FRACTION_DECIMALS = 4
EVAL_STEPS = re.compile(r"^(final|all|none|\d{1,9}(,\d{1,9}){0,99})$", re.ASCII)

# Seconds before the time limit at which Slurm signals the batch shell (USR1): the
# trainer checkpoints at the end of its step and the script requeues the job.
SIGNAL_LEAD_S = 120
# Slurm handles timers every 30 s or so: "the signal may be sent up to 60 seconds earlier
# than specified" (sbatch(1), --signal).
SIGNAL_SLACK_S = 60


class JobSpecError(ValueError):
    """A job field that fails its pattern; ``field`` names it."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name


@dataclass(frozen=True)
class JobSpec:
    """Everything a backend needs to start, watch and stop one run."""

    run_id: int
    name: str
    run_dir: Path
    """Absolute; holds config, token file, job script, logs, spool and checkpoints."""
    python: str
    """The cluster's Python with the trainer installed (absolute path)."""
    workdir: Path
    """Directory to run ``python -m trainer`` from (the repository checkout)."""
    ingest_url: str = ""
    n_policies: int = 1
    partition: str = ""
    account: str = ""
    qos: str = ""
    time_limit: str = "24:00:00"
    nodes: int = 1
    gpus_per_node: int = 0
    cpus_per_task: int = 1
    mem_gb: int = 4
    cuda_visible_devices: tuple[str, ...] = field(default_factory=tuple)
    """Per policy (rank order), from the MWRA plan; empty on CPU."""
    memory_fractions: tuple[str, ...] = field(default_factory=tuple)
    """Per policy (rank order), the share of its devices' memory it may use, from the MWRA
    plan (:func:`memory_fraction_text`): ``"0.45"``, ``"1"``, or ``""`` for no cap; empty
    on CPU. The script exports them as ``MRL_MEMORY_FRACTION_BY_RANK``."""
    node_by_rank: tuple[int, ...] = field(default_factory=tuple)
    """Per policy (rank order), the index of its node in the job's allocation, from the
    MWRA plan; empty for a one-node job. The script lays the tasks out by it
    (:func:`multinode_lines`)."""
    cpu_threads: int = 0
    """Intra-op threads of each worker of a CPU plan (its CPUs per task); 0: no CPU
    plan, the trainer shares the CPUs it may run on between the workers. The script
    exports it as ``MRL_CPU_THREADS_BY_RANK``."""
    zoo_dir: str = ""
    job_dir: Path | None = None
    """The job's own directory: script, log, exit code, pid (default ``<run_dir>/job``,
    the training job's; an evaluation job has ``<run_dir>/evals/job-<id>``)."""

    def __post_init__(self) -> None:
        _check(self.run_id >= 1, "run_id", "must be a positive integer")
        _match(NAME, self.name, "name", "1-64 letters, digits, _ . -")
        _match(PATH, str(self.run_dir), "run_dir", "an absolute path of [A-Za-z0-9_./+-]")
        _match(PATH, self.python, "python", "an absolute path of [A-Za-z0-9_./+-]")
        _match(PATH, str(self.workdir), "workdir", "an absolute path of [A-Za-z0-9_./+-]")
        if self.job_dir is not None:
            _match(PATH, str(self.job_dir), "job_dir", "an absolute path of [A-Za-z0-9_./+-]")
        if self.zoo_dir:
            _match(PATH, self.zoo_dir, "zoo_dir", "an absolute path of [A-Za-z0-9_./+-]")
        if self.ingest_url:
            _match(URL, self.ingest_url, "ingest_url", "an http(s) URL without query")
        for name in ("partition", "account", "qos"):
            _match(SLURM_WORD, getattr(self, name), name, "letters, digits, _ . - (<= 64)")
        _match(TIME_LIMIT, self.time_limit, "time_limit", "HH:MM:SS or D-HH:MM:SS")
        _check(1 <= self.n_policies <= 8, "n_policies", "a pool has 1 to 8 policies")
        _check(1 <= self.nodes <= 64, "nodes", "1 to 64 nodes")
        _check(0 <= self.gpus_per_node <= 16, "gpus_per_node", "0 to 16")
        _check(1 <= self.cpus_per_task <= 256, "cpus_per_task", "1 to 256")
        _check(
            type(self.cpu_threads) is int and 0 <= self.cpu_threads <= 256,
            "cpu_threads",
            "0 (no CPU plan) to 256",
        )
        _check(1 <= self.mem_gb <= 4096, "mem_gb", "1 to 4096")
        for devices in self.cuda_visible_devices:
            _match(CUDA_DEVICES, devices, "cuda_visible_devices", "comma-separated indices")
        _check(isinstance(self.memory_fractions, tuple), "memory_fractions", "a tuple of strings")
        if self.node_by_rank:
            _check(
                all(type(node) is int for node in self.node_by_rank),
                "node_by_rank",
                f"whole-number node indices; got {self.node_by_rank!r}",
            )
            _check(
                len(self.node_by_rank) == self.n_policies,
                "node_by_rank",
                f"one node per policy ({self.n_policies}); got {len(self.node_by_rank)}",
            )
            _check(
                sorted(set(self.node_by_rank)) == list(range(self.nodes)),
                "node_by_rank",
                f"node indices 0..{self.nodes - 1}, each used at least once",
            )
        else:
            _check(self.nodes == 1, "node_by_rank", "a job on several nodes places every rank")
        for fraction in self.memory_fractions:
            _match(
                MEMORY_FRACTION,
                fraction,
                "memory_fractions",
                'a fraction in (0, 1] with at most 4 decimals, like "0.45", or ""',
            )

    # --- files in the run directory ---------------------------------------------------
    @property
    def tasks_per_node(self) -> int:
        """The most ranks the plan puts on one node (what each node is asked to hold)."""
        if not self.node_by_rank:
            return self.n_policies
        return max(self.node_by_rank.count(node) for node in range(self.nodes))

    @property
    def config_path(self) -> Path:
        """The run's config (the training job's input)."""
        return self.run_dir / "job" / "config.json"

    @property
    def token_path(self) -> Path:
        """The run's ingestion token (0600): every job of the run ships with it."""
        return self.run_dir / "job" / "ingest-token"

    @property
    def own_dir(self) -> Path:
        """The directory of this job's script, log, exit code and pid."""
        return self.job_dir if self.job_dir is not None else self.run_dir / "job"

    @property
    def script_path(self) -> Path:
        return self.own_dir / "run.sbatch"

    @property
    def log_path(self) -> Path:
        """stdout and stderr of the job (both backends)."""
        return self.own_dir / "output.log"

    @property
    def exit_code_path(self) -> Path:
        """Written by the script when the trainer exits (the local backend reads it)."""
        return self.own_dir / "exit-code"


def _check(ok: bool, field_name: str, message: str) -> None:
    if not ok:
        raise JobSpecError(field_name, message)


def _match(pattern: re.Pattern[str], value: str, field_name: str, expected: str) -> None:
    if not isinstance(value, str) or pattern.fullmatch(value) is None:
        raise JobSpecError(field_name, f"{value!r} is not allowed; expected {expected}")


def memory_fraction_text(fraction: float | None) -> str:
    """A plan's ``memory_fraction`` as :attr:`JobSpec.memory_fractions` carries it: ``""``
    for None (a CPU worker: no cap), else rounded down to 4 decimals without trailing
    zeros (``0.45`` -> ``"0.45"``, ``1.0`` -> ``"1"``). A value outside (0, 1] gives text
    that :class:`JobSpec` refuses (``"0"``, ``"1.5"``), naming ``memory_fractions``."""
    if fraction is None:
        return ""
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        return str(fraction)  # refused by the pattern
    if not math.isfinite(fraction):
        return "nan"
    scale = 10**FRACTION_DECIMALS
    rounded = math.floor(fraction * scale + 1e-9) / scale
    return f"{rounded:.{FRACTION_DECIMALS}f}".rstrip("0").rstrip(".")


def time_limit_seconds(time_limit: str) -> int:
    """``[D-]HH:MM:SS`` (the pattern :class:`JobSpec` checks) in seconds."""
    days, _, clock = time_limit.rpartition("-")
    hours, minutes, seconds = (int(part) for part in clock.split(":"))
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


def signal_lead_seconds(time_limit: str) -> int | None:
    """How long before ``time_limit`` Slurm should send USR1 (checkpoint and requeue), or
    None for no signal.

    :data:`SIGNAL_LEAD_S`, but at most half the limit: a lead as long as the limit makes
    Slurm signal the job as soon as it starts, so every requeued attempt would stop at
    once. Limits of two minutes or less get no signal: the signal may come up to a minute
    early, i.e. at the start, and a requeue is held two minutes by Slurm; such a job runs
    to its limit and the status sync resubmits it, resuming from its last checkpoint.
    """
    limit = time_limit_seconds(time_limit)
    if limit <= 2 * SIGNAL_SLACK_S:
        return None
    return min(SIGNAL_LEAD_S, limit // 2)


def sbatch_args(request: SlurmRequest) -> list[str]:
    """An MWRA plan's Slurm request as ``sbatch`` arguments (an argv list, never a shell
    string): ``["--nodes=1", "--ntasks=2", "--gres=gpu:4", "--cpus-per-task=2",
    "--mem=32G"]``; no ``--gres`` for a CPU-only job, no ``--mem`` without a memory
    request. A job on several nodes asks every node for room for the plan's most tasks
    on one node (``--ntasks-per-node``, with ``--ntasks`` = nodes x that), so that the
    step can put each rank on its planned node (:func:`multinode_lines`). The plan's
    Slurm request as the compose preview and the experiment page
    show it."""
    args = [f"--nodes={request.nodes}", f"--ntasks={request.ntasks}"]
    if request.nodes > 1:
        args = [
            f"--nodes={request.nodes}",
            f"--ntasks={request.nodes * max(request.tasks_per_node)}",
            f"--ntasks-per-node={max(request.tasks_per_node)}",
        ]
    if request.gres:
        args.append(f"--gres={request.gres}")
    args.append(f"--cpus-per-task={request.cpus_per_task}")
    if request.mem_gb:
        args.append(f"--mem={request.mem_gb}G")
    return args


def placement_fields(plan: PlacementPlan | None, *, slurm: bool = True) -> dict[str, Any]:
    """The :class:`JobSpec` fields that come from an MWRA plan: nodes, GPUs per node,
    CPUs per task, per-rank devices and memory fractions (none on the CPU), and each
    rank's node when the job spans several (a Slurm job only: the local backend is one
    machine), and a CPU plan's threads per worker (its CPUs per task). ``plan`` None: one
    node, one CPU per task."""
    if plan is None:
        return {"nodes": 1, "gpus_per_node": 0, "cpus_per_task": 1}
    on_gpu = plan.device != "cpu"
    spans_nodes = slurm and plan.slurm.nodes > 1
    fields = {} if on_gpu else {"cpu_threads": plan.slurm.cpus_per_task}
    return {
        **fields,
        "nodes": plan.slurm.nodes if spans_nodes else 1,
        "gpus_per_node": plan.slurm.gpus_per_node,
        "cpus_per_task": plan.slurm.cpus_per_task,
        "cuda_visible_devices": (
            tuple(p.cuda_visible_devices for p in plan.policies) if on_gpu else ()
        ),
        "memory_fractions": (
            tuple(memory_fraction_text(p.memory_fraction) for p in plan.policies) if on_gpu else ()
        ),
        "node_by_rank": tuple(p.node or 0 for p in plan.policies) if spans_nodes else (),
    }


def placement_json(plan: PlacementPlan) -> dict[str, Any]:
    """``plan`` as an experiment stores it (``resources["placement"]``):
    :meth:`trainer.mwra.PlacementPlan.to_dict` with the request's :func:`sbatch_args`
    as ``slurm.sbatch_args`` (which the experiment page shows)."""
    data = plan.to_dict()
    data["slurm"]["sbatch_args"] = sbatch_args(plan.slurm)
    return data


def render_script(spec: JobSpec, *, slurm: bool) -> str:
    """The bash script that runs the trainer for ``spec`` (a Slurm batch script if ``slurm``).

    It resumes from the run directory's last checkpoint whenever the run directory holds
    a run already (a requeue or a resubmission), and writes the trainer's exit status to
    ``exit-code``. Under Slurm it traps the pre-time-limit USR1, forwards it to the
    trainer (which checkpoints and exits) and requeues the job.

    The resource request (:func:`sbatch_header`) follows one rule: GPUs are asked for per
    node, ``--gres=gpu:<gpus_per_node>`` (none on a CPU job), and CPUs per task,
    ``--cpus-per-task=<cpus_per_task>``, both from the MWRA plan's Slurm request (which
    computes the CPUs per task from ``cpus_per_gpu`` x the node's GPUs over the node's
    tasks, or from ``cpus``). The script never asks for ``--gpus``, ``--gpus-per-task``,
    ``--gpus-per-node`` or ``--cpus-per-gpu``: the plan's policies need different numbers
    of devices (or share one), so there is no one per-task GPU count, the devices of each
    rank are the plan's (``MRL_DEVICES_BY_RANK``, local indices of the node's allocated
    GPUs) rather than Slurm's per-task binding, and Slurm refuses ``--cpus-per-gpu``
    beside ``--cpus-per-task``.

    The plan's placement reaches each rank through two variables, rank ``i``'s value
    being the ``i``-th ``;``-separated field: ``MRL_DEVICES_BY_RANK`` (``"0,1;2;2"``) and,
    when some policy has a memory fraction, ``MRL_MEMORY_FRACTION_BY_RANK``
    (``"1;0.6;0.4"``; an empty field: no cap). A CPU job exports ``OMP_WAIT_POLICY=PASSIVE``
    and, from a CPU plan, ``MRL_CPU_THREADS_BY_RANK`` (each rank's intra-op threads).
    """
    q = shlex.quote
    lines = ["#!/bin/bash"]
    if slurm:
        lines += sbatch_header(spec, ntasks=spec.n_policies, requeue=True)
    run_dir = q(str(spec.run_dir))
    lines += [
        "set -uo pipefail",
        f"cd {q(str(spec.workdir))}",
        f"RUN_DIR={run_dir}",
        'export MRL_INGEST_TOKEN="$(cat "$RUN_DIR/job/ingest-token" 2>/dev/null || true)"',
    ]
    if spec.zoo_dir:
        lines.append(f"export MRL_ZOO_DIR={q(spec.zoo_dir)}")
    args = [
        q(spec.python),
        "-m",
        "trainer",
        "run",
        "--config",
        q(str(spec.config_path)),
        "--run-dir",
        '"$RUN_DIR"',
    ]
    if spec.ingest_url:
        args += ["--ingest-url", q(spec.ingest_url)]
    lines += [
        "resume=()",
        '[[ -e "$RUN_DIR/config.json" ]] && resume=(--resume)',
        'echo "[job] run ' + str(spec.run_id) + ' starting on $(hostname) ${resume[*]:-}"',
    ]
    trainer = " ".join(args) + ' "${resume[@]}"'
    if spec.cuda_visible_devices:
        # The MWRA plan: rank i's devices are the i-th ';'-separated entry; the trainer
        # sets its own CUDA_VISIBLE_DEVICES from it before touching CUDA.
        lines.append(f"export MRL_DEVICES_BY_RANK={q(';'.join(spec.cuda_visible_devices))}")
    if not spec.cuda_visible_devices:
        # A CPU job: idle OpenMP threads sleep rather than spin (set before torch
        # loads; an administrator's own setting wins), and each worker runs the plan's
        # CPUs per task as intra-op threads.
        lines.append('export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"')
        if spec.cpu_threads:
            threads = ";".join([str(spec.cpu_threads)] * spec.n_policies)
            lines.append(f"export MRL_CPU_THREADS_BY_RANK={q(threads)}")
    if any(spec.memory_fractions):
        # Rank i caps its CUDA memory at the i-th entry (a share of each of its devices,
        # co-located policies' shares summing to at most 1); "" leaves it uncapped.
        fractions = ";".join(spec.memory_fractions)
        lines.append(f"export MRL_MEMORY_FRACTION_BY_RANK={q(fractions)}")
    if slurm and spec.n_policies > 1:
        # One task per policy, each on its planned node; rank 0's node is the rendezvous.
        lines += multinode_lines(spec)
        srun = "srun --kill-on-bad-exit=1"
        if spec.node_by_rank:
            srun += f" --distribution=arbitrary --ntasks={spec.n_policies}"
        trainer = f"{srun} {trainer}"
    lines += [
        f"{trainer} &",
        "child=$!",
    ]
    if slurm:
        lines += [
            # Near the time limit: let the trainer checkpoint, then put the job back in
            # the queue; the requeued job resumes from that checkpoint.
            "on_usr1() {",
            '  echo "[job] time limit near: checkpoint and requeue"',
            '  kill -USR1 "$child" 2>/dev/null',
            '  wait "$child"',
            '  scontrol requeue "$SLURM_JOB_ID"',
            "  exit 0",
            "}",
            "trap on_usr1 USR1",
        ]
    lines += wait_for_child(spec, "trainer")
    return "\n".join(lines) + "\n"


RENDEZVOUS_PORT_BASE = 20000
RENDEZVOUS_PORT_SPAN = 20000
"""A multi-policy Slurm job's torch.distributed rendezvous listens on rank 0's node at
``RENDEZVOUS_PORT_BASE + job id % RENDEZVOUS_PORT_SPAN`` (20000-39999): the nodes must
reach each other on that range (and on the ephemeral ports gloo connects on)."""


def multinode_lines(spec: JobSpec) -> list[str]:
    """The script lines that place a multi-policy Slurm job's ranks and name its
    rendezvous.

    ``hosts`` is the allocation as Slurm lists it (``scontrol show hostnames``: the node
    indices of the MWRA plan). For a job on several nodes, rank ``i`` runs on
    ``hosts[node_by_rank[i]]``: the script writes that list to ``$RUN_DIR/job/
    hosts-<job id>`` and ``srun --distribution=arbitrary`` reads it as
    ``SLURM_HOSTFILE`` (Slurm's block layout would fill the nodes in rank order, which is
    not the plan's). ``MASTER_ADDR`` is rank 0's node's address as Slurm knows it (its
    ``NodeAddr``), so every node reaches the rendezvous whatever the hostname resolves to
    there; ``MASTER_PORT`` is from :data:`RENDEZVOUS_PORT_BASE`. Both lists are quoted
    integers only; nothing of the user's reaches these lines.
    """
    lines = ['mapfile -t hosts < <(scontrol show hostnames "$SLURM_JOB_NODELIST")']
    if spec.node_by_rank:
        nodes = " ".join(str(node) for node in spec.node_by_rank)
        lines += [
            f"node_by_rank=({nodes})",
            'hostfile="$RUN_DIR/job/hosts-$SLURM_JOB_ID"',
            'for node in "${node_by_rank[@]}"; do echo "${hosts[$node]}"; done > "$hostfile"',
            'export SLURM_HOSTFILE="$hostfile"',
            # The batch environment's per-node count is the allocation's, not this step's.
            "unset SLURM_NTASKS_PER_NODE",
            'rank0_host="${hosts[${node_by_rank[0]}]}"',
            'echo "[job] ranks on nodes: $(paste -sd, "$hostfile")"',
        ]
    else:
        lines.append('rank0_host="${hosts[0]}"')
    lines += [
        'MASTER_ADDR="$(sinfo -h -N -n "$rank0_host" -o %o | head -n 1)"',
        'export MASTER_ADDR="${MASTER_ADDR:-$rank0_host}"',
        f"export MASTER_PORT=$(({RENDEZVOUS_PORT_BASE} + SLURM_JOB_ID % {RENDEZVOUS_PORT_SPAN}))",
    ]
    return lines


def wait_for_child(spec: JobSpec, what: str) -> list[str]:
    """The script's end: pass TERM/INT on to the backgrounded ``$child``, wait for it,
    write its exit status to the job's ``exit-code`` and exit with it."""
    return [
        "trap 'kill -TERM \"$child\" 2>/dev/null' TERM INT",
        'wait "$child"',
        "status=$?",
        # wait returns 128+n when interrupted by a trapped signal; wait again for the end.
        'while kill -0 "$child" 2>/dev/null; do wait "$child"; status=$?; done',
        f'echo "$status" > {shlex.quote(str(spec.exit_code_path))}',
        f'echo "[job] {what} exited with $status"',
        'exit "$status"',
    ]


def sbatch_header(spec: JobSpec, *, ntasks: int, requeue: bool) -> list[str]:
    """The ``#SBATCH`` lines of ``spec``'s batch script; ``requeue``: the training job's
    ``--requeue`` and its pre-time-limit USR1 (an evaluation job is simply run again).

    GPUs per node (``--gres=gpu:N``, none without GPUs) and CPUs per task
    (``--cpus-per-task``), never a per-task or per-GPU form of either (see
    :func:`render_script`)."""
    q = shlex.quote
    lines = [
        f"#SBATCH --job-name={q('mrl-' + spec.name)}",
        f"#SBATCH --output={q(str(spec.log_path))}",
        "#SBATCH --open-mode=append",
        f"#SBATCH --nodes={spec.nodes}",
        f"#SBATCH --ntasks={ntasks}",
    ]
    if spec.nodes > 1:
        lines[-1] = f"#SBATCH --ntasks={spec.nodes * spec.tasks_per_node}"
        lines.append(f"#SBATCH --ntasks-per-node={spec.tasks_per_node}")
    lines += [
        f"#SBATCH --cpus-per-task={spec.cpus_per_task}",
        f"#SBATCH --mem={spec.mem_gb}G",
        f"#SBATCH --time={q(spec.time_limit)}",
    ]
    if requeue:
        lines.append("#SBATCH --requeue")
        lead = signal_lead_seconds(spec.time_limit)
        if lead is not None:
            lines.append(f"#SBATCH --signal=B:USR1@{lead}")
    if spec.gpus_per_node:
        lines.append(f"#SBATCH --gres=gpu:{spec.gpus_per_node}")
    for option in ("partition", "account", "qos"):
        if getattr(spec, option):
            lines.append(f"#SBATCH --{option}={q(getattr(spec, option))}")
    return lines


@dataclass(frozen=True)
class EvalCommand:
    """What an evaluation job evaluates: ``python -m trainer eval-run``'s arguments."""

    suite_path: Path
    """The suite JSON in the job directory."""
    steps: str = "final"
    """``final``, ``all``, ``none`` or a comma list of checkpoint steps."""
    include_base: bool = True
    """Also the pool's base models (recorded at step 0)."""
    device: str = "cpu"

    def __post_init__(self) -> None:
        _match(PATH, str(self.suite_path), "suite_path", "an absolute path of [A-Za-z0-9_./+-]")
        _match(EVAL_STEPS, self.steps, "steps", "final, all, none or steps like 20,40")
        _check(self.device in ("cpu", "cuda"), "device", "cpu or cuda")
        _check(self.include_base or self.steps != "none", "steps", "nothing to evaluate")

    def argv(self) -> list[str]:
        args = ["--suite", str(self.suite_path), "--steps", self.steps, "--device", self.device]
        return [*args, "--base"] if self.include_base else args


def render_eval_script(spec: JobSpec, command: EvalCommand, *, slurm: bool) -> str:
    """The bash script of an evaluation job: ``python -m trainer eval-run`` over the run
    directory, writing its results under the job directory and shipping them to the
    run's ingestion endpoint with the run's token; its exit status goes to the job's
    ``exit-code`` like a training job's. One task, no requeue: an evaluation that did not
    finish is simply launched again (its shipped points are idempotent)."""
    q = shlex.quote
    lines = ["#!/bin/bash"]
    if slurm:
        lines += sbatch_header(spec, ntasks=1, requeue=False)
    lines += [
        "set -uo pipefail",
        f"cd {q(str(spec.workdir))}",
        f"RUN_DIR={q(str(spec.run_dir))}",
        f'export MRL_INGEST_TOKEN="$(cat {q(str(spec.token_path))} 2>/dev/null || true)"',
    ]
    if spec.zoo_dir:
        lines.append(f"export MRL_ZOO_DIR={q(spec.zoo_dir)}")
    if command.device == "cpu":  # idle OpenMP threads sleep, as a CPU training job's
        lines.append('export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"')
    args = [spec.python, "-m", "trainer", "eval-run", "--run-dir", str(spec.run_dir)]
    args += [*command.argv(), "--out-dir", str(spec.own_dir / "results")]
    if spec.ingest_url:
        args += ["--ingest-url", spec.ingest_url]
    lines += [
        f'echo "[job] evaluation {spec.name} starting on $(hostname)"',
        " ".join(q(arg) for arg in args) + " &",
        "child=$!",
        *wait_for_child(spec, "evaluation"),
    ]
    return "\n".join(lines) + "\n"
