"""Colour arithmetic for the browser tests: WCAG relative luminance and contrast ratio of
the ``rgb(...)`` / ``rgba(...)`` strings that ``getComputedStyle`` returns."""

from __future__ import annotations

import re


def luminance(colour: str) -> float:
    """The relative luminance (WCAG) of an ``rgb(...)`` / ``rgba(...)`` colour."""
    red, green, blue = (int(part) / 255 for part in re.findall(r"\d+", colour)[:3])

    def linear(channel: float) -> float:
        return channel / 12.92 if channel <= 0.04045 else ((channel + 0.055) / 1.055) ** 2.4

    return 0.2126 * linear(red) + 0.7152 * linear(green) + 0.0722 * linear(blue)


def contrast(first: str, second: str) -> float:
    light, dark = sorted((luminance(first), luminance(second)), reverse=True)
    return (light + 0.05) / (dark + 0.05)
