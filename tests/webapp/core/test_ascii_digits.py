"""The one reader of whole numbers in outside text (issue 44): ASCII digits only, capped."""

from __future__ import annotations

import pytest

from webapp.core.digits import INT64_DIGITS, ascii_digits, ascii_int


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("7", 7),
        ("0042", 42),
        ("9" * 18, int("9" * 18)),
        ("", None),
        ("²", None),  # str.isdigit() says yes; int() raises
        ("\u0661", None),  # Arabic-Indic one: int() reads it as 1
        ("\uff11\uff12", None),  # fullwidth digits: int() reads 12
        ("1_0", None),  # int() reads 10
        (" 7", None),
        ("7 ", None),
        ("7\n", None),
        ("-1", None),
        ("+1", None),
        ("1e3", None),
        ("0x10", None),
        ("9" * 19, None),  # over the cap
    ],
)
def test_only_ascii_digits_within_the_cap_are_a_number(text: str, expected: int | None) -> None:
    assert ascii_digits(text, max_digits=INT64_DIGITS) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("-1", -1),
        ("+5", 5),
        ("12", 12),
        ("-", None),
        ("--1", None),
        ("-\u0661", None),
        ("- 1", None),
        ("-" + "1" * 10, None),
    ],
)
def test_a_signed_number_takes_one_sign(text: str, expected: int | None) -> None:
    assert ascii_int(text, max_digits=9) == expected


def test_every_fitting_number_fits_a_signed_64_bit_column() -> None:
    assert int("9" * INT64_DIGITS) < 2**63 - 1 < int("9" * (INT64_DIGITS + 1))
