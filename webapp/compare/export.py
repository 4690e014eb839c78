"""Paper exports of a comparison: figures (PDF, SVG, PNG), data CSV, tables (CSV, LaTeX),
and the figure bundle (a zip of all of them plus every run's config).

Figures are drawn by matplotlib on the server with its object API (``Figure``, no
pyplot state) and the Agg/PDF/SVG canvases, from the same :class:`Comparison` the JSON
endpoint serves: same groups, colours, smoothing, bands and x-axis as on screen.

Settings, per figure (:data:`RC`): DejaVu Sans (shipped with matplotlib, so every
machine draws the same glyphs); TrueType fonts embedded in the PDF (``pdf.fonttype``
42, editable text); text as paths in the SVG (``svg.fonttype = "path"``: no font needed
to view it); one column = 3.5 in wide, two columns = 7.0 in; PNG at 300 dpi. Output is
deterministic: no creation date in PDF/SVG, a fixed SVG id salt, a fixed zip timestamp,
so the same comparison gives the same bytes.

Panels are titled "policy" ("pool mean" for ``_pool``) and their y-axes carry the
metric's display name and unit from the metric catalogue (:mod:`trainer.metrics`); the
data CSV and table CSV keep the keys and write every cell through
:class:`webapp.core.csv_safe.SafeWriter` (a group label from a free-text config field that
a spreadsheet would run as a formula gets a leading "'"). Rows are balanced and a shorter
last row is centred, so no grid slot stays empty (:func:`layout`, :func:`panel_slots`):
rows fill evenly (six panels in two columns: three rows of two), and only where the
count does not divide is the last row shorter. A
figure with 95% CI bands that rest on fewer than 3 runs says so under its panels.

Labels are text: no text of a figure is read as mathtext (``text.parse_math`` off, so a
group label "$\\foo$" draws as written), a long group label is ellipsized in the legend
(:func:`figure_label`), and in the LaTeX table every line break or control character of a
label is a space (:func:`latex_escape`, :func:`latex_comment`).

rcParams are process-global in matplotlib, so rendering holds a lock while it applies
them (safe under a threaded server).
"""

from __future__ import annotations

import io
import json
import logging
import math
import re
import textwrap
import threading
import zipfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import matplotlib
import numpy as np
from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import EngFormatter, LogFormatterSciNotation

from trainer import metrics as m
from webapp.compare import grouping
from webapp.compare.assemble import (
    CI_MIN_RUNS,
    STATISTICS,
    Comparison,
    Panel,
    Summary,
    small_n_runs,
)
from webapp.compare.palette import MATPLOTLIB_DASHES
from webapp.core.csv_safe import SafeWriter

# fontTools logs every font subset at INFO (once per PDF); that is noise in a server log.
logging.getLogger("fontTools").setLevel(logging.WARNING)
# No GUI backend in a server, even if something imports pyplot later (this module uses
# the object API only: savefig picks the PDF/SVG/Agg canvas by format).
matplotlib.use("Agg")

FIGURE_FORMATS = ("pdf", "svg", "png")
COLUMN_WIDTHS = {1: 3.5, 2: 7.0}  # inches
MAX_PANEL_COLUMNS = {1: 2, 2: 4}
MAX_FIGURE_HEIGHT = 9.0  # inches: a page's text height, about
PNG_DPI = 300
BAND_ALPHA = 0.2
CSV_COLUMNS = ("group", "policy", "metric", "x", "mean", "lower", "upper", "n", "raw_mean")
TABLE_CSV_COLUMNS = ("metric", "policy", "group", "statistic", "mean", "std", "n", "best")
ZIP_DATE = (1980, 1, 1, 0, 0, 0)

