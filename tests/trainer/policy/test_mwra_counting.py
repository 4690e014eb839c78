"""Parameter counts for MWRA (trainer.mwra_counting): declared, a zoo manifest, an
estimate from config.json checked against hand-computed sizes, else 1 with a note."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from trainer.mwra_counting import estimate_parameters, parameter_count

REPO = Path(__file__).resolve().parents[3]
B = 1_000_000_000

GPT2_TINY = {
    "model_type": "gpt2",
    "n_embd": 64,
    "n_layer": 2,
    "n_inner": 256,
    "n_positions": 128,
    "vocab_size": 512,
    "tie_word_embeddings": True,
}
LLAMA_TINY = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "intermediate_size": 256,
    "vocab_size": 163,
    "tie_word_embeddings": True,
}


def test_it_estimates_gpt2_and_llama_exactly() -> None:
    # GPT-2: wte 512x64 + wpe 128x64 + 2 x (2 LN 256 + c_attn 12480 + proj 4160
    # + fc 16640 + proj 16448) + ln_f 128.
    assert estimate_parameters(GPT2_TINY) == 32768 + 8192 + 2 * 49984 + 128
    # Llama: embed 163x64 + 2 x (q,k,v,o 4x4096 + mlp 3x16384 + 2 norms 128) + norm 64.
    assert estimate_parameters(LLAMA_TINY) == 10432 + 2 * (16384 + 49152 + 128) + 64
    assert estimate_parameters({"model_type": "llama"}) is None


def test_parameter_counts_come_from_the_best_source(tmp_path: Path) -> None:
    model_dir = tmp_path / "llama"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(LLAMA_TINY))
    zoo = tmp_path / "zoo"
    (zoo / "tiny-qwen-bpe").mkdir(parents=True)
    (zoo / "tiny-qwen-bpe" / "zoo.json").write_text(json.dumps({"n_params": 149184}))

    assert parameter_count(str(model_dir), declared=5 * B).value == 5 * B
    from_config = parameter_count(str(model_dir))
    assert (from_config.value, from_config.origin) == (141824, "config.json")
    from_zoo = parameter_count("zoo:tiny-qwen-bpe", zoo_dir=zoo)
    assert (from_zoo.value, from_zoo.origin) == (149184, "zoo")
    unbuilt = parameter_count("zoo:tiny-llama-char", zoo_dir=zoo)
    assert (unbuilt.value, unbuilt.origin) == (1, "fallback")
    assert "not built" in unbuilt.note
    missing = parameter_count(str(tmp_path / "nowhere"))
    assert (missing.value, missing.origin) == (1, "fallback")
    assert "counted as 1" in missing.note


def test_the_complementary_pools_zoo_ids_are_counted_from_their_manifests(
    tmp_path: Path,
) -> None:
    # Issue 18: the complementary-skills policies are zoo ids too (ALL_ZOO_IDS); before,
    # only the normal zoo's ids were looked up and these counted as "unknown", i.e. 1.
    from trainer.zoo import ALL_ZOO_IDS, COMPLEMENTARY_IDS

    assert set(COMPLEMENTARY_IDS) <= set(ALL_ZOO_IDS)
    zoo = tmp_path / "zoo"
    for count, zoo_id in enumerate(COMPLEMENTARY_IDS, start=141824):
        (zoo / zoo_id).mkdir(parents=True)
        (zoo / zoo_id / "zoo.json").write_text(json.dumps({"n_params": count}))
    for count, zoo_id in enumerate(COMPLEMENTARY_IDS, start=141824):
        counted = parameter_count(f"zoo:{zoo_id}", zoo_dir=zoo)
        assert (counted.value, counted.origin) == (count, "zoo"), zoo_id
    unbuilt = parameter_count(f"zoo:{COMPLEMENTARY_IDS[0]}", zoo_dir=tmp_path / "empty")
    assert (unbuilt.value, unbuilt.origin) == (1, "fallback")
    assert "not built" in unbuilt.note and "--recipe complementary" in unbuilt.note
    unknown = parameter_count("zoo:tiny-nothing", zoo_dir=zoo)
    assert (unknown.value, unknown.origin) == (1, "fallback") and "unknown" in unknown.note


def test_counting_imports_without_torch() -> None:
    code = (
        "import sys, trainer.mwra_counting; "
        "assert 'torch' not in sys.modules, 'mwra_counting imported torch'"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
