import torch

from trainer.batch import build_sequences


def test_it_right_pads_and_marks_response_predictions() -> None:
    input_ids, attention, response_mask = build_sequences([[5, 6], [7]], [[1, 2], [3]], pad_id=0)

    assert input_ids.tolist() == [[5, 6, 1, 2], [7, 3, 0, 0]]
    assert attention.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    # logits[:, t] predicts input_ids[:, t + 1]; responses start at t = len(prompt) - 1.
    assert response_mask.tolist() == [[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]]
    assert response_mask.dtype == torch.float32
