"""How cost grows: pool size, response length, concurrently shipping runs (issue 23, target 5).

    PYTHONPATH=. MRL_ZOO_DIR=var/test/zoo \\
        DATABASE_URL=postgres://postgres@127.0.0.1:5432/mrl_bench_scaling \\
        .venv/bin/python bench/scaling.py [--quick] [--part all|trainer|ingest]

Two parts; each prints markdown tables, then a reading of every curve (below).

**Trainer part** (no database). For each regime (standalone, prp, xgrpo, sgt), pools
of 1, 2, 3, 4 and 8 policies at ``--length`` (32) new tokens (a sharing regime from 2:
the run config refuses it one policy), and a pool of 2 at 16, 32, 64, 128 and 256 new
tokens. Pools cycle the zoo's three models (three tokenizers: char-level llama,
byte-level BPE qwen, unigram gpt2), so a pool of 4 or 8 repeats them under other names
(their learners sample differently). The length pool is llama + qwen: their rotary
positions run past the zoo's 128 positions, gpt2's learned ones stop there.

What runs is the trainer's own step: one thread per policy calls
``trainer.run._step`` (rollouts, ``regime.publish``, the SEE exchange, ``regime.learn``
with THL, ``policy.train_step``, the step's metrics), then ``_train``'s report of the
metrics and transfer events to rank 0 (a gather), and rank 0 writes the spool
(``trainer.run._write_records``). The only stand-in is torch.distributed:
``trainer.exchange.dist`` is replaced for the run by an in-process all-gather and gather
that do what ``dist.all_gather_object`` / ``gather_object`` do to the records (pickle
each with ``pickle.Pickler``, as torch's ``_object_to_tensor``, and unpickle every
rank's on every rank / on rank 0), so each policy pays its own serialisation and
deserialisation. A baton lets one thread compute
at a time (released while a thread waits for its peers at the exchange), and torch runs
``--threads`` CPU threads (1 by default: what the trainer gives each worker of a pool
of 2 or more on this 2-core machine), inside the calling thread. Times are the thread's
CPU time (``time.thread_time``): each policy's own work, which the other processes of a
shared machine do not inflate (its wall time, less the waits for peers, is beside it).
Measured per policy and step, after ``--warmup`` steps (median over steps, mean over
policies):

- ``step s``: CPU time of its ``_step`` call (rollouts, publish, exchange
  (de)serialisation, learn, update, metrics), ``wall s`` beside it; ``pool step s``
  (max over policies: the pool's step with one device per policy, the barrier waits
  for the slowest; loopback/network transfer time not included) and ``serial s`` (the
  sum: one device for the whole pool); ``rollout``, ``learn``, ``train``: the parts;
- ``THL s``: CPU time inside THL's entry points as the regimes call them
  (``align_response_logprobs`` in PRP, ``encode_text`` in SGT; wrapped with timers);
  ``THL %`` is its share of the policy's step;
- ``SEE B``: the bytes of experience crossing per pool step, exactly as
  ``all_gather_object`` sends them: every rank's record pickled, padded to the largest
  (torch pads every rank's tensor to the max size), plus the 8-byte size all-gather;
  each of the N ranks receives N-1 of them, so the pool moves N(N-1)(max+8) bytes. The
  experience exchange (regime topics) and the metrics/events report are separate
  columns (the report: rank 0 receives N-1 padded records after the size all-gather,
  (N-1)max + 8N(N-1) bytes); ``pub B/policy`` is one policy's pickled experience record.

Forced length (``--natural-length`` turns it off): the tiny zoo models stop after 8-15
tokens, so ``min_new_tokens = max_new_tokens`` is set on each generate call (a wrapper
on the model's ``generate``); every response is then exactly the length of its column.
Prompts per step and G are smaller than the examples' (``--prompts``, ``--group``).

**Ingestion part** (PostgreSQL). Recreates the database named in ``DATABASE_URL`` (its
name must contain "bench"), migrates it, starts gunicorn (2 sync workers, as
``bench/ingest.py``) and, for 1, 10 and 50 concurrently shipping runs, each on its own
run and token: a thread writes one real step of a 4-policy PRP pool (rank 0's records
of the trainer part, renumbered, through ``_write_records``) to the run's spool every
``--step-seconds`` (starts staggered), and the trainer's own ``Shipper`` (its thread,
1-s poll, 10-s timeout, backoff) ships it, for ``--ship-seconds``, then drains (60 s at
most). Meanwhile ``--viewers`` run pages are open (threads, starts staggered): every
5 s (the page's poll period) each requests, for a random shipping run, the page HTML,
status, keys, one metric's series (2,000 points max), the poll's incremental series
(``after_step``, every series), the transfer log and matrix. Every ingest POST (a
timed-out one at its timeout, and counted as failed) and every page request is timed
at the client (loopback: server time plus queueing); p50/p95 per level. Before the
levels, a 5-s warm-up and a 10-s calibration (10 runs shipping, no page open) are not
reported; the calibration gives the server's CPU time per post: the CPU seconds of the
gunicorn workers and of the PostgreSQL backends on the bench database
(``/proc/<pid>/stat``) over the posts served. Each level's CPU per request is printed
too. Unlike latency, CPU time is not inflated by the other processes of the machine.

**The reading.** Each curve is fitted with four shapes in x (pool size, response
length or runs): a constant, a line, a power law a·x^b and a parabola. The shape is the
one that best predicts each point when fitted without it (leave-one-out, the miss
relative to the point), or a simpler one within 5 points of it (so noise does not buy
a parabola); it is then fitted to every point. The log-log slope (the exponent b over
the points where the curve is positive) is printed beside it. The fit gives the
prediction at a 32-policy pool, at a 1,024-token response and at 5,000 shipping runs
(an extrapolation: it holds only while nothing saturates). For ingestion the capacity
is also estimated from the server's CPU time per post.

Latencies are noisy on a shared 2-core machine: the load average is printed with them.
``--quick`` (about 2 minutes on an idle machine) shrinks steps, lengths and shipping.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import io
import math
import os
import pickle
import platform
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

if TYPE_CHECKING:
    import requests

    from trainer.exchange import StepRecord

REGIMES = ("standalone", "prp", "xgrpo", "sgt")
ZOO = (("llama", "tiny-llama-char"), ("qwen", "tiny-qwen-bpe"), ("gpt2", "tiny-gpt2-unigram"))
POOL_SIZES = (1, 2, 3, 4, 8)
LENGTHS = (16, 32, 64, 128, 256)
QUICK_LENGTHS = (16, 64, 256)
RUN_LEVELS = (1, 10, 50)
LENGTH_POOL = 2  # llama-char + qwen-bpe: RoPE runs past 128 positions, gpt2 stops there
CAPTURE_REGIME, CAPTURE_POOL = "prp", 4
POLL_SECONDS = 5.0  # the run page polls every 5 s
POOL_KEYS = ("train/reward_mean", "val/reward@1", "perf/step_s")  # _write_records' _pool
CALIBRATION_RUNS = 10
DRAIN_SECONDS = 60.0  # a shipper's last drain, bounded
CORES = os.cpu_count() or 1
DEFAULT_DATABASE = "postgres://postgres@127.0.0.1:5432/mrl_bench_scaling"
FIT_SLACK = 0.05  # a simpler shape wins within 5 points of held-out error
PREDICT_POOL, PREDICT_LENGTH, PREDICT_RUNS = 32, 1024, 5000
THL_TARGET = 0.05
BYTES_PER_SIZE = 8  # all_gather_object's size all-gather: one int64 per rank


# --- fits and readings (pure) -----------------------------------------------------------


SHAPES = {"constant": 0, "linear": 1, "power law": 1, "quadratic": 2}
"""Candidate shapes and their complexity (the simpler wins a near tie)."""


@dataclass(frozen=True)
class Growth:
    """How a curve y(x) grows: its shape, fit and log-log slope."""

    shape: str
    """One of :data:`SHAPES`."""
    coefficients: tuple[float, ...]
    """Polynomial c0, c1, ... (in x), or (a, b) of a·x^b for the power law."""
    exponent: float | None
    """Slope of log y against log x over the points with y > 0 (None: fewer than 2)."""
    error: float
    """The chosen shape's leave-one-out error (:func:`held_out_error`); NaN untested."""

    def predict(self, x: float) -> float:
        return evaluate(self.shape, self.coefficients, x)


