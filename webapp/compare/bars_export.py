"""Paper exports of the bar views (:mod:`webapp.compare.bars`): the figure (PDF, SVG,
PNG), the bars as CSV, and a LaTeX table.

The figure is drawn as the curves' exports are (:mod:`webapp.compare.export`): the
matplotlib object API, the same rcParams, fonts, column widths (3.5 / 7.0 in), 300 dpi
PNG, the same metadata-free deterministic output, under the same render lock. One panel
per policy, x = the categories (tasks, or metrics), one bar per group in the group's
colour (a hatch for a group past the eighth, where the curves use a dash), error bars
from the spec's band (per-task view) or each bar's 95% interval (relative view: the
delta method, the baseline's variance included, named in a note under the panels); the
base model's value as a short dashed line over each task (per-task view), a dashed zero
line (relative view).

The CSV has one row per bar drawn: view, policy, x (the task, or the metric key), group,
mean, lower, upper (the band; in the relative view the interval's low and high), n,
base (the base model's value, or the baseline group's mean in the relative view), and
error_bar (what lower and upper are: the band's name, or the interval's method and
count), written through :class:`webapp.core.csv_safe.SafeWriter` (a label that a
spreadsheet would run as a formula gets a leading "'"). The LaTeX table has per policy
one row per category and one column per group, mean $\\pm$ std (ddof = 1) over the
group's runs (relative view: the improvement and its 95% interval in brackets), the best
group of each row in bold, and the base (or baseline) value last.
"""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from webapp.compare.assemble import CI_MIN_RUNS
from webapp.compare.bars import VIEW_TITLES, BarChart, BarPanel, BarTrace
from webapp.compare.export import (
    COLUMN_WIDTHS,
    FONT_SIZES,
    MAX_PANEL_COLUMNS,
    _mean_std_latex,
    _number_latex,
    decimals_for,
    figure_bytes,
    figure_label,
    latex_comment,
    latex_escape,
    legend_columns,
    number_text,
    panel_slots,
)
from webapp.core.csv_safe import SafeWriter

BAR_CSV_COLUMNS = (
    "view",
    "policy",
    "x",
    "group",
    "mean",
    "lower",
    "upper",
    "n",
    "base",
    "error_bar",
)
HATCHES = {"solid": "", "dash": "////", "dot": "....", "dashdot": "xxxx"}
BASE_COLOUR = "0.5"  # grey that shows on black bars and on white
BASE_DASH = (0, (2.0, 1.2))
ZERO_DASH = (0, (4.0, 2.0))
BAR_WIDTH, BAR_SPAN = 0.25, 0.8  # of a category's width: one bar, all its bars at most
INCHES_PER_BAR = 0.22
Y_LABEL_WIDTH = 24  # characters a line: "relative improvement over standalone (%)" in two


# --------------------------------------------------------------------------- figure


