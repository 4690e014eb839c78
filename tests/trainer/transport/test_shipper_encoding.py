"""The shipper's body encoding (``trainer.shipper.encode_body``): orjson where it can,
the json that ``requests``' ``json=`` used where it cannot, the same document either way."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from trainer import shipper

BODY: dict[str, Any] = {
    "points": [
        {"policy": "a", "key": "train/loss", "step": 3, "value": "NaN", "wall_time": 1.7e9},
        {"policy": "é", "key": "k", "step": 2**31 - 1, "value": -0.0, "wall_time": None},
        {"policy": "a", "key": "k", "step": 0, "value": 0.1, "wall_time": 5e-324},
    ],
    "events": [{"step": 1, "source": "a", "target": "b", "kind": "success", "prompt_id": "p"}],
    "status": {"state": "running", "message": "step 3 <of> 200 \u2028"},
}


def test_orjson_and_json_send_the_same_document() -> None:
    assert shipper.orjson is not None  # requirements.txt has it
    fast = shipper.encode_body(BODY)
    assert fast == shipper.orjson.dumps(BODY)
    decoded = json.loads(fast)
    assert decoded == BODY and math.copysign(1, decoded["points"][1]["value"]) == -1


def test_without_orjson_it_is_what_requests_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shipper, "orjson", None)
    assert shipper.encode_body(BODY) == json.dumps(BODY, allow_nan=False).encode()
    with pytest.raises(ValueError, match="JSON compliant"):
        shipper.encode_body({"points": [{"value": math.nan}]})


@pytest.mark.parametrize(
    "value",
    ["\ud800", 2**70],  # orjson refuses both: lone surrogates and integers beyond 64 bits
)
def test_what_orjson_refuses_goes_out_as_json(value: Any) -> None:
    body = {"points": [{"policy": "a", "key": value, "step": 1, "value": 1.0}]}
    assert shipper.encode_body(body) == json.dumps(body).encode()
