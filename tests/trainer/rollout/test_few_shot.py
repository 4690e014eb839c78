"""Few-shot prompts and a system prompt from the task config (issue 33): each zoo
tokenizer renders the same chat through its own template; the examples come from the
train split, never validation, the same for every step; the defaults render exactly the
one-turn prompt of before."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.zoo_policy import zoo_policy
from trainer.chat import PLAIN_TEMPLATE, PromptContext, format_prompt
from trainer.config import ConfigError, RunConfig, TaskConfig
from trainer.models import load_tokenizer
from trainer.tasks import make_task
from trainer.tasks.few_shot import FEW_SHOT_STEP, few_shot_examples, prompt_context
from trainer.zoo import ZOO_IDS

SYSTEM = "Answer with \\boxed{}."


def old_format_prompt(tokenizer: Any, user_text: str, chat_template: str | None = None) -> str:
    """``trainer.chat.format_prompt`` before issue 33, verbatim."""
    template = chat_template or getattr(tokenizer, "chat_template", None) or PLAIN_TEMPLATE
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": user_text}],
        chat_template=template,
        add_generation_prompt=True,
        tokenize=False,
    )


@pytest.mark.parametrize("zoo_id", ZOO_IDS)
@pytest.mark.parametrize("template", [None, PLAIN_TEMPLATE])
def test_the_default_context_renders_the_prompt_of_before(
    zoo_dir: Path, zoo_id: str, template: str | None
) -> None:
    tokenizer = load_tokenizer(zoo_dir / zoo_id)
    problems = make_task(TaskConfig(), seed=0).train_batch(1, 8)
    context = prompt_context(TaskConfig(), make_task(TaskConfig(), seed=0))
    assert context == PromptContext()
    for problem in problems:
        old = old_format_prompt(tokenizer, problem.prompt, template)
        assert format_prompt(tokenizer, problem.prompt, template) == old
        assert format_prompt(tokenizer, problem.prompt, template, context) == old
        ids = tokenizer.encode(old, add_special_tokens=False)
        new = format_prompt(tokenizer, problem.prompt, template, context)
        assert tokenizer.encode(new, add_special_tokens=False) == ids


@pytest.mark.parametrize("zoo_id", ZOO_IDS)
def test_each_tokenizer_renders_the_few_shot_chat_through_its_own_template(
    zoo_dir: Path, zoo_id: str
) -> None:
    config = TaskConfig(few_shot=3, system_prompt=SYSTEM)
    task = make_task(config, seed=0)
    context = prompt_context(config, task)
    tokenizer = load_tokenizer(zoo_dir / zoo_id)
    problem = task.train_batch(1, 1)[0]
    text = format_prompt(tokenizer, problem.prompt, None, context)
    assert text == tokenizer.apply_chat_template(
        context.messages(problem.prompt), add_generation_prompt=True, tokenize=False
    )
    assert SYSTEM in text
    assert text.index(SYSTEM) < min(text.index(q) for q, _ in context.examples)
    positions = [text.index(q) for q, _ in context.examples] + [text.rindex(problem.prompt)]
    assert positions == sorted(positions)
    for question, answer in context.examples:
        assert answer == f"\\boxed{{{int(answer[7:-1])}}}"
        assert text.index(answer) > text.index(question)
    # the problem's own turn ends the prompt as the one-turn prompt ends it
    assert text.endswith(old_format_prompt(tokenizer, problem.prompt).split(problem.prompt)[-1])


def test_the_zoo_templates_render_the_same_chat_differently(zoo_dir: Path) -> None:
    config = TaskConfig(few_shot=2, system_prompt=SYSTEM)
    task = make_task(config, seed=0)
    context = prompt_context(config, task)
    problem = task.train_batch(1, 1)[0]
    texts = {
        zoo_id: format_prompt(load_tokenizer(zoo_dir / zoo_id), problem.prompt, None, context)
        for zoo_id in ZOO_IDS
    }
    assert len(set(texts.values())) == len(ZOO_IDS)
    for text in texts.values():
        assert all(q in text and a in text for q, a in context.examples)


@pytest.mark.parametrize(
    "config",
    [
        TaskConfig(kind="arithmetic", levels=[1, 2, 3], split="seed", val_size=64),
        TaskConfig(kind="arithmetic", levels=[3, 4], split="hash", val_size=32),
        TaskConfig(kind="addition_slices", val_size=40),
    ],
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_examples_come_from_train_never_from_validation(config: TaskConfig, seed: int) -> None:
    config = dataclasses.replace(config, few_shot=6)
    task = make_task(config, seed=seed)
    examples = few_shot_examples(task, config.few_shot)
    assert len(examples) == 6
    assert examples == task.train_batch(FEW_SHOT_STEP, 6)
    held_out = {p.prompt for p in task.validation()}
    assert not held_out & {p.prompt for p in examples}
    # fixed for the run: the same for every call, and for a fresh task of the same seed
    again = prompt_context(config, make_task(config, seed=seed))
    assert again == prompt_context(config, task)
    assert again.examples == tuple((p.prompt, f"\\boxed{{{p.answer}}}") for p in examples)


def test_file_task_examples_are_train_rows(tmp_path: Path) -> None:
    rows = [{"problem": f"What is {i}+1?", "answer": str(i + 1)} for i in range(20)]
    train, val = tmp_path / "train.jsonl", tmp_path / "val.jsonl"
    train.write_text("\n".join(json.dumps(r) for r in rows))
    val.write_text("\n".join(json.dumps(r) for r in rows[:5]))
    config = TaskConfig(
        kind="math_file", train_path=str(train), val_path=str(val), val_size=5, few_shot=4
    )
    task = make_task(config, seed=3)
    context = prompt_context(config, task)
    held_out = {p.prompt for p in task.validation()}
    assert len(context.examples) == 4
    assert not held_out & {q for q, _ in context.examples}


def test_a_policy_renders_the_run_context(zoo_dir: Path) -> None:
    config = RunConfig.from_dict(
        {
            "pool": [{"name": "a", "model": "zoo:tiny-qwen-bpe"}],
            "task": {"few_shot": 2, "system_prompt": SYSTEM},
        }
    )
    task = make_task(config.task, seed=config.seed)
    policy = zoo_policy("a", "tiny-qwen-bpe", zoo_dir, config)
    problems = task.train_batch(1, 2)
    assert policy.prompt_texts(problems) == [
        old_format_prompt(policy.tokenizer, p.prompt) for p in problems
    ]
    policy.prompt_context = prompt_context(config.task, task)
    texts = policy.prompt_texts(problems)
    for problem, text in zip(problems, texts, strict=True):
        assert SYSTEM in text
        assert all(q in text and a in text for q, a in policy.prompt_context.examples)
        one_turn = old_format_prompt(policy.tokenizer, problem.prompt)
        assert text.endswith(one_turn[one_turn.index(problem.prompt) :])
    # every prompt of the run starts with the same tokens: the system prompt and examples
    first, second = (policy.engine.encode_prompts([t])[0] for t in texts)
    context_ids = policy.engine.encode_prompts([texts[0][: texts[0].rindex(problems[0].prompt)]])
    shared = next(i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b)
    assert shared >= len(context_ids[0]) - 1


def test_the_fields_are_in_the_config_and_checked() -> None:
    config = RunConfig.from_dict({"pool": [{"name": "a", "model": "zoo:tiny-qwen-bpe"}]})
    assert (config.task.system_prompt, config.task.few_shot) == ("", 0)
    data = config.to_dict()
    data["task"]["few_shot"] = -1
    with pytest.raises(ConfigError) as caught:
        RunConfig.from_dict(data)
    assert "task.few_shot" in caught.value.errors
    fields = {f.name: f for f in dataclasses.fields(TaskConfig)}
    assert fields["few_shot"].metadata["label"] == "Few-shot examples"
    assert fields["system_prompt"].metadata["help"]
