"""The tiny model zoo: tokenizers, architectures, SFT warm-start, builds and sources."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

from trainer.chat import format_prompt
from trainer.models import ModelSourceError
from trainer.tasks.arithmetic import ArithmeticTask
from trainer.zoo import ZOO_IDS, build_zoo, default_zoo_dir, resolve_model_source, zoo_model_dir
from trainer.zoo import build as zoo_build
from trainer.zoo.sft import dropped_carry, greedy_accuracy, greedy_completions, train_sft
from trainer.zoo.tokenizers import (
    CHAT_STYLES,
    build_corpus,
    train_byte_bpe,
    train_char_level,
    train_unigram_byte_fallback,
    train_wordpiece,
)

ROUND_TRIP_TEXTS = [
    "Compute 47+38.",
    "\\boxed{85} and 1234567890",
    "Hello, world!  Two  spaces\tand a tab\nand a newline",
    "Café, naïve, façade, Ångström, señor",
    "数学很有趣 漢字 かな",
    "emoji 🙂🚀 🦄 👩‍🔬 ✅",
]
VALIDATION = ArithmeticTask(seed=0, levels=(1, 2, 3)).validation()


def manifest(zoo_dir: Path, zoo_id: str) -> dict:
    return json.loads((zoo_dir / zoo_id / "zoo.json").read_text())


def failed_prompts(zoo_dir: Path, zoo_id: str) -> set[str]:
    correct = manifest(zoo_dir, zoo_id)["sft_val_correct"]
    return {problem.id for problem, ok in zip(VALIDATION, correct, strict=True) if not ok}


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return build_corpus(seed=0)


# --- tokenizers -------------------------------------------------------------------------
@pytest.mark.parametrize("text", ROUND_TRIP_TEXTS)
def test_byte_bpe_round_trips_any_text(corpus: list[str], text: str) -> None:
    tokenizer = train_byte_bpe(corpus, 400)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text
    assert tokenizer.unk_token_id not in ids


def test_byte_bpe_marks_spaces_with_g_dot(corpus: list[str]) -> None:
    tokenizer = train_byte_bpe(corpus, 400)
    pieces = tokenizer.convert_ids_to_tokens(
        tokenizer("a b", add_special_tokens=False)["input_ids"]
    )
    assert any(piece.startswith("Ġ") for piece in pieces)


@pytest.mark.parametrize("text", ROUND_TRIP_TEXTS)
def test_unigram_with_byte_fallback_round_trips_any_text(corpus: list[str], text: str) -> None:
    tokenizer = train_unigram_byte_fallback(corpus, 512)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text
    assert tokenizer.unk_token_id not in ids


def test_unigram_pieces_carry_the_word_marker_and_spell_unknown_characters_in_bytes(
    corpus: list[str],
) -> None:
    tokenizer = train_unigram_byte_fallback(corpus, 512)
    vocab = tokenizer.get_vocab()
    assert all(f"<0x{value:02X}>" in vocab for value in range(256))
    pieces = tokenizer.convert_ids_to_tokens(
        tokenizer("Compute the sum 🦄", add_special_tokens=False)["input_ids"]
    )
    assert pieces[0].startswith("▁")
    assert "<0xF0>" in pieces  # the unicorn is not in the corpus: spelled as UTF-8 bytes


def test_char_level_tokens_are_single_characters(corpus: list[str]) -> None:
    tokenizer = train_char_level(corpus)
    text = "Compute 47+38. Café 数学"
    pieces = tokenizer.convert_ids_to_tokens(tokenizer(text, add_special_tokens=False)["input_ids"])
    assert pieces == list(text)
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text


def test_char_level_maps_unseen_characters_to_unk(corpus: list[str]) -> None:
    tokenizer = train_char_level(corpus)
    ids = tokenizer("a🦄b", add_special_tokens=False)["input_ids"]
    assert ids[1] == tokenizer.unk_token_id
    assert len(ids) == 3


def test_wordpiece_marks_continuations_with_hashes(corpus: list[str]) -> None:
    tokenizer = train_wordpiece(corpus, 400)
    pieces = tokenizer.convert_ids_to_tokens(
        tokenizer("Reinforcement learning", add_special_tokens=False)["input_ids"]
    )
    assert any(piece.startswith("##") for piece in pieces)
    assert not pieces[0].startswith("##")


@pytest.mark.parametrize(
    "train",
    [
        lambda corpus: train_byte_bpe(corpus, 400),
        lambda corpus: train_unigram_byte_fallback(corpus, 512),
        lambda corpus: train_wordpiece(corpus, 400),
    ],
    ids=["byte_bpe", "unigram", "wordpiece"],
)
def test_tokenizer_training_is_reproducible(corpus: list[str], train) -> None:
    first: PreTrainedTokenizerFast = train(corpus)
    second: PreTrainedTokenizerFast = train(corpus)
    assert first.backend_tokenizer.to_str() == second.backend_tokenizer.to_str()


def test_every_tokenizer_has_the_shared_special_tokens(corpus: list[str]) -> None:
    for tokenizer in (
        train_byte_bpe(corpus, 400),
        train_unigram_byte_fallback(corpus, 512),
        train_char_level(corpus),
        train_wordpiece(corpus, 400),
    ):
        assert (tokenizer.bos_token, tokenizer.eos_token) == ("<s>", "</s>")
        assert (tokenizer.pad_token, tokenizer.unk_token) == ("<pad>", "<unk>")


# --- the built zoo ----------------------------------------------------------------------
def test_the_three_policies_differ_in_architecture_and_tokenizer(zoo_dir: Path) -> None:
    manifests = [manifest(zoo_dir, zoo_id) for zoo_id in ZOO_IDS]
    assert {m["model_type"] for m in manifests} == {"llama", "qwen2", "gpt2"}
    assert {m["tokenizer_kind"] for m in manifests} == {
        "char",
        "byte_bpe",
        "unigram_byte_fallback",
    }
    for m in manifests:
        assert 100_000 <= m["n_params"] <= 1_500_000


@pytest.mark.parametrize("zoo_id", ZOO_IDS)
def test_a_policy_loads_back_offline_with_the_auto_classes(zoo_dir: Path, zoo_id: str) -> None:
    directory = zoo_dir / zoo_id
    model = AutoModelForCausalLM.from_pretrained(directory, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    recorded = manifest(zoo_dir, zoo_id)
    assert model.config.model_type == recorded["model_type"]
    assert sum(p.numel() for p in model.parameters()) == recorded["n_params"]
    assert tokenizer.chat_template == recorded["chat_template"]
    assert model.config.eos_token_id == tokenizer.eos_token_id
    assert model.config.pad_token_id == tokenizer.pad_token_id


@pytest.mark.parametrize("zoo_id", ZOO_IDS)
def test_the_manifest_records_the_build(zoo_dir: Path, zoo_id: str) -> None:
    recorded = manifest(zoo_dir, zoo_id)
    assert recorded["id"] == zoo_id
    assert recorded["seed"] == 0
    assert recorded["build_version"] == zoo_build.BUILD_VERSION
    # The recipe's steps, plus whole checks of 100 where the CPU left it below the floor.
    extra = recorded["sft_steps"] - zoo_build.RECIPES[zoo_id].sft.steps
    assert 0 <= extra <= zoo_build.SFT_MAX_EXTRA_STEPS and extra % 100 == 0
    assert recorded["family"] == zoo_build.RECIPES[zoo_id].family


@pytest.mark.parametrize("zoo_id", ZOO_IDS)
def test_prompts_render_with_the_policys_own_chat_template(zoo_dir: Path, zoo_id: str) -> None:
    tokenizer = AutoTokenizer.from_pretrained(zoo_dir / zoo_id, local_files_only=True)
    style = zoo_build.RECIPES[zoo_id].chat
    assert format_prompt(tokenizer, "Compute 3+5.") == style.render("Compute 3+5.")


def test_each_family_has_its_own_chat_template() -> None:
    templates = {style.template for style in CHAT_STYLES.values()}
    assert len(templates) == len(CHAT_STYLES)


@pytest.mark.parametrize("zoo_id", ZOO_IDS)
def test_left_padded_batched_generation_matches_one_prompt_at_a_time(
    zoo_dir: Path, zoo_id: str
) -> None:
    model = AutoModelForCausalLM.from_pretrained(zoo_dir / zoo_id, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(zoo_dir / zoo_id, local_files_only=True)
    prompts = [problem.prompt for problem in VALIDATION[::9]]
    batched = greedy_completions(model, tokenizer, prompts)
    one_by_one = [greedy_completions(model, tokenizer, [prompt])[0] for prompt in prompts]
    assert batched == one_by_one
    assert all(completion.startswith("\\boxed{") for completion in batched)


def test_sft_leaves_partial_and_different_accuracies(zoo_dir: Path) -> None:
    accuracies = [manifest(zoo_dir, zoo_id)["sft_val_accuracy"] for zoo_id in ZOO_IDS]
    assert all(0.2 <= accuracy <= 0.7 for accuracy in accuracies), accuracies
    assert len(set(accuracies)) == len(accuracies)


def test_policies_fail_on_different_prompts(zoo_dir: Path) -> None:
    for first in ZOO_IDS:
        for second in ZOO_IDS:
            if first != second:
                # Each solves something the other fails: a peer can always teach something.
                assert failed_prompts(zoo_dir, first) - failed_prompts(zoo_dir, second)


@pytest.mark.parametrize("zoo_id", ZOO_IDS)
def test_the_recorded_accuracy_is_that_of_the_saved_model(zoo_dir: Path, zoo_id: str) -> None:
    model = AutoModelForCausalLM.from_pretrained(zoo_dir / zoo_id, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(zoo_dir / zoo_id, local_files_only=True)
    accuracy, correct = greedy_accuracy(model, tokenizer, VALIDATION)
    assert correct == manifest(zoo_dir, zoo_id)["sft_val_correct"]
    assert accuracy == manifest(zoo_dir, zoo_id)["sft_val_accuracy"]


def test_dropped_carry_only_changes_additions_that_carry() -> None:
    assert dropped_carry("47+38", 85) == 75
    assert dropped_carry("9+5", 14) == 4
    assert dropped_carry("41+38", 79) == 79
    assert dropped_carry("83-38", 45) == 45


# --- building ---------------------------------------------------------------------------
def test_building_twice_from_the_same_seed_gives_identical_weights() -> None:
    first = zoo_build.make_policy("tiny-gpt2-unigram", seed=3, sft_steps=15)
    second = zoo_build.make_policy("tiny-gpt2-unigram", seed=3, sft_steps=15)
    other_seed = zoo_build.make_policy("tiny-gpt2-unigram", seed=4, sft_steps=15)
    weights, again = first.model.state_dict(), second.model.state_dict()
    assert weights.keys() == again.keys()
    assert all(torch.equal(weights[name], again[name]) for name in weights)
    assert first.tokenizer.backend_tokenizer.to_str() == second.tokenizer.backend_tokenizer.to_str()
    assert first.manifest["sft_val_correct"] == second.manifest["sft_val_correct"]
    assert not torch.equal(
        weights["lm_head.weight"], other_seed.model.state_dict()["lm_head.weight"]
    )


def test_build_zoo_reuses_an_existing_build(zoo_dir: Path) -> None:
    before = {path: path.stat().st_mtime_ns for path in zoo_dir.glob("*/*")}
    messages: list[str] = []
    started = time.monotonic()
    paths = build_zoo(zoo_dir, seed=0, log=messages.append)
    assert time.monotonic() - started < 5
    assert paths == {zoo_id: zoo_dir / zoo_id for zoo_id in ZOO_IDS}
    assert all("up to date" in message for message in messages)
    assert {path: path.stat().st_mtime_ns for path in zoo_dir.glob("*/*")} == before


def test_a_build_from_another_seed_or_recipe_is_not_reused(zoo_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "tiny-qwen-bpe"
    shutil.copytree(zoo_dir / "tiny-qwen-bpe", copy)
    assert zoo_build.is_current(copy, "tiny-qwen-bpe", seed=0)
    assert not zoo_build.is_current(copy, "tiny-qwen-bpe", seed=1)
    recorded = manifest(tmp_path, "tiny-qwen-bpe")
    (copy / "zoo.json").write_text(json.dumps({**recorded, "recipe": "something-else"}))
    assert not zoo_build.is_current(copy, "tiny-qwen-bpe", seed=0)


def test_a_crashed_build_leaves_no_directory_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = zoo_build.make_policy("tiny-gpt2-unigram", seed=0, sft_steps=1)
    monkeypatch.setattr(zoo_build, "make_policy", lambda zoo_id, seed: policy)

    def crash_half_way(policy: zoo_build.Policy, directory: Path) -> None:
        policy.model.save_pretrained(directory)
        raise OSError("disk full")

    monkeypatch.setattr(zoo_build, "save_policy", crash_half_way)
    with pytest.raises(OSError, match="disk full"):
        zoo_build.build_one("tiny-gpt2-unigram", str(tmp_path), seed=0)
    assert list(tmp_path.iterdir()) == []


def _modes(root: Path) -> dict[str, int]:
    """The permission bits of ``root`` and of everything under it, by relative path."""
    paths = [root, *sorted(root.rglob("*"))]
    return {str(path.relative_to(root)): path.stat().st_mode & 0o777 for path in paths}


def test_a_built_policy_is_world_readable_whatever_the_umask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # safetensors writes model.safetensors owner-only (0600), and a private umask makes
    # every other file so too; the built directory must serve everyone sharing the zoo.
    policy = zoo_build.make_policy("tiny-gpt2-unigram", seed=0, sft_steps=1)
    monkeypatch.setattr(zoo_build, "make_policy", lambda zoo_id, seed: policy)
    previous = os.umask(0o077)
    try:
        zoo_build.build_one("tiny-gpt2-unigram", str(tmp_path), seed=0)
    finally:
        os.umask(previous)
    built = tmp_path / "tiny-gpt2-unigram"
    modes = _modes(built)
    assert "model.safetensors" in modes and "zoo.json" in modes
    expected = {name: 0o755 if (built / name).is_dir() else 0o644 for name in modes}
    assert modes == expected


def test_reusing_a_build_with_private_files_makes_it_readable(
    zoo_dir: Path, tmp_path: Path
) -> None:
    # A zoo built before the modes were fixed: build_zoo reuses it (no rebuild) and
    # opens it up.
    copy = tmp_path / "tiny-qwen-bpe"
    shutil.copytree(zoo_dir / "tiny-qwen-bpe", copy)
    (copy / "model.safetensors").chmod(0o600)
    copy.chmod(0o700)
    before = (copy / "model.safetensors").stat().st_mtime_ns
    build_zoo(tmp_path, seed=0, ids=["tiny-qwen-bpe"])
    assert (copy / "model.safetensors").stat().st_mtime_ns == before  # not rebuilt
    assert set(_modes(copy).values()) == {0o644, 0o755}
    assert _modes(copy)["model.safetensors"] == 0o644 and _modes(copy)["."] == 0o755


def test_the_test_zoo_is_world_readable(zoo_dir: Path) -> None:
    for zoo_id in ZOO_IDS:
        modes = _modes(zoo_dir / zoo_id)
        assert set(modes.values()) <= {0o644, 0o755}, (zoo_id, modes)


def test_build_zoo_rejects_an_unknown_id(tmp_path: Path) -> None:
    with pytest.raises(ModelSourceError, match="tiny-llama-char"):
        build_zoo(tmp_path, ids=["tiny-bert"])


# --- model sources ----------------------------------------------------------------------
def test_a_zoo_source_resolves_to_its_built_directory(zoo_dir: Path) -> None:
    assert resolve_model_source("zoo:tiny-qwen-bpe", zoo_dir) == zoo_dir / "tiny-qwen-bpe"
    assert zoo_model_dir("tiny-qwen-bpe", zoo_dir) == zoo_dir / "tiny-qwen-bpe"


def test_an_unbuilt_zoo_model_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(ModelSourceError, match="python -m trainer zoo build") as error:
        resolve_model_source("zoo:tiny-llama-char", tmp_path)
    assert "is not built in" in str(error.value)
    assert str(tmp_path) in str(error.value)


def test_an_unbuilt_complementary_zoo_model_names_its_recipe_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ModelSourceError) as error:
        resolve_model_source("zoo:tiny-qwen-bpe-sub", tmp_path)
    command = f"python -m trainer zoo build --recipe complementary --zoo-dir {tmp_path}"
    assert f"run `{command}`" in str(error.value)


def test_an_unknown_zoo_id_lists_the_zoo(tmp_path: Path) -> None:
    with pytest.raises(ModelSourceError) as error:
        resolve_model_source("zoo:tiny-bert", tmp_path)
    assert all(zoo_id in str(error.value) for zoo_id in ZOO_IDS)


def test_any_other_source_is_a_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_model_source("~/models/llama") == tmp_path / "models" / "llama"
    assert resolve_model_source("/models/qwen") == Path("/models/qwen")


def test_the_default_zoo_dir_honours_mrl_zoo_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MRL_ZOO_DIR", str(tmp_path / "zoo"))
    assert default_zoo_dir() == tmp_path / "zoo"
    monkeypatch.delenv("MRL_ZOO_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_zoo_dir() == tmp_path / ".cache" / "mutual-rl-lab" / "zoo"


def test_sft_goes_on_in_checks_until_done_or_the_cap() -> None:
    recipe = zoo_build.RECIPES["tiny-gpt2-unigram"]
    tokenizer = zoo_build.make_tokenizer(recipe, seed=0)
    config = dataclasses.replace(recipe.sft, steps=2, batch_size=4)
    answers = iter([False, False, True])
    model = zoo_build.build_model(recipe.family, tokenizer, recipe.size, 0)
    losses = train_sft(model, tokenizer, config, 0, done=lambda: next(answers),
                       check_every=3, max_extra_steps=100)  # fmt: skip
    assert len(losses) == 2 + 3 + 3  # two checks said "not yet", the third "done"
    model = zoo_build.build_model(recipe.family, tokenizer, recipe.size, 0)
    capped = train_sft(model, tokenizer, config, 0, done=lambda: False, check_every=3,
                       max_extra_steps=4)  # fmt: skip
    assert len(capped) == 2 + 4  # never done: stops at the cap, the last check cut short
    assert not model.training


def test_a_second_builder_of_one_zoo_waits_for_the_first_and_reuses_its_policies(
    zoo_dir: Path,
) -> None:
    import threading

    finished = threading.Event()
    lines: list[str] = []

    def second_builder() -> None:
        build_zoo(zoo_dir, seed=0, log=lines.append)
        finished.set()

    with zoo_build._exclusive_lock(zoo_dir / ".build.lock"):  # the first builder, mid-build
        thread = threading.Thread(target=second_builder)
        thread.start()
        assert not finished.wait(1.0), "the second builder did not wait for the lock"
    assert finished.wait(30), "the second builder never got the lock"
    thread.join()
    assert lines == [f"zoo: {i} is up to date in {zoo_dir / i}" for i in ZOO_IDS]


def test_a_low_priority_build_lowers_the_childs_priority_never_the_callers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The demo builds the normal zoo beside its runs at a lower CPU priority: the child
    process renices itself; on one CPU the build still goes to a child, so the caller
    (the demo setup, a Celery worker) keeps its own priority."""
    niced: list[int] = []
    built: list[tuple[str, str, int]] = []
    monkeypatch.setattr(zoo_build.os, "nice", niced.append)
    monkeypatch.setattr(zoo_build, "build_one", lambda *args: built.append(args))
    zoo_build.main(["tiny-qwen-bpe", str(tmp_path), "0", "10"])
    assert (niced, built) == ([10], [("tiny-qwen-bpe", str(tmp_path), 0)])
    zoo_build.main(["tiny-qwen-bpe", str(tmp_path), "0"])
    assert niced == [10]  # no niceness given: none asked for

    children: list[tuple[str, int]] = []
    monkeypatch.setattr(zoo_build.os, "sched_getaffinity", lambda _pid: {0})
    monkeypatch.setattr(
        zoo_build,
        "_build_in_child",
        lambda zoo_id, _dir, _seed, niceness: children.append((zoo_id, niceness)) or {},
    )
    list(zoo_build._run_builds(["tiny-qwen-bpe"], tmp_path, 0, niceness=10))
    assert children == [("tiny-qwen-bpe", 10)]
