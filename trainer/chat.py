"""Turning a problem into the text a policy sees, with that policy's chat template.

A prompt is one user turn, optionally preceded by a system turn and worked examples
(:class:`PromptContext`: the task config's ``system_prompt`` and ``few_shot``), rendered
by each policy's own template: a heterogeneous pool sees the same chat, each policy in
its own format. The empty context renders exactly the one-turn prompt of before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Used when a tokenizer has no chat template and the config names none.
PLAIN_TEMPLATE = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"


@dataclass(frozen=True)
class PromptContext:
    """What comes before the problem in every prompt of a run: a system prompt (none when
    empty) and worked examples, ``(user, assistant)`` turns in order. Fixed for the run,
    so every prompt of a policy starts with the same tokens."""

    system_prompt: str = ""
    examples: tuple[tuple[str, str], ...] = ()

    def messages(self, user_text: str) -> list[dict[str, str]]:
        """The chat: [system], then each example's user and assistant turns, then the
        problem's user turn."""
        chat: list[dict[str, str]] = []
        if self.system_prompt:
            chat.append({"role": "system", "content": self.system_prompt})
        for question, answer in self.examples:
            chat.append({"role": "user", "content": question})
            chat.append({"role": "assistant", "content": answer})
        chat.append({"role": "user", "content": user_text})
        return chat


NO_CONTEXT = PromptContext()
"""The one-turn prompt: no system prompt, no examples."""


def format_prompt(
    tokenizer: Any,
    user_text: str,
    chat_template: str | None = None,
    context: PromptContext | None = None,
) -> str:
    """The full prompt string (template applied, generation prompt added, not tokenized).

    ``chat_template`` (a Jinja string) overrides the tokenizer's own; a tokenizer without
    one falls back to :data:`PLAIN_TEMPLATE`. ``context`` puts a system prompt and worked
    examples before the problem (None: the problem alone).
    """
    template = chat_template or getattr(tokenizer, "chat_template", None) or PLAIN_TEMPLATE
    return tokenizer.apply_chat_template(
        (context or NO_CONTEXT).messages(user_text),
        chat_template=template,
        add_generation_prompt=True,
        tokenize=False,
    )


class PromptTooLongError(ValueError):
    """A prompt and its response limit do not fit in the model's positions; the message
    says which settings shorten them (:func:`context_overflow`)."""


def context_overflow(prompt_tokens: int, max_new_tokens: int, window: int | None) -> str | None:
    """Why ``prompt_tokens`` (the longest prompt) plus ``max_new_tokens`` do not fit in a
    model of ``window`` positions, with what to change; None when they fit (or the model
    declares no window). A model with learned positions (GPT-2) fails with an index error
    past its window, one with rotary positions (Llama, Qwen) runs on, outside what it was
    trained on: both are refused."""
    if window is None or prompt_tokens + max_new_tokens <= window:
        return None
    return (
        f"the longest prompt is {prompt_tokens} tokens and max_new_tokens {max_new_tokens} "
        f"more make {prompt_tokens + max_new_tokens}, past the model's {window} positions: "
        "use fewer task.few_shot examples, a shorter task.system_prompt, or a smaller "
        "max_new_tokens"
    )
