"""Template filters of the run page: a failure reason read as people read it, its first
line (what went wrong) apart from the rest (the job's last words, a log tail):
``reason|reason_head`` and ``reason|reason_rest``. run-page.js splits it the same way."""

from __future__ import annotations

from django import template

register = template.Library()


def split_reason(reason: str) -> tuple[str, str]:
    """(the first non-blank line, the lines after it), each stripped of blank ends."""
    lines = reason.strip().splitlines()
    if not lines:
        return "", ""
    return lines[0].strip(), "\n".join(lines[1:]).strip("\n")


@register.filter
def reason_head(reason: str) -> str:
    return split_reason(str(reason or ""))[0]


@register.filter
def reason_rest(reason: str) -> str:
    return split_reason(str(reason or ""))[1]


@register.filter
def line_count(text: str) -> int:
    return len(str(text or "").splitlines())
