"""Exports of the significance view (:mod:`webapp.compare.significance`): the comparisons
as CSV, as a LaTeX table, and as a forest plot (PDF, SVG, PNG).

The CSV has one row per comparison: metric, policy, group, baseline, step ("final" or
the chosen step), method ("paired t" or "Welch"), n (pairs, or the group's runs under
Welch), n_baseline (the baseline's runs under Welch), estimate, low, high (the 95%
interval), df, p (NaN without a test: no spread, or one seed), p_holm (empty when not
adjusted), primary (1 for the primary endpoint, kept out of Holm's family), the two
groups' means, the seeds, the note and the sentence, through
:class:`webapp.core.csv_safe.SafeWriter`. The LaTeX table is a booktabs ``tabular``
(labels through :func:`webapp.compare.export.latex_escape`, comments through
:func:`~webapp.compare.export.latex_comment`) that names the test and the correction, and
"primary" in the Holm column of the primary endpoint.
The figure is drawn as the other exports are (same rcParams, widths, lock, metadata):
one row per comparison, the estimate and its interval in the group's colour, a dashed
zero line.
"""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Sequence

from matplotlib.figure import Figure

from trainer.stats import PAIRED, count_text, p_number
from webapp.compare.export import (
    COLUMN_WIDTHS,
    _number_latex,
    decimals_for,
    figure_bytes,
    figure_label,
    latex_comment,
    latex_escape,
    number_text,
)
from webapp.compare.significance import Significance, SigRow
from webapp.core.csv_safe import SafeWriter

SIG_CSV_COLUMNS = (
    "metric",
    "policy",
    "group",
    "baseline",
    "step",
    "method",
    "n",
    "n_baseline",
    "estimate",
    "low",
    "high",
    "df",
    "p",
    "p_holm",
    "primary",
    "group_mean",
    "baseline_mean",
    "seeds",
    "note",
    "sentence",
)
ZERO_DASH = (0, (4.0, 2.0))
ROW_INCHES = 0.24
LABEL_CHARS = 36
CHARS_PER_INCH = 14  # DejaVu Sans at 7-8 pt, about (the x label and the note wrap)


# --------------------------------------------------------------------------- CSV


def significance_csv(table: Significance) -> str:
    """One row per comparison (:data:`SIG_CSV_COLUMNS`); a comparison without a value on
    one side has its method and numbers empty and its note saying why."""
    out = io.StringIO()
    writer = SafeWriter(out)
    writer.writerow(SIG_CSV_COLUMNS)
    step = "final" if table.step is None else str(table.step)
    for row in table.rows:
        found = row.interval
        numbers: tuple[str | int, ...] = ("",) * 9
        if found is not None:
            numbers = (
                found.method,
                found.n,
                found.n_other if found.method != PAIRED else "",
                number_text(found.estimate),
                number_text(found.low),
                number_text(found.high),
                number_text(found.df),
                number_text(found.p),
                "" if found.p_adjusted is None else number_text(found.p_adjusted),
            )
        writer.writerow(
            (
                row.metric,
                row.policy,
                row.group,
                table.baseline,
                step,
                *numbers,
                "1" if row.primary else "",
                number_text(row.group_mean),
                number_text(row.baseline_mean),
                " ".join(str(seed) for seed in row.seeds),
                row.note,
                row.sentence,
            )
        )
    return out.getvalue()


# --------------------------------------------------------------------------- LaTeX


def _p_latex(p: float | None) -> str:
    if p is None or not math.isfinite(p):
        return "--"
    return p_number(p).replace("<", "$<$")