RC: dict[str, Any] = {
    "pdf.fonttype": 42,
    "ps.fonttype": 42,
    "svg.fonttype": "path",
    "svg.hashsalt": "mutual-rl-lab",
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],
    "mathtext.fontset": "dejavusans",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.35,
    "grid.linewidth": 0.4,
    "axes.linewidth": 0.6,
    "lines.linewidth": 1.1,
    "xtick.major.width": 0.5,
    "ytick.major.width": 0.5,
    "xtick.major.size": 2.5,
    "ytick.major.size": 2.5,
    "legend.frameon": False,
    "path.simplify": False,
    # Every text is literal: a group label such as "$\foo$" is drawn as written, not
    # read as mathtext (an unknown command would fail the whole figure). Log axes get
    # plain-text tick labels from :class:`PlainLogFormatter`.
    "text.parse_math": False,
}
LEGEND_LABEL_CHARS = 40
"""A group label longer than this is ellipsized in a figure's legend and notes (the data
CSV and the tables keep the whole text): about a one-column figure's width of legend."""
LEGEND_CHARS_PER_INCH = 18  # DejaVu Sans at 7-8 pt, about
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
"""Line breaks (\\n, \\r, \\v, \\f, \\x85, \\u2028, \\u2029) and every other control
character: in LaTeX a line break ends a % comment and a blank line ends a paragraph."""
FONT_SIZES = {1: 7.0, 2: 8.0}
METADATA = {
    "pdf": {"CreationDate": None, "ModDate": None},
    "svg": {"Date": None},
    "png": {"Software": None},
}

_RENDER_LOCK = threading.Lock()


# --------------------------------------------------------------------------- figures


def _rc(columns: int) -> dict[str, Any]:
    size = FONT_SIZES[columns]
    return RC | {
        "font.size": size,
        "axes.titlesize": size,
        "axes.labelsize": size,
        "xtick.labelsize": size - 1,
        "ytick.labelsize": size - 1,
        "legend.fontsize": size,
        "legend.title_fontsize": size,
    }


def legend_columns(labels: Sequence[str], columns: int) -> int:
    """How many legend entries share a row: up to 4 (one-column figure) or 6 (two), and
    no more than fit the width side by side even if the longest labels share a row (each
    with its handle, about 6 characters)."""
    room = COLUMN_WIDTHS[columns] * LEGEND_CHARS_PER_INCH
    lengths = sorted((len(figure_label(label)) + 6 for label in labels), reverse=True)
    most = min(len(labels), 4 if columns == 1 else 6)
    while most > 1 and sum(lengths[:most]) > room:
        most -= 1
    return max(most, 1)


def figure_label(text: str, limit: int = LEGEND_LABEL_CHARS) -> str:
    """A label as a figure shows it: on one line (line breaks and control characters as
    spaces) and ellipsized past ``limit`` characters ("…" last)."""
    flat = _CONTROLS.sub(" ", text)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


_SUPERSCRIPTS = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")
_MATHTEXT_NUMBER = re.compile(r"\$\\mathdefault\{(.*)\}\$")


class PlainLogFormatter(LogFormatterSciNotation):
    """Matplotlib's log-axis tick labels (10^k, 2x10^k where minor ticks are labelled) as
    plain text with Unicode superscripts ("10⁻²"), for figures that read no mathtext
    (:data:`RC`)."""

    def __call__(self, x: float, pos: int | None = None) -> str:
        text = super().__call__(x, pos)
        found = _MATHTEXT_NUMBER.fullmatch(text)
        if not found:
            return text
        body = found.group(1).replace("\\times", "\u00d7")  # multiplication sign
        body = re.sub(r"\^\{(-?\d+)\}", lambda m: m.group(1).translate(_SUPERSCRIPTS), body)
        return body.replace("-", "\u2212")  # a minus sign, as matplotlib's other ticks


