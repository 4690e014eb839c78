"""Turning rollouts into training tensors (pure functions)."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def build_sequences(
    prompt_ids: Sequence[Sequence[int]], response_ids: Sequence[Sequence[int]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``prompt + response`` sequences for a teacher-forced forward pass.

    Returns ``input_ids [N, L]``, ``attention_mask [N, L]`` and ``response_mask
    [N, L-1]``, where ``response_mask[i, t] = 1`` iff token ``t + 1`` of sequence ``i``
    is a response token, i.e. in the frame of ``logits[:, :-1]`` predicting
    ``input_ids[:, 1:]``. Right padding keeps positions 0..len-1 for every real token.
    """
    if len(prompt_ids) != len(response_ids):
        raise ValueError("one prompt per response is needed")
    lengths = [len(p) + len(r) for p, r in zip(prompt_ids, response_ids, strict=True)]
    width = max(lengths)
    input_ids = torch.full((len(lengths), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(lengths), width), dtype=torch.long)
    response_mask = torch.zeros((len(lengths), width - 1), dtype=torch.float32)
    for row, (prompt, response) in enumerate(zip(prompt_ids, response_ids, strict=True)):
        if not prompt:
            raise ValueError(f"sequence {row} has an empty prompt")
        tokens = list(prompt) + list(response)
        input_ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        attention_mask[row, : len(tokens)] = 1
        response_mask[row, len(prompt) - 1 : len(tokens) - 1] = 1.0
    return input_ids, attention_mask, response_mask
