"""Colours of comparison groups: Okabe-Ito, colour-blind safe, fixed per regime.

Okabe & Ito (2008), "Color Universal Design": eight colours that stay distinguishable
under the common colour-vision deficiencies. Each regime always gets the colour its
declaration names (:class:`trainer.regimes.RegimeSpec`: standalone black, then orange, sky
blue and bluish green), on screen, in every export, in every comparison; any other group
label takes the remaining colours in the order the groups are shown. Past eight groups the colours
repeat with another dash pattern, so no two groups ever look the same.

Pure Python; the compare page reads the colour and dash of each group from the JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trainer.regimes import regimes

BLACK = "#000000"
ORANGE = "#E69F00"
SKY_BLUE = "#56B4E9"
BLUISH_GREEN = "#009E73"
YELLOW = "#F0E442"
BLUE = "#0072B2"
VERMILLION = "#D55E00"
REDDISH_PURPLE = "#CC79A7"

BUILT_IN_REGIME_COLOURS: tuple[str, ...] = (BLACK, ORANGE, SKY_BLUE, BLUISH_GREEN)
"""What the built-in regimes declare: the baseline black, the three sharing regimes the
first three chromatic colours."""

OTHER_COLOURS: tuple[str, ...] = (BLUE, VERMILLION, REDDISH_PURPLE, YELLOW)
"""For any other label, in this order (yellow last: the weakest contrast on white)."""

ALL_COLOURS: tuple[str, ...] = (*BUILT_IN_REGIME_COLOURS, *OTHER_COLOURS)


def regime_colours() -> dict[str, str]:
    """Each registered regime's colour by name (upper-case hex, as the palette's)."""
    return {spec.name: spec.colour.upper() for spec in regimes()}


DASHES: tuple[str, ...] = ("solid", "dash", "dot", "dashdot")
"""Plotly dash names; :data:`MATPLOTLIB_DASHES` gives the same patterns to matplotlib."""

MATPLOTLIB_DASHES: dict[str, str | tuple[int, tuple[float, ...]]] = {
    "solid": "solid",
    "dash": (0, (5.0, 2.0)),
    "dot": (0, (1.0, 1.5)),
    "dashdot": (0, (5.0, 2.0, 1.0, 2.0)),
}


@dataclass(frozen=True)
class Style:
    colour: str
    dash: str = "solid"


def styles_for(labels: Sequence[str]) -> dict[str, Style]:
    """The style of each group label, ``labels`` in display order.

    A regime name keeps its own colour wherever it appears; other labels take the
    colours no regime label of this comparison uses, in order; when those run out the
    whole palette is reused with the next dash pattern.
    """
    styles: dict[str, Style] = {}
    regime_colour = regime_colours()
    taken = {regime_colour[label] for label in labels if label in regime_colour}
    free = [colour for colour in (*OTHER_COLOURS, *BUILT_IN_REGIME_COLOURS) if colour not in taken]
    extra = 0
    for label in labels:
        if label in styles:
            continue
        if label in regime_colour:
            styles[label] = Style(regime_colour[label])
        elif extra < len(free):
            styles[label] = Style(free[extra])
            extra += 1
        else:
            cycle, index = divmod(extra - len(free), len(ALL_COLOURS))
            styles[label] = Style(ALL_COLOURS[index], DASHES[(cycle + 1) % len(DASHES)])
            extra += 1
    return styles
