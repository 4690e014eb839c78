"""One forward of each prompt in the update, however many samples share it.

A GRPO batch holds G samples of every prompt, so ``build_sequences``' right-padded rows
repeat each prompt G times, and every teacher-forced forward of the update (the
reference's log-probs, the policy's forward and backward) encodes it G times. At the
tiny zoo's 14-16-token prompts and 12-token responses that is more than half of the
tokens a forward reads. :func:`plan` finds the rows that share a prompt; the policy then
encodes each distinct prompt once (all of it but its last token, into a KV cache), gives
each row its prompt's cache, and runs only ``last prompt token + response`` per row on
top of it (:meth:`trainer.policy.Policy._forward_shared`). Autograd carries the
gradients of all G rows back into the one prompt encoding.

The values are the full forward's up to float rounding (other matmul shapes): the
tests check log-probs, entropies, the loss and every gradient against it on each zoo
model. :meth:`SharedPrompts.to_frame` puts the per-response values back into the columns
the rest of the update reads (``[n, width - 1 - start]``, target columns ``start`` on,
of the right-padded ``[n, L-1]`` frame).

Pure tensor functions: no model, no policy.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SharedPrompts:
    """The rows of a right-padded batch grouped by prompt (:func:`plan`).

    ``U`` distinct prompts, ``n`` rows, ``P`` the longest prompt less its last token,
    ``R`` the longest response.
    """

    prefix_ids: torch.Tensor
    """``[U, P]`` each distinct prompt but its last token, right-padded."""
    prefix_mask: torch.Tensor
    """``[U, P]`` 1 on the real tokens of :attr:`prefix_ids`."""
    owner: torch.Tensor
    """``[n]`` (long) the row of :attr:`prefix_ids` that holds row i's prompt."""
    segment_ids: torch.Tensor
    """``[n, R + 1]`` row i's last prompt token, then its response; right-padded."""
    segment_mask: torch.Tensor
    """``[n, R + 1]`` 1 on the real tokens of :attr:`segment_ids`."""
    segment_positions: torch.Tensor
    """``[n, R + 1]`` the position of each segment token in its whole sequence (0 on
    the padding, which a long prompt plus the longest response could push past the
    model's positions)."""
    response_lengths: torch.Tensor
    """``[n]`` tokens in each row's response (at least 1)."""
    frame_columns: torch.Tensor
    """``[n, R]`` where response token ``c`` of row i lies in the frame of
    :meth:`to_frame` (``frame_width`` for the padding after the response)."""
    start: int
    """The first target column any row scores: the frame's first column."""
    width: int
    """The longest sequence (prompt + response) of the batch."""

    @property
    def frame_width(self) -> int:
        """Target columns ``start .. width - 2``: the frame the update reads."""
        return self.width - 1 - self.start

    @property
    def targets(self) -> torch.Tensor:
        """``[n, R]`` the response tokens each segment position predicts (padding after
        a row's response: any valid id, which :meth:`to_frame` drops)."""
        return self.segment_ids[:, 1:]

    def to_frame(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` per response token (``[n, R]``) in the frame ``[n, frame_width]``,
        0 where a row has no response token; differentiable in ``values``."""
        n = values.shape[0]
        frame = values.new_zeros((n, self.frame_width + 1))  # + a column for the padding
        return frame.scatter(1, self.frame_columns, values)[:, : self.frame_width]


def plan(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    response_mask: torch.Tensor,
    pad_id: int,
) -> SharedPrompts | None:
    """How the rows of ``build_sequences``' output share prompts, or None where sharing
    saves nothing or does not apply: no two rows share a prompt, a row has no response
    token (nothing to score), or a prompt has a single token (no prefix to encode).

    ``input_ids`` / ``attention_mask`` ``[n, L]`` right-padded ``prompt + response``;
    ``response_mask`` ``[n, L-1]`` (1 where target column t is a response token). Two
    rows share a prompt when their prompt token ids are equal.
    """
    rows = input_ids.shape[0]
    if rows < 2 or not bool(response_mask.any(dim=1).all()):
        return None
    lengths = attention_mask.sum(dim=1)
    prompt_lengths = response_mask.argmax(dim=1) + 1  # each row's first response column + 1
    if int(prompt_lengths.min()) < 2:
        return None
    ids = input_ids.tolist()
    prompt_lengths_list = prompt_lengths.tolist()
    first_row_of: dict[tuple[int, ...], int] = {}
    owner_list: list[int] = []
    representatives: list[int] = []
    for row in range(rows):
        prompt = tuple(ids[row][: prompt_lengths_list[row]])
        index = first_row_of.get(prompt)
        if index is None:
            index = first_row_of[prompt] = len(representatives)
            representatives.append(row)
        owner_list.append(index)
    if len(representatives) == rows:
        return None
    device = input_ids.device
    owner = torch.tensor(owner_list, dtype=torch.long, device=device)
    chosen = torch.tensor(representatives, dtype=torch.long, device=device)

    prefix_lengths = prompt_lengths[chosen] - 1
    prefix_width = int(prefix_lengths.max())
    columns = torch.arange(prefix_width, device=device)
    prefix_mask = (columns[None, :] < prefix_lengths[:, None]).long()
    prefix_ids = input_ids[chosen, :prefix_width].masked_fill(prefix_mask == 0, pad_id)

    response_lengths = lengths - prompt_lengths
    longest = int(response_lengths.max())
    offsets = torch.arange(longest + 1, device=device)
    source = (prompt_lengths - 1)[:, None] + offsets[None, :]
    segment_mask = (offsets[None, :] <= response_lengths[:, None]).long()
    segment_ids = input_ids.gather(1, source.clamp(max=input_ids.shape[1] - 1))
    segment_ids = segment_ids.masked_fill(segment_mask == 0, pad_id)

    start = int(prompt_lengths.min()) - 1
    width = int(lengths.max())
    token = offsets[None, :longest]
    frame_columns = torch.where(
        token < response_lengths[:, None],
        source[:, :longest] - start,
        torch.full_like(source[:, :longest], width - 1 - start),
    )
    return SharedPrompts(
        prefix_ids=prefix_ids,
        prefix_mask=prefix_mask,
        owner=owner,
        segment_ids=segment_ids,
        segment_mask=segment_mask,
        segment_positions=source.masked_fill(segment_mask == 0, 0),
        response_lengths=response_lengths,
        frame_columns=frame_columns,
        start=start,
        width=width,
    )
