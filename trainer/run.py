"""A training run: pre-flight checks, the run directory, and one worker per policy.

``launch`` either starts one local process per policy (the CLI on a laptop or a single
node; forked for a CPU job) or, under ``torchrun``/``srun``, runs this process's worker
(rank and world size from the environment). Workers meet in torch.distributed (gloo) and
step in lockstep through the Shared Experience Exchange; rank 0 writes the spool and ships
it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import signal
import socket
import threading
import time
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from trainer import devices, rendezvous
from trainer import metrics as m
from trainer.checkpoint import (
    REFERENCE_FILE,
    CheckpointState,
    checkpoint_dir,
    latest_checkpoint,
    load_policy,
    load_weights,
    load_worker_state,
    save_policy,
    save_weights,
    save_worker_state,
    write_state,
)
from trainer.config import ConfigError, PolicyConfig, RunConfig, scoring_summary
from trainer.devices import DeviceError, DeviceRuntime, TorchCuda, WorkerDevice
from trainer.exchange import SharedExperienceExchange, StepRecord
from trainer.models import ModelSourceError, check_model_source
from trainer.mwra_counting import parameter_count
from trainer.policy import Policy
from trainer.regimes import make_regime
from trainer.regimes.base import Regime
from trainer.remix import Consumption, self_reflection_rate
from trainer.remix.reuse import ReMix
from trainer.shipper import Shipper
from trainer.spool import Spool, SpoolOffsets, make_point
from trainer.tasks import Problem, Task, make_task, run_scoring
from trainer.tasks.few_shot import prompt_context
from trainer.zoo import resolve_model_source

log = logging.getLogger("trainer.run")
CONFIG_FILE = "config.json"
"""The run config a run directory holds (written on the first start, checked on resume)."""


class RunSetupError(RuntimeError):
    """The run cannot start; the message says why and how to fix it."""


@dataclass
class RunOptions:
    """Everything a worker needs, resolved before any worker starts."""

    config: RunConfig
    run_dir: Path
    steps: int
    resume: bool
    model_dirs: dict[str, tuple[Path, Path]]
    """Policy name -> (model directory, tokenizer directory)."""
    ingest_url: str | None = None
    token: str | None = None
    ship_timeout_s: float = 60.0
    """How long a stopped run (checkpoint and requeue) ships before it exits; the
    requeued job ships the rest."""
    final_ship_timeout_s: float = 600.0
    """How long the end of a run waits for the web app to take the rest of the spool: no
    later job will ship it, so a restart or deploy of the app must be waited out."""


def policy_sources(policy: PolicyConfig, zoo_dir: Path | None) -> tuple[Path, Path]:
    """``(model_dir, tokenizer_dir)`` of ``policy``, checked; :class:`ModelSourceError`
    says how to fix a source that cannot be used."""
    model_dir = resolve_model_source(policy.model, zoo_dir)
    tokenizer_dir = (
        resolve_model_source(policy.tokenizer, zoo_dir) if policy.tokenizer else model_dir
    )
    check_model_source(model_dir, tokenizer_dir)
    return model_dir, tokenizer_dir


def resolve_models(config: RunConfig, zoo_dir: Path | None) -> dict[str, tuple[Path, Path]]:
    """Resolve and check every policy's model and tokenizer; report all problems at once."""
    resolved: dict[str, tuple[Path, Path]] = {}
    problems: list[str] = []
    for index, policy in enumerate(config.pool):
        try:
            resolved[policy.name] = policy_sources(policy, zoo_dir)
        except ModelSourceError as exc:
            problems.append(f"pool[{index}] ({policy.name}): {exc}")
    if problems:
        raise RunSetupError("cannot load the pool's models:\n  " + "\n  ".join(problems))
    return resolved