def evaluate(shape: str, coefficients: Sequence[float], x: float) -> float:
    if shape == "power law":
        a, b = coefficients
        return a * x**b
    return sum(c * x**power for power, c in enumerate(coefficients))


def log_slope(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """The exponent b of the least-squares line log y = log a + b log x over the points
    with x > 0 and y > 0; None with fewer than two such points."""
    points = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if x > 0 and y > 0]
    if len(points) < 2:
        return None
    lx = np.array([p[0] for p in points])
    ly = np.array([p[1] for p in points])
    if float(np.ptp(lx)) == 0.0:
        return None
    return float(np.polyfit(lx, ly, 1)[0])


def fit_shape(shape: str, xs: Sequence[float], ys: Sequence[float]) -> tuple[float, ...] | None:
    """Least-squares coefficients of ``shape`` through the points; None when they
    cannot determine it (fewer points than parameters; a power law through a y <= 0)."""
    parameters = SHAPES[shape] + 1 if shape != "power law" else 2
    if len(xs) < parameters:
        return None
    if shape == "power law":
        if any(x <= 0 or y <= 0 for x, y in zip(xs, ys, strict=True)):
            return None
        b, log_a = np.polyfit(np.log(xs), np.log(ys), 1)
        return float(math.exp(log_a)), float(b)
    return tuple(float(c) for c in np.polyfit(xs, ys, SHAPES[shape])[::-1])