def significance_latex(table: Significance) -> str:
    """A booktabs ``tabular``: per comparison the policy, metric, group, the difference
    to the baseline and its 95% interval, the test and n, p and Holm's p."""
    numbers = [
        v
        for row in table.rows
        if row.interval is not None
        for v in (row.interval.estimate, row.interval.low, row.interval.high)
    ]
    d = max(decimals_for(numbers), 2)
    metrics = ", ".join(latex_escape(metric) for metric in table.options.metrics)
    lines = [
        latex_comment(
            f"Significance: {metrics}, each group minus {latex_escape(table.baseline)} "
            f"at {table.where}."
        ),
        latex_comment(table.method_text),
        latex_comment("Needs \\usepackage{booktabs}."),
        r"\begin{tabular}{lllrrlrrr}",
        r"\toprule",
        r"Policy & Metric & Group & Difference & 95\% CI & Test & $n$ & $p$ & $p$ (Holm) \\",
        r"\midrule",
    ]
    if table.empty:
        lines.append(latex_comment(table.empty))
    for row in table.rows:
        cells = [latex_escape(row.policy_label), latex_escape(row.metric_label)]
        cells.append(latex_escape(row.group))
        found = row.interval
        if found is None:
            cells += ["--", "--", "--", "--", "--", "--"]
        else:
            ci = "--"
            if found.has_interval:
                ci = f"[{_number_latex(found.low, d)}, {_number_latex(found.high, d)}]"
            cells += [
                _number_latex(found.estimate, d),
                ci,
                "paired $t$" if found.method == PAIRED else latex_escape(found.method),
                latex_escape(count_text(found)),
                _p_latex(found.p),
                "primary" if row.primary else _p_latex(found.p_adjusted),
            ]
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- figure


def row_label(row: SigRow, table: Significance) -> str:
    """ "sgt · llama" (and " · the metric" when the table has several); the group by its
    name ("sgt.lambda_sgt = 0.05 · llama"), as the page's forest plot shows it."""
    names = {group.label: group.name for group in table.groups}
    label = f"{names.get(row.group, row.group)} · {row.policy_label}"
    if len(table.options.metrics) > 1:
        label += f" · {row.metric_label}"
    # Two lines before an ellipsis: the metric's slice ("· carry", "· overflow") comes
    # last, and cut at one line the gap preset's rows read alike.
    return textwrap.fill(figure_label(label, 2 * LABEL_CHARS), LABEL_CHARS)


def build_significance_figure(table: Significance, columns: int = 1) -> Figure:
    """The forest plot (call within :func:`rc_context`): one row per comparison, top to
    bottom in the table's order."""
    rows: Sequence[SigRow] = table.rows
    width = COLUMN_WIDTHS[columns]
    labels = [row_label(row, table) for row in rows]
    row_inches = ROW_INCHES * (1.5 if any("\n" in label for label in labels) else 1.0)
    height = 1.2 + row_inches * max(len(rows), 1)
    figure = Figure(figsize=(width, height), layout="constrained")
    ax = figure.add_subplot()
    if not rows:
        ax.set_axis_off()
        ax.text(0.5, 0.5, table.empty or "no comparisons", ha="center", va="center", wrap=True)
        return figure
    ax.grid(axis="y", visible=False)
    ax.axvline(0.0, color="0.2", linewidth=0.7, linestyle=ZERO_DASH, zorder=1)
    positions = list(range(len(rows)))[::-1]
    for y, row in zip(positions, rows, strict=True):
        found = row.interval
        if found is None or not math.isfinite(found.estimate):
            ax.text(0.0, y, " no value", va="center", fontsize="small", color="0.4")
            continue
        if found.has_interval:
            ax.hlines(y, found.low, found.high, colors=row.colour, linewidth=1.4, zorder=2)
        marker = "o" if found.method == PAIRED else "s"  # the note's ● and ■
        ax.plot([found.estimate], [y], marker=marker, color=row.colour, markersize=4, zorder=3)
    ax.set_yticks(positions)
    ax.set_yticklabels(labels)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    metric = table.rows[0].metric_label if len(table.options.metrics) == 1 else "value"
    chars = int(width * CHARS_PER_INCH)
    label = figure_label(f"{metric}: difference to {table.baseline} ({table.where})", 2 * chars)
    # The x label spans the axes only, beside the row labels' column.
    ax.set_xlabel(textwrap.fill(label, width=max(16, chars - LABEL_CHARS)))
    note = "95% intervals: ● paired t (by seed), ■ Welch (unpaired)"
    if table.correction:
        note += "; Holm-corrected p in the table"
    figure.supxlabel(textwrap.fill(note, width=chars), fontsize="small", color="0.3")
    return figure


def render_significance(table: Significance, fmt: str, columns: int = 1) -> bytes:
    """The forest plot as ``fmt`` (pdf, svg or png) bytes; identical inputs, identical
    bytes."""
    return figure_bytes(lambda: build_significance_figure(table, columns), fmt, columns)
