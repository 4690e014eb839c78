"""``standalone``: plain GRPO, nothing crosses between policies (the baseline)."""

from __future__ import annotations

from trainer.declarations import RegimeSpec, register_regime

SPEC = register_regime(
    RegimeSpec(
        name="standalone",
        label="Standalone GRPO",
        summary="Each policy trains on its own rollouts only; nothing crosses (the baseline).",
        implementation="trainer.regimes.standalone.regime:Standalone",
        order=0,
        colour="#000000",
        shares=False,
    )
)
