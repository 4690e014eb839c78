"""Loading local causal LMs: every unusable source fails early with a fix-it message."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import BertConfig, PreTrainedTokenizerFast

from trainer.models import (
    ModelSourceError,
    check_model_source,
    load_causal_lm,
    load_tokenizer,
)
from trainer.zoo import ZOO_IDS
from trainer.zoo.tokenizers import build_corpus, train_char_level

REPO = Path(__file__).resolve().parents[3]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def copy_without_tokenizer(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(*TOKENIZER_FILES))
    return target


@pytest.mark.parametrize("zoo_id", ZOO_IDS)
def test_a_built_zoo_policy_passes_the_check(zoo_dir: Path, zoo_id: str) -> None:
    check_model_source(zoo_dir / zoo_id)


def test_it_rejects_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(ModelSourceError, match="does not exist") as error:
        check_model_source(tmp_path / "nowhere")
    assert "zoo:<id>" in str(error.value)


def test_it_rejects_a_directory_without_a_config(tmp_path: Path) -> None:
    with pytest.raises(ModelSourceError, match=r"no config\.json"):
        check_model_source(tmp_path)


def test_it_rejects_an_unreadable_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelSourceError, match="cannot read the config"):
        check_model_source(tmp_path)


def test_it_rejects_an_encoder_only_model(zoo_dir: Path, tmp_path: Path) -> None:
    BertConfig(
        vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2
    ).save_pretrained(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(zoo_dir / "tiny-qwen-bpe" / name, tmp_path / name)
    with pytest.raises(ModelSourceError, match="not a causal language model") as error:
        check_model_source(tmp_path)
    assert "'bert'" in str(error.value)
    assert "decoder-only" in str(error.value)


def test_it_rejects_a_model_without_a_tokenizer(zoo_dir: Path, tmp_path: Path) -> None:
    model_dir = copy_without_tokenizer(zoo_dir / "tiny-llama-char", tmp_path / "model")
    with pytest.raises(ModelSourceError, match="no tokenizer in") as error:
        check_model_source(model_dir)
    assert "save_pretrained" in str(error.value)


def test_it_accepts_a_tokenizer_from_another_directory(zoo_dir: Path, tmp_path: Path) -> None:
    model_dir = copy_without_tokenizer(zoo_dir / "tiny-llama-char", tmp_path / "model")
    check_model_source(model_dir, tokenizer_dir=zoo_dir / "tiny-llama-char")
    with pytest.raises(ModelSourceError, match="no tokenizer in"):
        check_model_source(zoo_dir / "tiny-llama-char", tokenizer_dir=tmp_path)


def test_the_check_never_reads_the_weights(zoo_dir: Path, tmp_path: Path) -> None:
    model_dir = tmp_path / "model"
    shutil.copytree(zoo_dir / "tiny-gpt2-unigram", model_dir)
    (model_dir / "model.safetensors").write_bytes(b"not weights")
    check_model_source(model_dir)


def test_model_source_errors_are_value_errors() -> None:
    assert issubclass(ModelSourceError, ValueError)


def test_the_tokenizer_pads_on_the_left(zoo_dir: Path) -> None:
    tokenizer = load_tokenizer(zoo_dir / "tiny-qwen-bpe")
    assert tokenizer.padding_side == "left"
    batch = tokenizer(["Compute 3+5.", "Compute 47+38."], padding=True, add_special_tokens=False)
    assert batch["input_ids"][0][0] == tokenizer.pad_token_id


def test_a_tokenizer_without_pad_token_pads_with_eos(tmp_path: Path) -> None:
    tokenizer = train_char_level(build_corpus(seed=0))
    bare = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer.backend_tokenizer, eos_token="</s>", unk_token="<unk>"
    )
    bare.save_pretrained(tmp_path)
    loaded = load_tokenizer(tmp_path)
    assert loaded.pad_token == "</s>"
    assert loaded.pad_token_id == loaded.eos_token_id


@pytest.mark.parametrize(
    ("dtype", "expected"), [("float32", torch.float32), ("bfloat16", torch.bfloat16)]
)
def test_the_model_loads_in_the_requested_dtype(
    zoo_dir: Path, dtype: str, expected: torch.dtype
) -> None:
    model = load_causal_lm(zoo_dir / "tiny-llama-char", dtype=dtype)
    assert next(model.parameters()).dtype == expected


def test_an_unknown_dtype_is_rejected(zoo_dir: Path) -> None:
    with pytest.raises(ModelSourceError, match="float16"):
        load_causal_lm(zoo_dir / "tiny-llama-char", dtype="float64")


def test_the_error_type_and_zoo_ids_import_without_torch() -> None:
    code = (
        "import sys, trainer.models, trainer.zoo; "
        "heavy = {'torch', 'transformers'} & set(sys.modules); "
        "assert not heavy, heavy"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_loading_a_model_draws_no_progress_bar_into_the_job_log(zoo_dir: Path) -> None:
    # A fresh process: transformers draws its "Loading weights" bar by default, and a
    # job's log (whose last lines a failed run's reason quotes) would carry it.
    code = (
        "from pathlib import Path; from trainer.models import load_causal_lm; "
        f"load_causal_lm(Path({str(zoo_dir / 'tiny-gpt2-unigram')!r})); print('loaded')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "loaded"
    assert "Loading weights" not in done.stderr, done.stderr[-500:]
