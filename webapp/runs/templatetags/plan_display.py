"""Template filters of the experiment page: ``placement|plan_table``, ``resources|resource_facts``
(see :mod:`webapp.runs.plan_display`)."""

from __future__ import annotations

from django import template

from webapp.runs import plan_display

register = template.Library()
register.filter("plan_table", plan_display.plan_table)
register.filter("resource_facts", plan_display.resource_facts)