def bar_layout(n_panels: int, bars_per_panel: int, columns: int) -> tuple[int, int, float, float]:
    """(rows, panel columns, width, height in inches): as many panels side by side as
    leave each bar about :data:`INCHES_PER_BAR` (at most 2 in one column, 4 in two), in
    balanced rows."""
    width = COLUMN_WIDTHS[columns]
    fit = int(width // max(bars_per_panel * INCHES_PER_BAR + 0.5, 0.1))
    ncols = max(1, min(MAX_PANEL_COLUMNS[columns], fit, n_panels))
    nrows = max(1, math.ceil(n_panels / ncols))
    ncols = max(1, math.ceil(n_panels / nrows))
    panel_height = min(max(width / ncols * 0.72, 1.4), 2.3)
    return nrows, ncols, width, nrows * panel_height + 0.5


def _shown_groups(chart: BarChart) -> list[tuple[str, str, str]]:
    """(label, colour, dash) of the groups with a bar somewhere, in group order."""
    drawn = {trace.group for panel in chart.panels for trace in panel.traces}
    return [(g.label, g.colour, g.dash) for g in chart.groups if g.label in drawn]


def build_bars_figure(chart: BarChart, columns: int = 1) -> Figure:
    """The bar view as a matplotlib figure (call within :func:`rc_context`)."""
    panels = chart.panels
    groups = _shown_groups(chart)
    categories = max((len(panel.categories) for panel in panels), default=1)
    nrows, ncols, width, height = bar_layout(
        max(len(panels), 1), categories * max(len(groups), 1), columns
    )
    long_labels = _rotate(panels)
    if long_labels:
        height += 0.35 * nrows
    note = interval_bars_note(chart, columns) or ci_bars_note(chart, columns)
    if note:
        height += 0.15 * (note.count("\n") + 1)
    figure = Figure(figsize=(width, height), layout="constrained")
    if not panels:
        ax = figure.add_subplot()
        ax.set_axis_off()
        ax.text(0.5, 0.5, chart.empty or "no data", ha="center", va="center", wrap=True)
        return figure
    grid = figure.add_gridspec(nrows, 2 * ncols)
    for panel, (row, start) in zip(panels, panel_slots(len(panels), ncols), strict=True):
        ax = figure.add_subplot(grid[row, start : start + 2])
        _draw_bars(ax, panel, chart, long_labels)
    if note:
        figure.supxlabel(note, fontsize=FONT_SIZES[columns] - 1.5, color="0.3")
    # The legend names the groups as people read them ("sgt.lambda_sgt = 0.05").
    names = {group.label: group.name for group in chart.groups}
    handles: list[Any] = [
        Patch(
            facecolor=colour,
            edgecolor="white",
            hatch=HATCHES.get(dash, ""),
            label=figure_label(names[label]),
        )
        for label, colour, dash in groups
    ]
    if chart.view == "tasks" and any(np.isfinite(p.base).any() for p in panels):
        handles.append(Line2D([], [], color=BASE_COLOUR, linestyle=BASE_DASH, label="base model"))
    if handles:
        figure.legend(
            handles=handles,
            loc="outside upper center",
            ncols=legend_columns([handle.get_label() for handle in handles], columns),
            handlelength=1.4,
            columnspacing=1.0,
        )
    return figure


def _rotate(panels: Sequence[BarPanel]) -> bool:
    """Whether the x labels need slanting: more characters than fit under the panel."""
    return any(sum(len(label) + 2 for label in panel.category_labels) > 28 for panel in panels)


def _draw_bars(ax: Any, panel: BarPanel, chart: BarChart, slanted: bool) -> None:
    ax.set_title(panel.title)
    # The relative view's label names the baseline group: at most 4 lines of it.
    ax.set_ylabel(
        textwrap.fill(
            figure_label(panel.y_label, limit=4 * Y_LABEL_WIDTH),
            width=Y_LABEL_WIDTH,
            max_lines=4,
            placeholder=" …",
        )
    )
    ax.grid(axis="x", visible=False)
    ax.set_axisbelow(True)
    count = len(panel.categories)
    positions = np.arange(count, dtype=float)
    ax.set_xticks(positions)
    if slanted:
        ax.set_xticklabels(panel.category_labels, rotation=30, ha="right")
    else:
        ax.set_xticklabels(panel.category_labels)
    ax.set_xlim(-0.6, count - 0.4)
    if panel.x_label:
        ax.set_xlabel(panel.x_label)
    if chart.zero_line:
        ax.use_sticky_edges = False  # a margin below 0 too, so the zero line shows
        ax.axhline(0.0, color="0.2", linewidth=0.7, linestyle=ZERO_DASH, zorder=3)
    if not panel.traces:
        ax.text(
            0.5,
            0.5,
            textwrap.fill(panel.message or "no data", width=28),
            ha="center",
            va="center",
            transform=ax.transAxes,
            color="0.3",
        )
    span = bar_span(len(panel.traces))
    width = span / max(len(panel.traces), 1)
    for g, trace in enumerate(panel.traces):
        _draw_trace(ax, trace, positions - span / 2 + width * (g + 0.5), width)
    if chart.view == "tasks":
        for k, base in enumerate(panel.base):
            if math.isfinite(base):
                ax.hlines(
                    base,
                    k - span / 2 - 0.05,
                    k + span / 2 + 0.05,
                    colors=BASE_COLOUR,
                    linestyles=[BASE_DASH],
                    linewidth=1.0,
                    zorder=4,
                )


def bar_span(groups: int) -> float:
    """The width of a category's bars together: a quarter each, at most 0.8."""
    return min(BAR_SPAN, BAR_WIDTH * max(groups, 1))


def _draw_trace(ax: Any, trace: BarTrace, x: np.ndarray, width: float) -> None:
    shown = (trace.n > 0) & np.isfinite(trace.mean)
    if not shown.any():
        return
    mean = trace.mean[shown]
    below = np.nan_to_num(mean - trace.lower[shown], nan=0.0)
    above = np.nan_to_num(trace.upper[shown] - mean, nan=0.0)
    errors = np.vstack([np.maximum(below, 0.0), np.maximum(above, 0.0)])
    ax.bar(
        x[shown],
        mean,
        width * 0.92,
        color=trace.colour,
        edgecolor="white" if HATCHES.get(trace.dash) else trace.colour,
        linewidth=0.0,
        hatch=HATCHES.get(trace.dash, "") or None,
        yerr=errors if errors.any() else None,
        error_kw={"elinewidth": 0.6, "capsize": 1.5, "capthick": 0.6, "ecolor": "0.15"},
        zorder=2,
    )


def interval_bars_note(chart: BarChart, columns: int = 1) -> str | None:
    """The relative view's note under the panels: what its error bars are
    (:attr:`webapp.compare.bars.BarChart.interval_note`), wrapped; None in the other
    view or without bars."""
    note = chart.interval_note
    if not note:
        return None
    return textwrap.fill(figure_label(note, limit=400), width=int(COLUMN_WIDTHS[columns] * 14))


def ci_bars_note(chart: BarChart, columns: int = 1) -> str | None:
    """With 95% CI bands (per-task view): the note naming the groups whose bars rest on
    fewer than 3 runs; None otherwise."""
    if chart.spec.band != "ci95" or chart.view != "tasks":
        return None
    small: dict[str, int] = {}
    for panel in chart.panels:
        for trace in panel.traces:
            n = trace.n[trace.n > 0]
            if n.size and n.min() < CI_MIN_RUNS:
                small[trace.group] = max(small.get(trace.group, 0), int(n.min()))
    if not small:
        return None
    groups = ", ".join(f"{figure_label(group)} (n = {n})" for group, n in small.items())
    text = f"95% CI from fewer than {CI_MIN_RUNS} runs: {groups}"
    return textwrap.fill(text, width=int(COLUMN_WIDTHS[columns] * 14))


def render_bars(chart: BarChart, fmt: str, columns: int = 1) -> bytes:
    """The bar figure as ``fmt`` (pdf, svg or png) bytes; identical inputs, identical
    bytes."""
    return figure_bytes(
        lambda: build_bars_figure(chart, columns), fmt, columns, {"hatch.linewidth": 0.5}
    )


# --------------------------------------------------------------------------- CSV


def error_bar_text(chart: BarChart, trace: BarTrace, k: int) -> str:
    """What ``trace``'s lower and upper at category ``k`` are: the spec's band (per-task
    view), or the interval's "95% interval, paired delta method, 5 seeds" (relative
    view; "none (too few runs)" without one)."""
    if chart.view != "relative":
        return chart.spec.band
    interval = trace.intervals[k] if k < len(trace.intervals) else None
    if interval is None or not interval.has_interval:
        return "none (too few runs)"
    return interval.description()


def bars_csv(chart: BarChart) -> str:
    """One row per bar drawn (a group with a value at a category): view, policy, x (the
    task, or the metric key), group, mean, lower, upper, n, base, error_bar
    (:func:`error_bar_text`)."""
    out = io.StringIO()
    writer = SafeWriter(out)
    writer.writerow(BAR_CSV_COLUMNS)
    for panel in chart.panels:
        for trace in panel.traces:
            for k, category in enumerate(panel.categories):
                if trace.n[k] == 0:
                    continue
                writer.writerow(
                    (
                        chart.view,
                        panel.policy,
                        category,
                        trace.group,
                        number_text(trace.mean[k]),
                        number_text(trace.lower[k]),
                        number_text(trace.upper[k]),
                        int(trace.n[k]),
                        number_text(panel.base[k]) if math.isfinite(panel.base[k]) else "",
                        error_bar_text(chart, trace, k),
                    )
                )
    return out.getvalue()


# --------------------------------------------------------------------------- LaTeX


def _interval_latex(trace: BarTrace, k: int, decimals: int) -> str:
    """The relative view's cell: "40.0 [$-$61.7, 141.7]" (the estimate alone without an
    interval)."""
    text = _number_latex(float(trace.mean[k]), decimals)
    low, high = float(trace.lower[k]), float(trace.upper[k])
    if math.isfinite(low) and math.isfinite(high):
        text += f" [{_number_latex(low, decimals)}, {_number_latex(high, decimals)}]"
    return text


def bars_latex(chart: BarChart) -> str:
    """A booktabs ``tabular``: per policy one row per category (task, or metric), one
    column per group (mean $\\pm$ std over its runs; in the relative view the improvement
    and its 95% interval, ``40.0 [$-$61.7, 141.7]``; the best group of the row in bold),
    then the base model's value (or the baseline group's mean)."""
    labels = [label for label, _colour, _dash in _shown_groups(chart)]
    names = {group.label: group.name for group in chart.groups}  # the column headings
    numbers = [
        float(v)
        for panel in chart.panels
        for trace in panel.traces
        for v in (*trace.mean, *trace.std)
        if math.isfinite(v)
    ]
    decimals = decimals_for(numbers)
    base_decimals = decimals_for(
        [float(v) for panel in chart.panels for v in panel.base if math.isfinite(v)]
    )
    n_runs = {
        label: max(
            (int(t.n.max()) for p in chart.panels for t in p.traces if t.group == label),
            default=0,
        )
        for label in labels
    }
    runs_text = ", ".join(f"{latex_escape(label)} {n}" for label, n in n_runs.items())
    if chart.view == "tasks":
        first = f"{VIEW_TITLES['tasks']}: suite {latex_escape(chart.suite)}, "
        first += f"{chart.options.score} of the final checkpoint"
        what, base_head = "Task", "Base"
        base_text = "Base: the base model (step 0)."
    else:
        metrics = ", ".join(latex_escape(metric) for metric in chart.options.metrics)
        first = f"{VIEW_TITLES['relative']}: {metrics}, relative improvement (\\%) of the "
        first += f"final value over the mean of {latex_escape(chart.baseline)}"
        what, base_head = "Metric", f"{latex_escape(chart.baseline)} mean"
        base_text = f"Last column: the {latex_escape(chart.baseline)} group's mean final value."
    if chart.view == "tasks":
        spread = "mean $\\pm$ std (ddof=1) over the runs of each group."
    else:
        note = latex_escape(chart.interval_note or "Error bars: none.")
        spread = f"the improvement [its 95\\% interval] of each group. {note}"
    # Comments through latex_comment: a line break in a label cannot end them.
    lines = [
        latex_comment(f"{first}; {spread}"),
        latex_comment(f"Runs per group (at most): {runs_text or 'none'}. {base_text}"),
        latex_comment(
            "Bold: the best group per row (higher is better). Needs \\usepackage{booktabs}."
        ),
        r"\begin{tabular}{ll" + "r" * (len(labels) + 1) + "}",
        r"\toprule",
        " & ".join(["Policy", what, *(latex_escape(names[label]) for label in labels), base_head])
        + r" \\",
    ]
    for panel in chart.panels:
        if not panel.traces and not np.isfinite(panel.base).any():
            continue  # a policy without any value
        by_group = {trace.group: trace for trace in panel.traces}
        lines.append(r"\midrule")
        for k, label in enumerate(panel.category_labels):
            means = {
                group: float(trace.mean[k])
                for group, trace in by_group.items()
                if trace.n[k] > 0 and math.isfinite(trace.mean[k])
            }
            # The best group in bold (all of them on a tie); none where every group ties.
            top = max(means.values(), default=math.nan)
            tied = len(set(means.values())) <= 1
            best = set() if tied else {group for group, value in means.items() if value == top}
            entries = [latex_escape(panel.title) if k == 0 else "", latex_escape(label)]
            for group in labels:
                trace = by_group.get(group)
                if trace is None or group not in means:
                    entries.append("--")
                    continue
                if chart.view == "tasks":
                    std = float(trace.std[k]) if math.isfinite(trace.std[k]) else None
                    text = _mean_std_latex(means[group], std, decimals)
                else:
                    text = _interval_latex(trace, k, decimals)
                entries.append(f"\\textbf{{{text}}}" if group in best else text)
            base = float(panel.base[k])
            entries.append(_number_latex(base, base_decimals) if math.isfinite(base) else "--")
            lines.append(" & ".join(entries) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(lines)
