"""A yes/no query parameter, read the same way by the API and the comparison spec."""

from __future__ import annotations

import pytest
from django.http import QueryDict

from webapp.compare.spec import SpecError, bool_param
from webapp.core.flags import flag_value
from webapp.core.http import ParamError, flag_param


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        *[("1", True), ("true", True), (" Yes ", True), ("ON", True)],
        *[("", False), ("0", False), ("false", False), ("No", False), ("off ", False)],
    ],
)
def test_yes_and_no_in_every_spelling(raw: str, value: bool) -> None:
    assert flag_value("log_y", raw) is value
    query = QueryDict(mutable=True)
    query["log_y"] = raw
    assert flag_param(query, "log_y") is value and bool_param(query, "log_y") is value


def test_an_absent_flag_is_no() -> None:
    assert flag_param(QueryDict(), "log_y") is False and bool_param(QueryDict(), "log_y") is False


def test_anything_else_names_the_parameter_in_each_callers_error() -> None:
    query = QueryDict("lower_is_better=maybe")
    with pytest.raises(ParamError, match="lower_is_better: must be 1 or 0, not 'maybe'"):
        flag_param(query, "lower_is_better")
    with pytest.raises(SpecError, match="lower_is_better: must be 1 or 0, not 'maybe'"):
        bool_param(query, "lower_is_better")