def layout(n_panels: int, n_metrics: int, columns: int) -> tuple[int, int, float, float]:
    """(rows, panel columns, width, height in inches). Panels go policy by policy, each
    policy's metrics side by side; as many policies share a row as fit whole in the
    width (one column: 2 panels, two columns: 4), more metrics than that wrap.

    Rows are filled evenly: the widest row that divides the panels into full rows (3
    policies of 2 metrics in two columns: 3 rows of 2, not 4 + 2); where no width does
    (a prime number of panels), as few rows as fit, with the fewest columns that fill
    them, so that only the last row is short, and by as little as can be (5 policies of
    one metric in two columns: 3 + 2, not 4 + 1)."""
    widest = MAX_PANEL_COLUMNS[columns]
    if 0 < n_metrics <= widest:
        # Whole policies a row: a multiple of the metrics.
        widths = [n_metrics * k for k in range(1, widest // n_metrics + 1)]
    else:
        widths = list(range(1, widest + 1))
    widths = [width for width in widths if width <= n_panels] or [1]
    # A single column of panels is the last resort (it is tall), unless nothing else fits.
    full = [w for w in widths if n_panels % w == 0 and (w > 1 or widths == [1])]
    if full:
        ncols = max(full)
    else:
        nrows = math.ceil(n_panels / max(widths))
        ncols = min(w for w in widths if math.ceil(n_panels / w) == nrows)
    nrows = max(1, math.ceil(n_panels / ncols))
    width = COLUMN_WIDTHS[columns]
    panel_height = min(max(width / ncols * 0.72, 1.25), 2.2)
    # Many rows of few panels: flatter panels, so the figure fits a page.
    panel_height = max(min(panel_height, (MAX_FIGURE_HEIGHT - 0.45) / nrows), 1.25)
    return nrows, ncols, width, nrows * panel_height + 0.45


def panel_slots(n_panels: int, ncols: int) -> list[tuple[int, int]]:
    """Each panel's (row, first half-column) on a grid of ``2 * ncols`` half-columns, a
    panel two wide: full rows, then a shorter last row centred (no empty slot)."""
    slots = []
    for index in range(n_panels):
        row, col = divmod(index, ncols)
        in_row = min(ncols, n_panels - row * ncols)
        slots.append((row, (ncols - in_row) + 2 * col))
    return slots


def _has_panel_below(slots: Sequence[tuple[int, int]], row: int, start: int) -> bool:
    """Whether a panel of the next row overlaps half-columns [start, start + 2)."""
    return any(r == row + 1 and abs(s - start) < 2 for r, s in slots)


def build_figure(comparison: Comparison, columns: int = 1) -> Figure:
    """The comparison as a matplotlib figure (call within :func:`rc_context`)."""
    panels = comparison.panels
    nrows, ncols, width, height = layout(len(panels), len(comparison.spec.metrics), columns)
    note = ci_note(comparison, columns)
    if note:
        height += 0.15 * (note.count("\n") + 1)
    figure = Figure(figsize=(width, height), layout="constrained")
    grid = figure.add_gridspec(nrows, 2 * ncols)
    slots = panel_slots(len(panels), ncols)
    shown: dict[str, tuple[str, str]] = {}
    for panel, (row, start) in zip(panels, slots, strict=True):
        ax = figure.add_subplot(grid[row, start : start + 2])
        _draw_panel(ax, panel, comparison)
        for trace in panel.traces:
            shown.setdefault(trace.group, (trace.colour, trace.dash))
        if not _has_panel_below(slots, row, start):
            ax.set_xlabel(panel.x_label)
    if note:
        figure.supxlabel(note, fontsize=FONT_SIZES[columns] - 1.5, color="0.3")
    handles = [
        Line2D(
            [],
            [],
            color=group.colour,
            linestyle=MATPLOTLIB_DASHES[group.dash],
            label=figure_label(group.name),
        )
        for group in comparison.groups
        if group.label in shown
    ]
    if handles:
        figure.legend(
            handles=handles,
            loc="outside upper center",
            ncols=legend_columns([handle.get_label() for handle in handles], columns),
            handlelength=1.8,
            columnspacing=1.0,
        )
    return figure


def ci_note(comparison: Comparison, columns: int = 1) -> str | None:
    """The figure's note, wrapped to its width, when its 95% CI bands rest on fewer than
    3 runs somewhere; None otherwise."""
    if comparison.spec.band != "ci95":
        return None
    found = small_n_runs(comparison.panels)
    if not found:
        return None
    groups = ", ".join(
        f"{figure_label(group)} (n = {n})"
        if n is not None
        else f"{figure_label(group)} (in places)"
        for group, n in found.items()
    )
    text = f"95% CI from fewer than {CI_MIN_RUNS} runs: {groups}"
    return textwrap.fill(text, width=int(COLUMN_WIDTHS[columns] * 14))


CHAR_WIDTH_EM = 0.6
"""A generous width of one character of the exports' sans-serif, in ems."""
MIN_LABEL_CHARS = 24
"""A y label this short stays on one line whatever the panel ("Validation reward@1")."""


def fit_axis_label(text: str, length_points: float, font_points: float) -> str:
    """``text`` broken into lines (at spaces) no longer than ``length_points`` at
    ``font_points`` (:data:`CHAR_WIDTH_EM` a character), so a long y label ("Validation
    errors · spurious carry · no_carry") stays beside its own panel instead of running
    into the panels above and below it; the constrained layout makes room for the extra
    lines. A label that fits is returned as it is."""
    chars = max(MIN_LABEL_CHARS, int(length_points / (CHAR_WIDTH_EM * font_points)))
    return text if len(text) <= chars else textwrap.fill(text, width=chars)


def _draw_panel(ax: Any, panel: Panel, comparison: Comparison) -> None:
    spec = comparison.spec
    ax.set_title(panel.policy_label)
    # The panel's share of the figure's height (its title and ticks take about a fifth).
    rows = ax.get_subplotspec().get_gridspec().nrows
    length = ax.figure.get_figheight() * 72.0 / rows * 0.8
    ax.set_ylabel(fit_axis_label(panel.y_label, length, ax.yaxis.label.get_size()))
    if spec.log_y:
        ax.set_yscale("log", nonpositive="mask")
        ax.yaxis.set_major_formatter(PlainLogFormatter())
        ax.yaxis.set_minor_formatter(PlainLogFormatter(labelOnlyBase=False))
    if panel.x_label in ("rollouts", "response tokens"):
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    if not panel.traces:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        return
    for trace in panel.traces:
        x = np.asarray(trace.x, dtype=float)
        if spec.band != "none":
            ax.fill_between(
                x,
                np.ma.masked_invalid(trace.lower),
                np.ma.masked_invalid(trace.upper),
                color=trace.colour,
                alpha=BAND_ALPHA,
                linewidth=0,
            )
        ax.plot(
            x,
            np.ma.masked_invalid(trace.mean),
            color=trace.colour,
            linestyle=MATPLOTLIB_DASHES[trace.dash],
        )


def render_figure(comparison: Comparison, fmt: str, columns: int = 1) -> bytes:
    """The figure as ``fmt`` (pdf, svg or png) bytes; identical inputs, identical bytes."""
    return render_figures(comparison, (fmt,), columns)[fmt]


def render_figures(
    comparison: Comparison, formats: Sequence[str], columns: int = 1
) -> dict[str, bytes]:
    """The figure in each of ``formats``, drawn once and saved in each."""
    for fmt in formats:
        if fmt not in FIGURE_FORMATS:
            raise ValueError(f"figure format must be one of {FIGURE_FORMATS}, not {fmt!r}")
    if columns not in COLUMN_WIDTHS:
        raise ValueError(f"columns must be 1 or 2, not {columns}")
    rendered = {}
    with _RENDER_LOCK, rc_context(_rc(columns)):
        figure = build_figure(comparison, columns)
        for fmt in formats:
            buffer = io.BytesIO()
            figure.savefig(buffer, format=fmt, dpi=PNG_DPI, metadata=METADATA[fmt])
            rendered[fmt] = buffer.getvalue()
    return rendered


def figure_bytes(
    build: Callable[[], Figure],
    fmt: str,
    columns: int = 1,
    rc: Mapping[str, Any] | None = None,
) -> bytes:
    """The figure ``build()`` draws (called under the exports' rcParams for ``columns``,
    ``rc`` added, and the render lock) as ``fmt`` (pdf, svg or png) bytes; identical
    inputs, identical bytes. The bar views' and the significance view's figures."""
    if fmt not in FIGURE_FORMATS:
        raise ValueError(f"figure format must be one of {FIGURE_FORMATS}, not {fmt!r}")
    if columns not in COLUMN_WIDTHS:
        raise ValueError(f"columns must be 1 or 2, not {columns}")
    with _RENDER_LOCK, rc_context(_rc(columns) | dict(rc or {})):
        buffer = io.BytesIO()
        build().savefig(buffer, format=fmt, dpi=PNG_DPI, metadata=METADATA[fmt])
        return buffer.getvalue()


# --------------------------------------------------------------------------- data CSV


def number_text(value: float | None) -> str:
    """A value as CSV text, spelled as the JSON API spells it
    (:func:`webapp.core.http.encode_value`): ``repr``, "NaN"/"Infinity"/"-Infinity",
    and the empty string for None. Here rather than in :mod:`webapp.compare.serialize`
    so that the exports import no Django: their figures are drawn in a child process
    that has none (:mod:`webapp.compare.export_render`)."""
    if value is None:
        return ""
    number = float(value)
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "Infinity" if number > 0 else "-Infinity"
    return repr(number)


def data_csv(comparison: Comparison) -> str:
    """Every plotted point: group, policy, metric, x, mean, lower, upper, n, raw_mean
    (``mean``/``lower``/``upper`` smoothed when the spec smooths; ``raw_mean`` the
    unsmoothed group mean). Values as in the JSON endpoint."""
    out = io.StringIO()
    writer = SafeWriter(out)
    writer.writerow(CSV_COLUMNS)
    for panel in comparison.panels:
        for trace in panel.traces:
            columns = (trace.x, trace.mean, trace.lower, trace.upper, trace.n, trace.raw_mean)
            for x, mean, lower, upper, n, raw in zip(*columns, strict=True):
                writer.writerow(
                    (
                        trace.group,
                        panel.policy,
                        panel.metric,
                        number_text(x),
                        number_text(mean),
                        number_text(lower),
                        number_text(upper),
                        int(n),
                        number_text(raw),
                    )
                )
    return out.getvalue()


# --------------------------------------------------------------------------- tables


def table_csv(summaries: Sequence[Summary]) -> str:
    """One row per metric x policy x group x statistic: mean, std, n, and ``best`` (1 for
    the best group of that policy and statistic)."""
    out = io.StringIO()
    writer = SafeWriter(out)
    writer.writerow(TABLE_CSV_COLUMNS)
    for summary in summaries:
        for row in summary.rows:
            for cell in row.cells:
                for name in STATISTICS:
                    value = cell.stat(name)
                    best = summary.best[name].get(row.policy) == cell.group
                    writer.writerow(
                        (
                            summary.metric,
                            row.policy,
                            cell.group,
                            name,
                            number_text(value.mean),
                            number_text(value.std),
                            value.n,
                            int(best),
                        )
                    )
    return out.getvalue()


_LATEX_SPECIALS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def latex_escape(text: str) -> str:
    """``text`` as LaTeX text: the special characters escaped, every line break and
    control character a space (so a label stays on its line: in its table cell, or in
    its comment)."""
    return "".join(_LATEX_SPECIALS.get(char, char) for char in _CONTROLS.sub(" ", text))


def latex_comment(text: str) -> str:
    """One LaTeX comment line, "% text", whatever ``text`` holds: its line breaks and
    control characters become spaces, so nothing after them can leave the comment."""
    return "% " + _CONTROLS.sub(" ", text)


def decimals_for(values: Sequence[float]) -> int:
    """Decimals that show about three significant digits of the largest value."""
    finite = [abs(v) for v in values if v is not None and math.isfinite(v) and v != 0]
    if not finite:
        return 3
    return min(8, max(0, 2 - math.floor(math.log10(max(finite)))))


def table_latex(summaries: Sequence[Summary]) -> str:
    """A booktabs ``tabular`` per summary: rows policy x group, columns final, best, mean
    (mean $\\pm$ std over runs) and n; the best group per policy and column in bold."""
    return "\n".join(_one_table_latex(summary) for summary in summaries)


def _one_table_latex(summary: Summary) -> str:
    values = [
        v
        for row in summary.rows
        for cell in row.cells
        for name in STATISTICS
        for v in (cell.stat(name).mean, cell.stat(name).std)
        if v is not None
    ]
    decimals = decimals_for(values)
    direction = "lower" if summary.lower_is_better else "higher"
    # The group column names the grouping key ("sgt.lambda\_sgt") unless its labels
    # name themselves (regimes, experiments): grouping.group_name's rule, as a heading.
    group_heading = (
        "Group" if summary.group_by in grouping.SELF_NAMING else latex_escape(summary.group_by)
    )
    lines = [
        latex_comment(
            f"{m.label(summary.metric)} ({summary.metric}): final, best and mean value per "
            "run; mean $\\pm$ std (ddof=1) over the runs of each group, n runs."
        ),
        latex_comment(
            f"Bold: the best group per policy and column ({direction} is better). "
            "Needs \\usepackage{booktabs}."
        ),
        r"\begin{tabular}{llrrrr}",
        r"\toprule",
        rf"Policy & {group_heading} & Final & Best & Mean & $n$ \\",
    ]
    for row in summary.rows:
        lines.append(r"\midrule")
        for position, cell in enumerate(row.cells):
            policy = m.policy_label(row.policy, summary.metric)
            entries = [latex_escape(policy) if position == 0 else "", latex_escape(cell.group)]
            for name in STATISTICS:
                text = _mean_std_latex(cell.stat(name).mean, cell.stat(name).std, decimals)
                if summary.best[name].get(row.policy) == cell.group:
                    text = f"\\textbf{{{text}}}"
                entries.append(text)
            entries.append(str(max(cell.final.n, cell.best.n, cell.mean.n)))
            lines.append(" & ".join(entries) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(lines)


def _mean_std_latex(mean: float | None, std: float | None, decimals: int) -> str:
    if mean is None:
        return "--"
    if std is None:
        return _number_latex(mean, decimals)
    return f"{_number_latex(mean, decimals)} $\\pm$ {_number_latex(std, decimals)}"


def _number_latex(value: float, decimals: int) -> str:
    """A fixed-point number; a minus sign, not a hyphen, when negative."""
    text = f"{value:.{decimals}f}"
    if not text.startswith("-"):
        return text
    return text[1:] if float(text) == 0 else f"$-${text[1:]}"


# --------------------------------------------------------------------------- bundle

README = """Figure bundle of a Mutual RL Lab comparison.

figure.pdf / figure.svg / figure.png  the figure ({width} in wide; PNG at {dpi} dpi)
data.csv       every plotted point: group, policy, metric, x, mean, lower, upper, n,
               raw_mean (mean/lower/upper smoothed if smoothing is on; raw_mean is not)
table.csv      per metric, policy, group: final/best/mean value per run, mean +- std
               (ddof=1) over the group's runs, n, and the best group per column
table.tex      the same as booktabs tables
configs/       the exact trainer config of every run involved
spec.txt       the comparison's query string: open /compare/?<spec> to see it again

Grouping: {group_by}. Band: {band}. Smoothing: debiased EMA, weight {smooth}, per run on
a grid of {grid} step buckets, before averaging over runs. x-axis: {x}.
Policy "_pool" in the CSV files is the pool mean (pool-wide aggregates of rank 0).
{notes}"""


def _zip_entry(archive: zipfile.ZipFile, name: str, data: bytes | str) -> None:
    info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    archive.writestr(info, data)


def bundle(
    comparison: Comparison,
    summaries: Sequence[Summary],
    figures: Mapping[str, bytes],
    columns: int = 1,
) -> bytes:
    """The figure bundle: figures, data.csv, table.csv/.tex, configs/run-<id>.json,
    spec.txt and a README; deterministic bytes. ``figures``: the figure as each of
    :data:`FIGURE_FORMATS`, drawn beforehand (by :func:`render_figures`, in the limited
    child process of :mod:`webapp.compare.export_render` on the server)."""
    spec = comparison.spec
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for fmt in FIGURE_FORMATS:
            _zip_entry(archive, f"figure.{fmt}", figures[fmt])
        _zip_entry(archive, "data.csv", data_csv(comparison))
        _zip_entry(archive, "table.csv", table_csv(summaries))
        _zip_entry(archive, "table.tex", table_latex(summaries))
        for run in sorted(comparison.runs, key=lambda run: run.pk):
            config = json.dumps(run.config, indent=2, sort_keys=True, ensure_ascii=False)
            _zip_entry(archive, f"configs/run-{run.pk}.json", config + "\n")
        _zip_entry(archive, "spec.txt", spec.to_query() + "\n")
        _zip_entry(archive, "README.txt", readme_text(comparison, columns))
    return buffer.getvalue()


def readme_text(comparison: Comparison, columns: int = 1) -> str:
    """The bundle's README: its files, the comparison's settings, and the note on a 95%
    CI over fewer than 3 runs when there is one."""
    spec = comparison.spec
    return README.format(
        width=COLUMN_WIDTHS[columns],
        dpi=PNG_DPI,
        group_by=spec.group_by,
        band=spec.band,
        smooth=spec.smooth,
        grid=comparison.grid,
        x=spec.x,
        notes=f"\nNote: {comparison.ci_note}\n" if comparison.ci_note else "",
    )
