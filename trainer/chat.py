"""Turning a problem into the text a policy sees, with that policy's chat template."""

from __future__ import annotations

from typing import Any

# Used when a tokenizer has no chat template and the config names none.
PLAIN_TEMPLATE = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"


def format_prompt(tokenizer: Any, user_text: str, chat_template: str | None = None) -> str:
    """The full prompt string (template applied, generation prompt added, not tokenized).

    ``chat_template`` (a Jinja string) overrides the tokenizer's own; a tokenizer without
    one falls back to :data:`PLAIN_TEMPLATE`.
    """
    template = chat_template or getattr(tokenizer, "chat_template", None) or PLAIN_TEMPLATE
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": user_text}],
        chat_template=template,
        add_generation_prompt=True,
        tokenize=False,
    )