def held_out_error(shape: str, xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Leave-one-out error of ``shape``: fitted without each point in turn, the mean
    miss at that point relative to its |y| (floored at a tenth of the curve's largest,
    so a point near zero does not demand a near-zero miss); None if not testable."""
    scale = max(abs(y) for y in ys) or 1.0
    misses = []
    for index in range(len(xs)):
        rest_x = [x for i, x in enumerate(xs) if i != index]
        rest_y = [y for i, y in enumerate(ys) if i != index]
        coefficients = fit_shape(shape, rest_x, rest_y)
        if coefficients is None:
            return None
        predicted = evaluate(shape, coefficients, xs[index])
        misses.append(abs(predicted - ys[index]) / max(abs(ys[index]), 0.1 * scale))
    return statistics.fmean(misses)


def fit_growth(xs: Sequence[float], ys: Sequence[float], slack: float = FIT_SLACK) -> Growth:
    """The shape (:data:`SHAPES`) that best predicts each point from the others
    (:func:`held_out_error`), or a simpler one within ``slack`` of it; a parabola that
    bends down is not taken (it extrapolates to nonsense). Fitted to every point."""
    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError("fit_growth needs two or more (x, y) points")
    candidates: dict[str, tuple[float, tuple[float, ...]]] = {}
    for shape in SHAPES:
        error = held_out_error(shape, xs, ys)
        coefficients = fit_shape(shape, xs, ys)
        if error is None or coefficients is None:
            continue
        if shape == "quadratic" and coefficients[2] < 0:
            continue
        candidates[shape] = (error, coefficients)
    if not candidates:  # two points: the line through them, untested
        line = tuple(float(c) for c in np.polyfit(xs, ys, 1)[::-1])
        return Growth("linear", line, log_slope(xs, ys), float("nan"))
    best = min(error for error, _ in candidates.values())
    shape = min(
        (s for s, (error, _) in candidates.items() if error <= best + slack),
        key=lambda s: (SHAPES[s], candidates[s][0]),
    )
    error, coefficients = candidates[shape]
    return Growth(shape, coefficients, log_slope(xs, ys), error)


def reading_cells(
    xs: Sequence[float], ys: Sequence[float], unit: str, at: float
) -> tuple[str, str, str, str]:
    """(shape, log-log slope, fitted formula with its worst residual, value at ``at``)."""
    if all(value == 0 for value in ys):
        return "zero", "-", "-", human(0.0, unit)
    growth = fit_growth(xs, ys)
    slope = "n/a" if growth.exponent is None else f"{growth.exponent:.2f}"
    c = growth.coefficients
    if growth.shape == "power law":
        terms = f"{c[0]:.4g}·x^{c[1]:.2f}"
    else:
        powers = ("", "·x", "·x²")
        terms = " + ".join(f"{value:.4g}{powers[power]}" for power, value in enumerate(c))
    held_out = "" if math.isnan(growth.error) else f" (held out ±{growth.error:.0%})"
    return growth.shape, slope, f"{terms}{held_out}", human(growth.predict(at), unit)


def reading(name: str, xs: Sequence[float], ys: Sequence[float], unit: str, at: float) -> str:
    """One line: the curve's shape, exponent and its value predicted at ``at``."""
    if all(value == 0 for value in ys):
        return f"{name}: zero at every point (nothing of this kind in this regime)."
    shape, slope, formula, predicted = reading_cells(xs, ys, unit, at)
    return f"{name}: {shape}, {formula}, log-log slope {slope}; at x = {at:g}: {predicted}."


def human(value: float, unit: str) -> str:
    """``value`` with a readable unit: bytes as kB/MB/GB, seconds as ms or s."""
    if unit == "B":
        for scale, name in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
            if abs(value) >= scale:
                return f"{value / scale:,.1f} {name}"
        return f"{value:,.0f} B"
    if unit == "s":
        return f"{value * 1000:,.0f} ms" if abs(value) < 1 else f"{value:,.2f} s"
    if unit == "%":
        return f"{value:.1%}"
    return f"{value:,.3g} {unit}"


def allgather_wire_bytes(record_sizes: Sequence[int]) -> int:
    """Bytes ``dist.all_gather_object`` moves between ranks for one call: every rank's
    pickled record is padded to the largest and reaches the N-1 others, after an
    all-gather of the int64 sizes; nothing crosses in a pool of one."""
    n = len(record_sizes)
    if n < 2:
        return 0
    return n * (n - 1) * (max(record_sizes) + BYTES_PER_SIZE)


def gather_wire_bytes(record_sizes: Sequence[int]) -> int:
    """Bytes ``dist.gather_object`` moves for one call: the all-gather of the int64 sizes,
    then every other rank's record, padded to the largest, to the destination."""
    n = len(record_sizes)
    if n < 2:
        return 0
    return (n - 1) * max(record_sizes) + n * (n - 1) * BYTES_PER_SIZE


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def load_average() -> str:
    try:
        return ", ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "n/a"


# --- the in-process pool (trainer part) ---------------------------------------------------


class LocalHub:
    """An in-process ``all_gather_object`` for N threads, with a baton so that one
    thread computes at a time (it is released while a thread waits for its peers)."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.baton = threading.Lock()
        self.barrier = threading.Barrier(world_size)
        self.local = threading.local()
        self._lock = threading.Lock()
        self._buffers: dict[int, dict[int, bytes]] = {}
        self.sizes: dict[int, dict[int, int]] = {}
        """Call number -> rank -> pickled bytes."""
        self.waited = [0.0] * world_size
        self.serde = [0.0] * world_size

    # what ``trainer.exchange`` calls on ``dist``
    def get_rank(self) -> int:
        return int(self.local.rank)

    def get_world_size(self) -> int:
        return self.world_size

    def all_gather_object(self, output: list[Any], obj: Any) -> None:
        self._collect(obj, output)

    def gather_object(self, obj: Any, output: list[Any] | None, dst: int = 0) -> None:
        """``dist.gather_object``: as :meth:`all_gather_object`, but only ``dst`` unpickles
        (and receives) the records."""
        self._collect(obj, output if self.get_rank() == dst else None)

    def _collect(self, obj: Any, output: list[Any] | None) -> None:
        """Publish ``obj`` pickled as torch's ``_object_to_tensor`` does, wait for every
        rank, and unpickle every rank's into ``output`` (None: receive nothing); the
        (de)serialisation is timed as this rank's."""
        rank = self.get_rank()
        call = self.local.calls
        self.local.calls += 1
        started = time.thread_time()
        buffer = io.BytesIO()
        pickle.Pickler(buffer).dump(obj)
        data = buffer.getvalue()
        with self._lock:
            self._buffers.setdefault(call, {})[rank] = data
            self.sizes.setdefault(call, {})[rank] = len(data)
            self._buffers.pop(call - 2, None)
        serialised = time.thread_time()
        self._wait()
        resumed = time.thread_time()
        if output is not None:
            with self._lock:
                received = dict(self._buffers[call])
            for index in range(self.world_size):
                output[index] = pickle.loads(received[index])  # torch's _tensor_to_object
        self.serde[rank] += (serialised - started) + (time.thread_time() - resumed)

    def barrier_wait(self) -> None:
        self._wait()

    def _wait(self) -> None:
        rank = self.get_rank()
        started = time.perf_counter()
        self.baton.release()
        try:
            self.barrier.wait()
        finally:
            self.baton.acquire()
        self.waited[rank] += time.perf_counter() - started

    def as_dist(self) -> SimpleNamespace:
        return SimpleNamespace(
            get_rank=self.get_rank,
            get_world_size=self.get_world_size,
            all_gather_object=self.all_gather_object,
            gather_object=self.gather_object,
            barrier=self.barrier_wait,
        )


class PhaseTimer:
    """Per-thread accumulators of named phases (the thread's CPU time, and the wall time
    as ``<phase>_wall``); wraps callables."""

    def __init__(self) -> None:
        self.local = threading.local()

    def bind(self, totals: dict[str, float]) -> None:
        self.local.totals = totals

    def add(self, phase: str, seconds: float) -> None:
        totals = getattr(self.local, "totals", None)
        if totals is not None:
            totals[phase] = totals.get(phase, 0.0) + seconds

    def wrap(self, phase: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started, cpu = time.perf_counter(), time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.add(phase, time.thread_time() - cpu)
                self.add(phase + "_wall", time.perf_counter() - started)

        return timed


@contextlib.contextmanager
def patched(target: Any, name: str, value: Any) -> Iterator[None]:
    original = getattr(target, name)
    setattr(target, name, value)
    try:
        yield
    finally:
        setattr(target, name, original)


@dataclass
class PoolCell:
    """One regime x pool size x response length: per-step, per-policy measurements."""

    regime: str
    pool: int
    length: int
    steps: list[list[dict[str, float]]] = field(default_factory=list)
    """steps[s][rank]: phase -> seconds of that policy at that measured step."""
    see_sizes: list[list[int]] = field(default_factory=list)
    metrics_sizes: list[list[int]] = field(default_factory=list)
    response_length: float = 0.0
    records: list[list[StepRecord]] = field(default_factory=list)
    """Rank 0's gathered records of each measured step (to replay in the ingest part)."""

    def per_policy(self, phase: str) -> float:
        """Mean over policies of the median over steps."""
        return statistics.fmean(
            statistics.median(step[rank].get(phase, 0.0) for step in self.steps)
            for rank in range(self.pool)
        )

    def pool_step(self) -> float:
        return statistics.median(max(p["step"] for p in step) for step in self.steps)

    def serial_step(self) -> float:
        return statistics.median(sum(p["step"] for p in step) for step in self.steps)

    def see_bytes(self) -> float:
        return statistics.median(allgather_wire_bytes(sizes) for sizes in self.see_sizes)

    def metrics_bytes(self) -> float:
        return statistics.median(gather_wire_bytes(sizes) for sizes in self.metrics_sizes)

    def published_bytes(self) -> float:
        return statistics.median(statistics.fmean(sizes) for sizes in self.see_sizes)

    def thl_share(self) -> float:
        step = self.per_policy("step")
        return self.per_policy("thl") / step if step else 0.0


def pool_config(
    regime: str, size: int, length: int, prompts: int, group: int, seed: int
) -> dict[str, Any]:
    """A run config of ``size`` zoo policies, cycling the three tokenizers."""
    pool = [
        {
            "name": f"{ZOO[i % len(ZOO)][0]}-{i}",
            "model": f"zoo:{ZOO[i % len(ZOO)][1]}",
            "lr": 3e-4,
            "group_size": group,
            "max_new_tokens": length,
        }
        for i in range(size)
    ]
    return {
        "name": f"scaling-{regime}-{size}x{length}",
        "pool": pool,
        "regime": regime,
        "task": {"kind": "arithmetic", "levels": [1, 2, 3], "val_size": 8},
        "steps": 10**6,
        "prompts_per_step": prompts,
        "val_every": 10**6,
        "checkpoint_every": 10**6,
        "seed": seed,
    }


def force_length(model: Any) -> None:
    """Make every ``generate`` of ``model`` run to ``max_new_tokens`` (EOS suppressed)."""
    generate = model.generate

    def forced(*args: Any, generation_config: Any = None, **kwargs: Any) -> Any:
        if generation_config is not None:
            generation_config = copy.copy(generation_config)
            generation_config.min_new_tokens = generation_config.max_new_tokens
        return generate(*args, generation_config=generation_config, **kwargs)

    model.generate = forced


def run_pool(
    regime: str,
    size: int,
    length: int,
    *,
    prompts: int,
    group: int,
    steps: int,
    warmup: int,
    threads: int,
    forced: bool,
    zoo_dir: Path,
    seed: int = 0,
) -> PoolCell:
    """Train a pool of ``size`` policies for ``warmup + steps`` steps in this process
    (module docstring) and return its measurements."""
    import torch

    from trainer import exchange as exchange_module
    from trainer import run as run_module
    from trainer.config import RunConfig
    from trainer.exchange import SharedExperienceExchange
    from trainer.policy import Policy
    from trainer.regimes import make_regime
    from trainer.regimes.prp import regime as prp_module
    from trainer.regimes.sgt import regime as sgt_module
    from trainer.spool import Spool
    from trainer.tasks import get_reward, make_task

    torch.set_num_threads(threads)
    config = RunConfig.from_dict(pool_config(regime, size, length, prompts, group, seed))
    model_dirs = run_module.resolve_models(config, zoo_dir)
    tokenizer_dirs = {name: dirs[1] for name, dirs in model_dirs.items()}
    task = make_task(config.task, seed=config.seed)
    timer = PhaseTimer()
    hub = LocalHub(size)
    policies, regimes = [], []
    for rank, member in enumerate(config.pool):
        torch.manual_seed(config.seed * 1000 + rank)
        model_dir, tokenizer_dir = model_dirs[member.name]
        policy = Policy(
            member, config.grpo, model_dir=model_dir, tokenizer_dir=tokenizer_dir,
            reward_fn=get_reward(task.reward_name), success_threshold=config.success_threshold,
        )  # fmt: skip
        if forced:
            force_length(policy.model)
            policy.engine.decoder = "generate"  # force_length patches HF generate
        regime_object = make_regime(config, policy.name, tokenizer_dirs)
        policy.rollout = timer.wrap("rollout", policy.rollout)  # type: ignore[method-assign]
        policy.train_step = timer.wrap("train", policy.train_step)  # type: ignore[method-assign]
        regime_object.publish = timer.wrap("publish", regime_object.publish)  # type: ignore[method-assign]
        regime_object.learn = timer.wrap("learn", regime_object.learn)  # type: ignore[method-assign]
        policies.append(policy)
        regimes.append(regime_object)

    cell = PoolCell(regime, size, length)
    per_step: list[list[dict[str, float]]] = [
        [{} for _ in range(size)] for _ in range(warmup + steps)
    ]
    lengths: list[float] = []
    run_dir = Path(tempfile.mkdtemp(prefix="mrl-scaling-"))
    errors: list[BaseException] = []

    def worker(rank: int) -> None:
        hub.local.rank = rank
        hub.local.calls = 0
        hub.baton.acquire()
        try:
            exchange = SharedExperienceExchange(topics=regimes[rank].topics)
            spool = Spool(run_dir) if rank == 0 else None
            for index in range(warmup + steps):
                totals = per_step[index][rank]
                timer.bind(totals)
                waited, serde = hub.waited[rank], hub.serde[rank]
                started, cpu = time.perf_counter(), time.thread_time()
                record = run_module._step(
                    policies[rank], regimes[rank], exchange, task, config, index + 1, 10**9, []
                )
                totals["step"] = time.thread_time() - cpu
                totals["step_wall"] = time.perf_counter() - started - (hub.waited[rank] - waited)
                totals["exchange"] = hub.serde[rank] - serde
                totals["tokens"] = record.metrics.get("response/length_mean", 0.0)
                records = exchange.report(record)
                if spool is not None and records is not None:
                    spooled = time.perf_counter()
                    run_module._write_records(spool, records)
                    totals["spool"] = time.perf_counter() - spooled
                    if index >= warmup:
                        cell.records.append(records)
                timer.bind({})
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)
            hub.barrier.abort()
        finally:
            hub.baton.release()

    thl = timer.wrap("thl", prp_module.align_response_logprobs)
    thl_text = timer.wrap("thl", sgt_module.encode_text)
    with (
        patched(exchange_module, "dist", hub.as_dist()),
        patched(prp_module, "align_response_logprobs", thl),
        patched(sgt_module, "encode_text", thl_text),
    ):
        workers = [threading.Thread(target=worker, args=(rank,)) for rank in range(size)]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join()
    shutil.rmtree(run_dir, ignore_errors=True)
    if errors:
        raise errors[0]
    cell.steps = per_step[warmup:]
    # Exchange calls per step: the experience exchange, then the metrics exchange.
    for index in range(warmup, warmup + steps):
        cell.see_sizes.append(list(hub.sizes[2 * index].values()))
        cell.metrics_sizes.append(list(hub.sizes[2 * index + 1].values()))
    lengths = [p["tokens"] for step in cell.steps for p in step]
    cell.response_length = statistics.fmean(lengths)
    return cell


def trainer_part(args: argparse.Namespace) -> tuple[list[PoolCell], list[PoolCell]]:
    from trainer.zoo import build_zoo, default_zoo_dir

    zoo_dir = default_zoo_dir()
    build_zoo(zoo_dir, ids=[zoo_id for _, zoo_id in ZOO], log=lambda line: None)
    common = {
        "prompts": args.prompts, "group": args.group, "steps": args.steps,
        "warmup": args.warmup, "threads": args.threads, "forced": not args.natural_length,
        "zoo_dir": zoo_dir,
    }  # fmt: skip
    by_pool, by_length = [], []
    for regime in args.regimes:
        for size in args.pool_sizes:
            if size < 2 and regime != "standalone":
                continue  # a sharing regime needs a peer (the run config refuses one policy)
            started = time.perf_counter()
            cell = run_pool(regime, size, args.length, **common)
            by_pool.append(cell)
            log(
                f"{regime} pool {size} x {args.length} tokens: {cell.per_policy('step'):.3f} s "
                f"per policy, {time.perf_counter() - started:.0f} s wall, load {load_average()}"
            )
        for length in args.lengths:
            if length == args.length and LENGTH_POOL in args.pool_sizes:
                by_length.append(
                    next(c for c in by_pool if c.regime == regime and c.pool == LENGTH_POOL)
                )
                continue
            started = time.perf_counter()
            cell = run_pool(regime, LENGTH_POOL, length, **common)
            by_length.append(cell)
            log(
                f"{regime} pool {LENGTH_POOL} x {length} tokens: {cell.per_policy('step'):.3f} s "
                f"per policy, {time.perf_counter() - started:.0f} s wall, load {load_average()}"
            )
    return by_pool, by_length


def print_trainer_tables(cells: list[PoolCell], axis: str) -> None:
    x_name = "policies" if axis == "pool" else "max new tokens"
    print(
        f"| regime | {x_name} | mean response tokens | step s / policy | wall s | pool step s "
        "(1 device / policy) | serial s (1 device) | rollout s | learn s | train s "
        "| exchange (de)serialise s | THL s / policy | THL % of step | pub B / policy "
        "| SEE B / pool step | metrics+events B / pool step |"
    )
    print("| --- |" + " ---: |" * 15)
    for cell in cells:
        x = cell.pool if axis == "pool" else cell.length
        print(
            f"| {cell.regime} | {x} | {cell.response_length:.0f} "
            f"| {cell.per_policy('step'):.3f} | {cell.per_policy('step_wall'):.3f} "
            f"| {cell.pool_step():.3f} | {cell.serial_step():.3f} "
            f"| {cell.per_policy('rollout'):.3f} | {cell.per_policy('learn'):.3f} "
            f"| {cell.per_policy('train'):.3f} | {cell.per_policy('exchange'):.4f} "
            f"| {cell.per_policy('thl'):.4f} | {cell.thl_share():.1%} "
            f"| {human(cell.published_bytes(), 'B')} | {human(cell.see_bytes(), 'B')} "
            f"| {human(cell.metrics_bytes(), 'B')} |"
        )


def trainer_readings(by_pool: list[PoolCell], by_length: list[PoolCell]) -> list[str]:
    lines = []
    curves: list[tuple[str, str, Callable[[PoolCell], float]]] = [
        ("step s / policy", "s", lambda c: c.per_policy("step")),
        ("pool step s (1 device / policy)", "s", PoolCell.pool_step),
        ("serial step s (1 device)", "s", PoolCell.serial_step),
        ("THL s / policy", "s", lambda c: c.per_policy("thl")),
        ("THL s, whole pool", "s", lambda c: c.per_policy("thl") * c.pool),
        ("SEE bytes / pool step", "B", PoolCell.see_bytes),
        ("metrics+events bytes / pool step", "B", PoolCell.metrics_bytes),
    ]
    regimes = list(dict.fromkeys(c.regime for c in by_pool + by_length))
    for axis, cells, at, x_of in (
        ("pool size", by_pool, PREDICT_POOL, lambda c: c.pool),
        ("response length", by_length, PREDICT_LENGTH, lambda c: c.length),
    ):
        lines.append(f"\nAgainst {axis} (x):\n")
        lines.append(f"| regime | curve | shape | log-log slope | fit | at x = {at:g} |")
        lines.append("| --- | --- | --- | ---: | --- | ---: |")
        shares_lines = []
        for regime in regimes:
            chosen = sorted((c for c in cells if c.regime == regime), key=x_of)
            if len(chosen) < 2:
                continue
            xs = [float(x_of(c)) for c in chosen]
            for name, unit, value in curves:
                ys = [value(c) for c in chosen]
                if name.startswith("THL") and not any(ys):
                    continue  # no THL in this regime
                cells_ = reading_cells(xs, ys, unit, at)
                lines.append(f"| {regime} | {name} | " + " | ".join(cells_) + " |")
            shares = [c.thl_share() for c in chosen]
            if any(shares):
                shares_lines.append(
                    f"- {regime}: THL's share of a policy's step is {min(shares):.1%} to "
                    f"{max(shares):.1%} over {axis} {', '.join(f'{x:g}' for x in xs)} "
                    f"(target < {THL_TARGET:.0%}: "
                    f"{'met' if max(shares) < THL_TARGET else 'NOT met'} at every point)."
                )
        lines += ["", *shares_lines]
    return lines


# --- ingestion and the run page under N shipping runs ----------------------------------


@dataclass
class LevelResult:
    runs: int
    ingest: list[float]
    ingest_failed: int
    points: int
    events: int
    pages: dict[str, list[float]]
    seconds: float
    load: str
    cpu_s: float
    """CPU seconds the server's processes used during the level (:class:`ServerCpu`)."""

    def page_all(self) -> list[float]:
        return [t for times in self.pages.values() for t in times]


PAGE_REQUESTS = (
    "run page (HTML)",
    "status",
    "keys",
    "one metric's series",
    "5-s poll (after_step, every series)",
    "transfer log (50)",
    "transfer matrix",
)


def renumbered(records: list[StepRecord], step: int) -> list[StepRecord]:
    """``records`` of another step, as the records of ``step``."""
    return [
        dataclasses.replace(
            record,
            step=step,
            events=[{**event, "step": step} for event in record.events],  # type: ignore[typeddict-item]
        )
        for record in records
    ]


def step_points(records: list[StepRecord]) -> int:
    """Points ``trainer.run._write_records`` spools for a step: every policy's metrics,
    and the pool's aggregates of the keys some policy logged."""
    pooled = sum(any(key in r.metrics for r in records) for key in POOL_KEYS)
    return sum(len(r.metrics) for r in records) + pooled


def page_cycle(
    session: requests.Session, base: str, run_id: int, last_step: int
) -> Iterator[tuple[str, float]]:
    """The run page's requests for ``run_id``, each timed."""
    api = f"{base}/api/v1/runs/{run_id}"
    requests_: list[tuple[str, str, dict[str, Any]]] = [
        ("run page (HTML)", f"{base}/runs/{run_id}/", {}),
        ("status", f"{api}/status", {}),
        ("keys", f"{api}/keys", {}),
        ("one metric's series", f"{api}/series",
         {"key": "train/reward_mean", "max_points": 2000}),
        ("5-s poll (after_step, every series)", f"{api}/series",
         {"after_step": max(last_step - 2, 0), "max_points": 2000}),
        ("transfer log (50)", f"{api}/events", {"limit": 50}),
        ("transfer matrix", f"{api}/events/summary", {}),
    ]  # fmt: skip
    for label, url, params in requests_:
        started = time.perf_counter()
        response = session.get(url, params=params, timeout=120)
        elapsed = time.perf_counter() - started
        response.raise_for_status()
        yield label, elapsed


def ingest_part(
    args: argparse.Namespace, step_records: list[list[StepRecord]]
) -> tuple[list[LevelResult], float]:
    """Each level of ``args.run_levels`` (after a warm-up and the calibration of the
    server's CPU per post); the levels and that CPU per post in seconds."""
    import requests

    from bench.ingest import free_port, fresh_app_database, start_server

    os.environ.setdefault("DATABASE_URL", DEFAULT_DATABASE)
    env = fresh_app_database("scaling")
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.test import Client

    from webapp.core.services import lab_join
    from webapp.runs import services

    user = User.objects.create_user("bench", password="bench-password")
    lab_join(user)
    policies = [r.policy for r in step_records[0]]
    config = {
        "name": "scaling",
        "regime": CAPTURE_REGIME,
        "pool": [{"name": p, "model": "zoo:tiny-llama-char"} for p in policies],
    }
    client = Client()
    client.force_login(user)
    port = free_port()
    server = start_server(env, port)
    rig = IngestRig(
        f"http://127.0.0.1:{port}", client.cookies["sessionid"].value, step_records,
        Path(env["MRL_VAR_DIR"]), requests, ServerCpu(server.pid, env["DATABASE_URL"]),
    )  # fmt: skip

    def runs_of(level: int) -> list[tuple[int, str]]:
        experiment = services.experiment_create(owner=user, config=config, seeds=list(range(level)))
        return [(run.pk, services.run_token_issue(run)) for run in services.runs_create(experiment)]

    results = []
    try:
        # Not reported: a warm-up (gunicorn's workers import and connect), then the
        # calibration: shipping runs only, no page open, for the server's CPU per post.
        ship_level(rig, args, runs_of(1), seconds=5.0, viewers=args.viewers)
        calibration = ship_level(rig, args, runs_of(CALIBRATION_RUNS), seconds=10.0, viewers=0)
        cpu_per_post = calibration.cpu_s / max(len(calibration.ingest), 1)
        log(f"calibration: {len(calibration.ingest)} posts, {cpu_per_post * 1000:.1f} ms CPU each")
        for level in args.run_levels:
            result = ship_level(rig, args, runs_of(level), seconds=args.ship_seconds)
            results.append(result)
            log(
                f"{level} runs: ingest p95 {percentile(result.ingest, 0.95) * 1000:.0f} ms "
                f"({len(result.ingest)} posts), page p95 "
                f"{percentile(result.page_all(), 0.95) * 1000:.0f} ms, load {result.load}"
            )
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(rig.work, ignore_errors=True)
    return results, cpu_per_post


class ServerCpu:
    """CPU seconds used so far by the app server's processes: the gunicorn workers
    (children of ``master``) and the PostgreSQL backends connected to the bench
    database, from ``/proc/<pid>/stat`` (utime + stime)."""

    def __init__(self, master: int, database_url: str) -> None:
        self.master = master
        self.database_url = database_url
        self.tick = os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _stat(pid: int) -> list[str] | None:
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        return text[text.rindex(")") + 2 :].split()  # the fields after "(comm) "

    def pids(self) -> list[int]:
        import psycopg

        workers = [
            int(entry.name)
            for entry in Path("/proc").iterdir()
            if entry.name.isdigit()
            and (fields := self._stat(int(entry.name))) is not None
            and int(fields[1]) == self.master
        ]
        with psycopg.connect(self.database_url) as conn:
            backends = conn.execute(
                "SELECT pid FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchall()
        return [self.master, *workers, *(pid for (pid,) in backends)]

    def snapshot(self) -> dict[int, float]:
        seconds = {}
        for pid in self.pids():
            fields = self._stat(pid)
            if fields is not None:
                seconds[pid] = (int(fields[11]) + int(fields[12])) / self.tick
        return seconds

    def used_since(self, before: dict[int, float]) -> float:
        """CPU seconds since ``before`` (a process started since counts from zero)."""
        return sum(cpu - before.get(pid, 0.0) for pid, cpu in self.snapshot().items())


@dataclass
class IngestRig:
    """What every level needs: the server, a page session, the step to replay."""

    base: str
    session_id: str
    step_records: list[list[StepRecord]]
    work: Path
    requests: Any
    cpu: ServerCpu


def ship_level(
    rig: IngestRig,
    args: argparse.Namespace,
    runs: list[tuple[int, str]],
    *,
    seconds: float,
    viewers: int | None = None,
) -> LevelResult:
    """``len(runs)`` runs ship for ``seconds`` while ``viewers`` run pages are open."""
    from trainer.run import _write_records
    from trainer.shipper import Shipper
    from trainer.spool import Spool

    ingest_times: list[float] = []
    failed = [0]
    lock = threading.Lock()
    stop = threading.Event()
    last_step = {run_id: 0 for run_id, _ in runs}
    rng = random.Random(len(runs))

    class TimedSession(rig.requests.Session):  # type: ignore[misc, name-defined]
        """The shipper's session; every POST timed, a timed-out one at its timeout."""

        def post(self, *a: Any, **kw: Any) -> Any:
            started = time.perf_counter()
            try:
                response = super().post(*a, **kw)
            except Exception:
                with lock:
                    failed[0] += 1
                    ingest_times.append(time.perf_counter() - started)
                raise
            with lock:
                ingest_times.append(time.perf_counter() - started)
                if response.status_code not in (200, 201):
                    failed[0] += 1
            return response

    counts = {"points": 0, "events": 0}

    def ship(run_id: int, token: str, offset: float) -> None:
        run_dir = rig.work / f"run-{run_id}"
        run_dir.mkdir(parents=True, exist_ok=True)
        spool = Spool(run_dir)
        shipper = Shipper(
            run_dir, f"{rig.base}/api/v1/runs/{run_id}/ingest", token, session=TimedSession()
        )
        shipper.start(poll_interval=1.0)
        begin = time.monotonic() + offset
        step = 0
        while begin + step * args.step_seconds < begin + seconds:
            time.sleep(max(0.0, begin + step * args.step_seconds - time.monotonic()))
            step += 1
            records = renumbered(rig.step_records[step % len(rig.step_records)], step)
            _write_records(spool, records)
            last_step[run_id] = step
            with lock:
                counts["points"] += step_points(records)
                counts["events"] += sum(len(r.events) for r in records)
        shipper.stop(timeout=DRAIN_SECONDS)

    pages: dict[str, list[float]] = {label: [] for label in PAGE_REQUESTS}

    def view(index: int) -> None:
        """A researcher on the run page of a random shipping run: every 5 s (the page's
        poll period) its requests, then another run."""
        session = rig.requests.Session()
        session.cookies.set("sessionid", rig.session_id)
        local = random.Random(index)
        stop.wait(local.uniform(0, POLL_SECONDS))
        while not stop.is_set():
            cycle = time.monotonic()
            run_id = local.choice(runs)[0]
            if last_step[run_id]:
                for label, elapsed in page_cycle(session, rig.base, run_id, last_step[run_id]):
                    with lock:
                        pages[label].append(elapsed)
            stop.wait(max(0.0, cycle + POLL_SECONDS - time.monotonic()))

    cpu_before = rig.cpu.snapshot()
    started = time.perf_counter()
    shippers = [
        threading.Thread(target=ship, args=(run_id, token, rng.uniform(0, args.step_seconds)))
        for run_id, token in runs
    ]
    n_viewers = args.viewers if viewers is None else viewers
    readers = [threading.Thread(target=view, args=(i,)) for i in range(n_viewers)]
    for thread in [*shippers, *readers]:
        thread.start()
    time.sleep(seconds)
    load = load_average()
    for thread in shippers:
        thread.join()
    stop.set()
    for thread in readers:
        thread.join()
    return LevelResult(
        len(runs), ingest_times, failed[0], counts["points"], counts["events"], pages,
        time.perf_counter() - started, load, rig.cpu.used_since(cpu_before),
    )  # fmt: skip


def print_ingest_tables(results: list[LevelResult], args: argparse.Namespace) -> None:
    print(
        "| shipping runs | ingest posts | ingest p50 ms | ingest p95 ms | failed | points/s "
        "| events/s | page requests | page p50 ms | page p95 ms | server CPU ms / request "
        "| load (1/5/15 min) |"
    )
    print("| ---: |" + " ---: |" * 10 + " --- |")
    for r in results:
        page = r.page_all()
        print(
            f"| {r.runs} | {len(r.ingest)} | {percentile(r.ingest, 0.5) * 1000:,.0f} "
            f"| {percentile(r.ingest, 0.95) * 1000:,.0f} | {r.ingest_failed} "
            f"| {r.points / args.ship_seconds:,.0f} | {r.events / args.ship_seconds:,.0f} "
            f"| {len(page)} | {percentile(page, 0.5) * 1000:,.0f} "
            f"| {percentile(page, 0.95) * 1000:,.0f} "
            f"| {r.cpu_s / max(len(r.ingest) + len(page), 1) * 1000:,.1f} | {r.load} |"
        )
    print("\nThe run page's requests, p95 ms (n) per level:\n")
    print("| request | " + " | ".join(f"{r.runs} runs" for r in results) + " |")
    print("| --- |" + " ---: |" * len(results))
    for label in PAGE_REQUESTS:
        cells = [
            f"{percentile(r.pages[label], 0.95) * 1000:,.0f} ({len(r.pages[label])})"
            if r.pages[label]
            else "-"
            for r in results
        ]
        print(f"| {label} | " + " | ".join(cells) + " |")


def ingest_readings(
    results: list[LevelResult], cpu_per_post: float, args: argparse.Namespace
) -> list[str]:
    xs = [float(r.runs) for r in results]
    lines = [f"\nAgainst concurrently shipping runs (x; predictions at x = {PREDICT_RUNS:g}):\n"]
    for name, values in (
        ("ingest p95 s", [percentile(r.ingest, 0.95) for r in results]),
        ("page p95 s", [percentile(r.page_all(), 0.95) for r in results]),
    ):
        if len(xs) >= 2:
            lines.append(f"- {reading(name, xs, values, 's', PREDICT_RUNS)}")
    first = results[0]
    page_cpu = (first.cpu_s - cpu_per_post * len(first.ingest)) / max(len(first.page_all()), 1)
    capacity = CORES / cpu_per_post if cpu_per_post > 0 else float("inf")
    lines.append(
        f"- capacity, from the server's CPU (gunicorn + PostgreSQL): {cpu_per_post * 1000:.1f} "
        f"ms per post of one step (calibration: {CALIBRATION_RUNS} runs, no page open), about "
        f"{max(page_cpu, 0) * 1000:.1f} ms per page request (the 1-run level). {CORES} cores "
        f"serve about {capacity:,.0f} posts/s if nothing else runs: "
        f"{capacity * args.step_seconds:,.0f} runs stepping every {args.step_seconds:g} s, "
        f"{capacity * 60:,.0f} stepping once a minute."
    )
    for period in (args.step_seconds, 60.0):
        cores = PREDICT_RUNS / period * cpu_per_post
        lines.append(
            f"- {PREDICT_RUNS:,} runs shipping a step every {period:g} s: "
            f"{PREDICT_RUNS / period:,.0f} posts/s, about {cores:,.1f} cores of server CPU "
            f"for ingestion alone (at this per-post cost; the p95 fit above assumes no "
            "saturation, which this says where it ends)."
        )
    return lines


# --- main ----------------------------------------------------------------------------------


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def capture_records(args: argparse.Namespace) -> list[list[StepRecord]]:
    """Rank 0's gathered records of a few real steps of a 4-policy PRP pool."""
    from trainer.zoo import build_zoo, default_zoo_dir

    zoo_dir = default_zoo_dir()
    build_zoo(zoo_dir, ids=[zoo_id for _, zoo_id in ZOO], log=lambda line: None)
    cell = run_pool(
        CAPTURE_REGIME, CAPTURE_POOL, args.length, prompts=args.prompts, group=args.group,
        steps=2, warmup=1, threads=args.threads, forced=not args.natural_length,
        zoo_dir=zoo_dir,
    )  # fmt: skip
    return cell.records


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="about 2 minutes in all")
    parser.add_argument("--part", choices=("all", "trainer", "ingest"), default="all")
    parser.add_argument("--regimes", nargs="+", default=list(REGIMES), choices=REGIMES)
    parser.add_argument("--pool-sizes", type=int, nargs="+", default=list(POOL_SIZES))
    parser.add_argument("--lengths", type=int, nargs="+", help="default 16..256 (quick: 3)")
    parser.add_argument("--length", type=int, default=32, help="length of the pool-size sweep")
    parser.add_argument("--prompts", type=int, help="prompts per step (default 8; quick 4)")
    parser.add_argument("--group", type=int, default=4, help="G")
    parser.add_argument("--steps", type=int, help="measured steps (default 3; quick 1)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per policy")
    parser.add_argument("--natural-length", action="store_true", help="let EOS end responses")
    parser.add_argument("--run-levels", type=int, nargs="+", default=list(RUN_LEVELS))
    parser.add_argument("--ship-seconds", type=float, help="per level (default 30; quick 10)")
    parser.add_argument("--step-seconds", type=float, default=2.0, help="one step per run")
    parser.add_argument("--viewers", type=int, default=4, help="run pages open at once")
    args = parser.parse_args(argv)
    args.lengths = args.lengths or list(QUICK_LENGTHS if args.quick else LENGTHS)
    args.prompts = args.prompts or (4 if args.quick else 8)
    args.steps = args.steps or (1 if args.quick else 3)
    args.ship_seconds = args.ship_seconds or (10.0 if args.quick else 30.0)
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    print(
        f"bench/scaling.py{' --quick' if args.quick else ''}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}; load at start "
        f"{load_average()}\n"
    )
    readings: list[str] = []
    captured: list[list[StepRecord]] = []
    if args.part in ("all", "trainer"):
        by_pool, by_length = trainer_part(args)
        print(
            f"### Trainer: against pool size ({args.length} new tokens"
            f"{', forced' if not args.natural_length else ''}; {args.prompts} prompts x "
            f"G={args.group} per policy; median of {args.steps} steps after {args.warmup} "
            f"warm-up; {args.threads} thread(s) per policy)\n"
        )
        print_trainer_tables(by_pool, "pool")
        print(f"\n### Trainer: against response length (pool of {LENGTH_POOL})\n")
        print_trainer_tables(by_length, "length")
        readings += trainer_readings(by_pool, by_length)
        captured = next(
            (
                c.records
                for c in by_pool
                if c.regime == CAPTURE_REGIME and c.pool == CAPTURE_POOL and c.records
            ),
            [],
        )
        print(f"\nload after the trainer part: {load_average()}")
    if args.part in ("all", "ingest"):
        if not captured:
            captured = capture_records(args)
        results, cpu_per_post = ingest_part(args, captured)
        n_points = statistics.fmean(step_points(step) for step in captured)
        n_events = statistics.fmean(sum(len(r.events) for r in step) for step in captured)
        print(
            f"\n### Ingestion and the run page against shipping runs ({args.ship_seconds:g} s "
            f"per level; one step every {args.step_seconds:g} s per run = {n_points:.0f} points "
            f"and {n_events:.0f} transfer events of a {CAPTURE_POOL}-policy {CAPTURE_REGIME} "
            f"step; trainer's Shipper, 1-s poll; {args.viewers} page viewers; gunicorn 2 "
            "sync workers, PostgreSQL)\n"
        )
        print_ingest_tables(results, args)
        readings += ingest_readings(results, cpu_per_post, args)
    print("\n### Reading\n")
    print(
        "Shape: of constant, line, power law and parabola in x, the one that best predicts "
        "each point fitted without it (leave-one-out; a simpler one within "
        f"{FIT_SLACK:.0%} wins), fitted to all; log-log slope over the positive points."
    )
    for line in readings:
        print(line)
    print(f"\ntotal {time.perf_counter() - started:.0f} s; load at the end {load_average()}")


if __name__ == "__main__":
    main()