def prepare_run_dir(run_dir: Path, config: RunConfig, *, resume: bool) -> None:
    """Create ``run_dir`` with ``config.json``, or check it matches when resuming."""
    config_file = run_dir / CONFIG_FILE
    if resume:
        if not config_file.exists():
            raise RunSetupError(f"--resume: {run_dir} holds no run (no config.json)")
        stored = json.loads(config_file.read_text())
        with contextlib.suppress(ConfigError):  # unreadable: compared as stored (differs)
            # Fields added since the run started read as their defaults (what it ran with).
            stored = RunConfig.from_dict(stored).to_dict()
        if stored != config.to_dict():
            raise RunSetupError(
                f"--resume: the config differs from {config_file}; resume with the run's own "
                "config (or start a new --run-dir)"
            )
        return
    if latest_checkpoint(run_dir) is not None or (run_dir / "metrics.jsonl").exists():
        raise RunSetupError(
            f"{run_dir} already holds a run; pass --resume to continue it or choose a new --run-dir"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    config_file.write_text(config.to_json())


def launch(options: RunOptions) -> None:
    """Run every worker: spawned here, or this process's one under torchrun/srun."""
    world_size = len(options.config.pool)
    env_rank = distributed_rank_from_env()
    if env_rank is not None:
        rank, env_world = env_rank
        if env_world != world_size:
            raise RunSetupError(
                f"the launcher started {env_world} processes but the pool has {world_size} "
                "policies; start one process per policy"
            )
        run_worker(rank, world_size, options)
        return
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(_free_port())
    # Spawned workers inherit it before they load torch (forked ones: the CLI set it first).
    prepare_cpu_workers()
    if world_size == 1:
        run_worker(0, 1, options)
    else:
        context = mp.start_processes(
            _spawned_worker,
            args=(world_size, options),
            nprocs=world_size,
            start_method=worker_start_method(os.environ),
            join=False,
        )

        def forward(signum: int, frame: object) -> None:
            for process in context.processes:
                if process.pid is not None and process.is_alive():
                    os.kill(process.pid, signum)

        signal.signal(STOP_SIGNAL, forward)
        while not context.join():
            pass


def worker_start_method(env: Mapping[str, str]) -> str:
    """How :func:`launch` starts its local workers: ``"fork"`` for a CPU job, whose
    workers then share the torch and transformers this process has already imported
    (about 5 CPU-seconds each to import afresh: 15.2 -> 7.3 s wall for a 3-policy
    2-step run on two cores, bench/worker_start.py), ``"spawn"`` for a job with GPUs
    (CUDA cannot be used in a forked child). Nothing before the fork runs a torch
    kernel, so no OpenMP pool is inherited; each worker seeds and sizes its own threads.
    Only the CLI calls :func:`launch`, before any tensor is computed in its process."""
    return "fork" if devices.is_cpu_job(env) else "spawn"


def _spawned_worker(rank: int, world_size: int, options: RunOptions) -> None:
    # force: a forked worker inherits the launcher's logging set-up.
    logging.basicConfig(
        level=logging.INFO, format=f"[rank {rank}] %(levelname)s %(message)s", force=True
    )
    run_worker(rank, world_size, options)


def distributed_rank_from_env() -> tuple[int, int] | None:
    """(rank, world size) under torchrun (RANK/WORLD_SIZE) or a multi-task srun step."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if "SLURM_STEP_ID" in os.environ and int(os.environ.get("SLURM_NTASKS", "1")) > 1:
        if "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ:
            raise RunSetupError("under srun, set MASTER_ADDR and MASTER_PORT (the job script does)")
        return int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)


STOP_SIGNAL = signal.SIGUSR1
"""Slurm sends it before the time limit (``--signal``): checkpoint after this step, exit."""
_stop_requested = threading.Event()


def _request_stop(signum: int, frame: object) -> None:
    _stop_requested.set()


def _all_agree_to_stop() -> bool:
    """Whether any worker got the stop signal (a collective: all stop at the same step)."""
    flag = torch.tensor([1 if _stop_requested.is_set() else 0])
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def apply_device_plan(rank: int) -> None:
    """Set this worker's ``CUDA_VISIBLE_DEVICES`` from the MWRA plan the job exported
    (``MRL_DEVICES_BY_RANK``: rank i's devices are the i-th ';'-separated entry), before
    anything touches CUDA in this process."""
    try:
        visible = devices.visible_devices(rank, os.environ)
    except DeviceError as exc:
        raise RunSetupError(str(exc)) from exc
    if visible is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity: a Slurm task's ``--cpus-per-task``,
    a cgroup's cpuset), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0)) or (os.cpu_count() or 1)
    except AttributeError:  # no sched_getaffinity (macOS)
        return os.cpu_count() or 1


def worker_threads(
    rank: int, world_size: int, worker: WorkerDevice, env: Mapping[str, str] | None = None
) -> int:
    """Rank ``rank``'s intra-op threads: on the CPU its plan's
    (:func:`trainer.devices.cpu_threads`: ``MRL_CPU_THREADS_BY_RANK``, else its share of
    :func:`available_cpus`); on a GPU the machine's CPUs over the world size, as before."""
    if worker.is_cuda:
        return max(1, (os.cpu_count() or 1) // world_size)
    try:
        return devices.cpu_threads(
            rank, world_size, os.environ if env is None else env, available_cpus()
        )
    except DeviceError as exc:
        raise RunSetupError(str(exc)) from exc


def prepare_cpu_workers(env: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Add :data:`trainer.devices.CPU_WORKER_ENV` (idle OpenMP threads sleep) to ``env``
    (``os.environ``) when the job runs on the CPU only; return what was added. Call it
    before torch loads in the worker's process: the CLI does before importing this module,
    :func:`launch` before spawning workers (a spawned process loads torch afresh)."""
    target = os.environ if env is None else env
    added = devices.cpu_worker_env(target)
    target.update(added)
    return added


def place_worker(
    rank: int, options: RunOptions, runtime: DeviceRuntime, env: Mapping[str, str] | None = None
) -> WorkerDevice:
    """Enact the plan for policy ``rank`` (issue 21): choose its device
    (:func:`trainer.devices.choose_device`), cap its memory at its planned share
    (``MRL_MEMORY_FRACTION_BY_RANK``) and check that the policy fits in that share, all
    before anything is built. :class:`RunSetupError` says what is wrong and how to fix it."""
    policy = options.config.pool[rank]
    try:
        worker = devices.choose_device(rank, os.environ if env is None else env, runtime)
        devices.apply(worker, runtime)
        if worker.is_cuda:
            count = parameter_count(str(options.model_dirs[policy.name][0]))
            if count.origin == "fallback":
                log.warning("%s: fit check skipped: %s", policy.name, count.note)
            else:
                devices.fit_check(
                    policy.name,
                    count.value,
                    policy.dtype,
                    worker,
                    runtime,
                    reference_on_cpu=policy.reference_on_cpu,
                )
    except DeviceError as exc:
        raise RunSetupError(str(exc)) from exc
    log.info("%s runs on %s", policy.name, worker.device)
    return worker


def run_worker(
    rank: int, world_size: int, options: RunOptions, runtime: DeviceRuntime | None = None
) -> None:
    """The training loop of policy ``rank``."""
    config = options.config
    apply_device_plan(rank)
    runtime = TorchCuda() if runtime is None else runtime
    worker = place_worker(rank, options, runtime)
    record = rendezvous.worker_record(config.pool[rank].name, rank, str(worker.device), os.environ)
    rendezvous.write_worker_record(options.run_dir, record)
    log.info("%s (rank %d) runs on node %s", record["policy"], rank, record["node"])
    signal.signal(STOP_SIGNAL, _request_stop)
    torch.set_num_threads(worker_threads(rank, world_size, worker))
    if not worker.is_cuda:
        log.info(
            "%s: %d intra-op threads, %s=%s",
            record["policy"],
            torch.get_num_threads(),
            devices.WAIT_POLICY_ENV,
            os.environ.get(devices.WAIT_POLICY_ENV, "(OpenMP's default)"),
        )
    if world_size > 1:
        # Peers on other nodes must reach this one: bind gloo to the route to rank 0.
        rendezvous.choose_gloo_interface(os.environ)
    if not dist.is_initialized():
        dist.init_process_group(
            "gloo", rank=rank, world_size=world_size, timeout=timedelta(minutes=30)
        )
    try:
        _train(rank, config, options, worker, runtime)
    finally:
        dist.destroy_process_group()


def _train(
    rank: int,
    config: RunConfig,
    options: RunOptions,
    worker: WorkerDevice | None = None,
    runtime: DeviceRuntime | None = None,
) -> None:
    worker = WorkerDevice("cpu") if worker is None else worker
    runtime = TorchCuda() if runtime is None else runtime
    policy_config = config.pool[rank]
    _seed_everything(config.seed * 1000 + rank)
    task = make_task(config.task, seed=config.seed)
    scoring = run_scoring(config)
    if rank == 0:
        log.info("scoring: %s", scoring_summary(config))
    model_dir, tokenizer_dir = options.model_dirs[policy_config.name]
    policy = Policy(
        policy_config,
        config.grpo,
        model_dir=model_dir,
        tokenizer_dir=tokenizer_dir,
        reward_fn=scoring.reward_fn(),
        success_threshold=config.success_threshold,
        device=worker.device,
        objective=config.objective,
        prompt_context=prompt_context(config.task, task),
        finished_only=scoring.finished_only,
    )
    tokenizer_dirs = {name: dirs[1] for name, dirs in options.model_dirs.items()}
    regime = make_regime(config, policy.name, tokenizer_dirs)
    exchange = SharedExperienceExchange(topics=regime.topics)
    spool = Spool(options.run_dir) if rank == 0 else None
    remix = ReMix(config, policy.name) if config.off_policy == "remix" else None
    consumption = Consumption()

    start_step = 1
    latest = latest_checkpoint(options.run_dir) if options.resume else None
    if latest is not None:
        consumption = _load_worker(
            checkpoint_dir(options.run_dir, latest.step) / policy.name, policy, remix, regime
        )
        if spool is not None:
            spool.truncate(SpoolOffsets.from_dict(latest.spool_offsets))
        start_step = latest.step + 1
        log.info("%s resumed from the checkpoint of step %d", policy.name, latest.step)
    elif options.resume and spool is not None:
        # Stopped before its first checkpoint: start over, dropping the partial spool (what
        # was shipped already is replaced point for point: ingestion is idempotent).
        spool.truncate(SpoolOffsets())
        log.info("no checkpoint to resume from: starting over from step 1")
    shipper = _start_shipper(options) if rank == 0 else None  # after the spool's truncation

    validation = task.validation()
    try:
        if start_step == 1:
            record = StepRecord(policy.name, 0, (), policy.validation_metrics(validation))
            _write_records(spool, exchange.report(record))
        for step in range(start_step, options.steps + 1):
            record = _step(
                policy,
                regime,
                exchange,
                task,
                config,
                step,
                options.steps,
                validation,
                remix=remix,
                consumption=consumption,
                worker=worker,
                runtime=runtime,
            )
            _write_records(spool, exchange.report(record))
            if shipper is not None:
                shipper.set_status("running", f"step {step}/{options.steps}")
            stop = _all_agree_to_stop()
            # Also at the end of the RL steps (a regime's extra steps follow them):
            # sequential_sft resumes from there into its SFT stage.
            if step % config.checkpoint_every == 0 or step in (config.steps, options.steps) or stop:
                _checkpoint(
                    options.run_dir,
                    step,
                    policy,
                    exchange,
                    spool,
                    remix,
                    consumption,
                    regime,
                    keep_last=config.checkpoint_keep_last,
                    optimizer_state=config.checkpoint_optimizer_state,
                )
            if stop and step < options.steps:
                log.info("%s: stop signal; checkpointed step %d and stopping", policy.name, step)
                if shipper is not None:
                    shipper.set_status("running", f"checkpointed step {step}; waiting to resume")
                    shipper.stop(timeout=options.ship_timeout_s)
                return
    except BaseException as exc:
        if shipper is not None:
            shipper.set_status("failed", f"{type(exc).__name__}: {exc}"[:500])
            shipper.stop(timeout=min(options.ship_timeout_s, 10.0))
        raise
    if shipper is not None:
        shipper.set_status("completed", f"step {options.steps}/{options.steps}")
        if not shipper.stop(timeout=options.final_ship_timeout_s):
            log.warning("not every metric was shipped within %g s", options.final_ship_timeout_s)


def _step(
    policy: Policy,
    regime: Regime,
    exchange: SharedExperienceExchange,
    task: Task,
    config: RunConfig,
    step: int,
    total_steps: int,
    validation: list[Problem],
    *,
    remix: ReMix | None = None,
    consumption: Consumption | None = None,
    worker: WorkerDevice | None = None,
    runtime: DeviceRuntime | None = None,
) -> StepRecord:
    """One step of one policy: roll out, exchange experience, update; its metrics record.

    With ReMix the step rolls out fewer fresh prompts and :meth:`ReMix.train` mixes in
    replayed samples. Every run logs its consumption (``perf/rollouts_total``,
    ``perf/response_tokens_total``) and ``response/self_reflection_rate``; on CUDA also
    the step's peak GPU memory and the GPU's utilisation
    (:func:`trainer.devices.step_metrics`; validation excluded).
    """
    worker = WorkerDevice("cpu") if worker is None else worker
    runtime = TorchCuda() if runtime is None else runtime
    devices.begin_step(worker, runtime)
    started = time.perf_counter()
    prompts = config.prompts_per_step if remix is None else remix.fresh_prompts()
    problems = task.train_batch(step, prompts)
    prompt_ids = tuple(p.id for p in problems)
    rollouts = policy.rollout(problems)
    generated = time.perf_counter()
    published = StepRecord(
        policy.name, step, prompt_ids, topics=regime.publish(policy, rollouts, step)
    )
    peers = [r for r in exchange.exchange(published) if r.policy != policy.name]
    learned = regime.learn(policy, rollouts, peers, step)
    exchanged = time.perf_counter()
    trained = (
        policy.train_step(learned.batch)
        if remix is None
        else remix.train(policy, learned.batch, rollouts, step)
    )
    metrics = policy.rollout_metrics(rollouts) | trained | learned.metrics
    finished = time.perf_counter()
    lengths = [len(ids) for ids in rollouts.batch.response_ids]
    response_tokens = sum(lengths)
    consumption = Consumption() if consumption is None else consumption
    consumption.add(lengths)
    metrics |= {
        m.ROLLOUTS_TOTAL: float(consumption.rollouts),
        m.RESPONSE_TOKENS_TOTAL: float(consumption.response_tokens),
        m.SELF_REFLECTION_RATE: self_reflection_rate(
            rollouts.batch.response_texts, config.remix.reflection_markers
        ),
        m.STEP_S: finished - started,
        m.GENERATE_S: generated - started,
        m.EXCHANGE_S: exchanged - generated,
        m.TRAIN_S: finished - exchanged,
        m.TOKENS_PER_S: response_tokens / max(finished - started, 1e-9),
    }
    metrics |= devices.step_metrics(worker, runtime)
    if step % config.val_every == 0 or step in (config.steps, total_steps):
        # The end of the RL steps too, where a run of its regime's extra steps (sequential
        # SFT) has what a standalone run of ``steps`` has at its last step.
        metrics |= policy.validation_metrics(validation)
    return StepRecord(policy.name, step, prompt_ids, metrics, events=learned.events)


def _write_records(spool: Spool | None, records: list[StepRecord] | None) -> None:
    """Rank 0: every policy's metrics and events, plus pool aggregates under ``_pool``."""
    if spool is None or records is None:
        return
    events = [event for record in records for event in record.events]
    if events:
        spool.append_events(events)
    now = time.time()
    step = records[0].step
    points = [
        make_point(r.policy, key, r.step, value, wall_time=now)
        for r in records
        for key, value in r.metrics.items()
    ]
    for key, reduce in (
        (m.TRAIN_REWARD_MEAN, _mean),
        (m.VAL_REWARD_AT_1, _mean),
        (m.STEP_S, max),
    ):
        values = [r.metrics[key] for r in records if key in r.metrics]
        if values:
            points.append(make_point(m.POOL, key, step, reduce(values), wall_time=now))
    spool.append_points(points)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _checkpoint(
    run_dir: Path,
    step: int,
    policy: Policy,
    exchange: SharedExperienceExchange,
    spool: Spool | None,
    remix: ReMix | None = None,
    consumption: Consumption | None = None,
    regime: Regime | None = None,
    *,
    keep_last: int | None = 2,
    optimizer_state: str = "every",
) -> None:
    """Save every policy's part of step ``step``'s checkpoint; rank 0 then marks it
    complete and prunes the older ones (``keep_last``, ``optimizer_state``:
    :func:`trainer.checkpoint.prune`)."""
    directory = checkpoint_dir(run_dir, step) / policy.name
    save_policy(directory, policy.model, policy.optimizer)
    save_worker_state(
        directory,
        {
            "consumption": (consumption or Consumption()).to_dict(),
            "remix": None if remix is None else remix.state_dict(),
            "regime": {} if regime is None else regime.state_dict(),
        },
    )
    if remix is not None and remix.reincarnated:
        save_weights(directory / REFERENCE_FILE, policy.reference)
    exchange.barrier()  # every policy saved before the checkpoint is marked complete
    if spool is not None:
        spool.sync()
        write_state(
            run_dir,
            CheckpointState(step=step, spool_offsets=spool.offsets().to_dict()),
            keep_last=keep_last,
            optimizer_state=optimizer_state,
        )
    exchange.barrier()


def _load_worker(
    directory: Path, policy: Policy, remix: ReMix | None, regime: Regime | None = None
) -> Consumption:
    """Restore a policy worker from its checkpoint directory; return its consumption."""
    load_policy(directory, policy.model, policy.optimizer)
    state = load_worker_state(directory)
    if state is None:  # a checkpoint written before the worker state existed
        log.warning("%s: the checkpoint has no worker state; counters restart at 0", policy.name)
        state = {"consumption": Consumption().to_dict(), "remix": None}
    if remix is not None:
        if state["remix"] is None:
            raise RunSetupError(
                f"--resume: {directory} holds no ReMix state; resume with the run's own config"
            )
        remix.load_state_dict(state["remix"])
        if remix.reincarnated:
            load_weights(directory / REFERENCE_FILE, policy.reference)
    if regime is not None:
        regime.load_state_dict(state.get("regime") or {})  # none before regimes kept state
    return Consumption.from_dict(state["consumption"])


def spool_unshipped(options: RunOptions) -> bool:
    """Whether spooled lines still wait for the web app (from the ship cursor; no request)."""
    if not options.ingest_url:
        return False
    return Shipper(options.run_dir, options.ingest_url, options.token or "").pending()


def _start_shipper(options: RunOptions) -> Shipper | None:
    if not options.ingest_url:
        return None
    if not options.token:
        raise RunSetupError("--ingest-url needs a run token (--token or MRL_INGEST_TOKEN)")
    shipper = Shipper(options.run_dir, options.ingest_url, options.token)
    shipper.start()
    return shipper
