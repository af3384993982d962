"""The documentation's performance page (``docs/performance.md``) and its plots.

``benches/compare.py`` fills a ``Page`` while it runs (each table it prints, with a one-line
reading, the figures behind the plots, and the few figures the page opens with) and
``write_page`` turns it into Markdown with three SVG plots under ``img/``, drawn by matplotlib
(the ``bench`` extra) in the same run.

The page opens with what the figures mean for a user (``Summary``: cost per chunk, share of
the SDK's own cost, against the engines' stop rules, holdback), then the targets, then how it
was measured, then every table. Tables wider than the content column of the site at a 1280 px
window are split by columns (``fit_table``), each part repeating the first column.

The plots:

- ``perf-stops-scaling.svg``: cost per chunk against the number of stops, every contender;
- ``perf-holdback.svg``: characters held back after each chunk of a real stream;
- ``perf-adapters.svg``: the provider adapters against what a gateway spends anyway.

The SVGs keep text as text (``svg.fonttype = 'none'``: no glyph outlines), carry no date and
no matplotlib version, and take their element ids from a fixed salt, so that the same figures
give the same bytes and a re-run diffs only where a figure moved. Nothing here imports
matplotlib until a plot is drawn; ``require_matplotlib`` checks for it up front.
"""

from __future__ import annotations

import importlib.util
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

PAGE = "performance.md"
IMAGES = "img"
SCALING_SVG = "perf-stops-scaling.svg"
HOLDBACK_SVG = "perf-holdback.svg"
ADAPTERS_SVG = "perf-adapters.svg"

INSTALL_HINT = (
    "matplotlib is needed to draw the performance page's plots: "
    "pip install 'stopstream[bench]' (or run with --no-page for the tables only)"
)


def require_matplotlib() -> None:
    """Exit with an install hint when matplotlib is missing (before any timing starts)."""
    if importlib.util.find_spec("matplotlib") is None:
        raise SystemExit(INSTALL_HINT)


# -- what compare.py records -----------------------------------------------------------------


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


Block = str | Table  # a Markdown paragraph (or list), or a table


@dataclass
class Section:
    """One heading of the page: its tables and notes, a one-line reading, maybe a plot."""

    title: str
    blocks: list[Block] = field(default_factory=list)
    reading: str = ""
    plot: str | None = None  # one of the *_SVG names, drawn after the reading
    note: str = ""  # what the tables show, under the reading and the plot


@dataclass(frozen=True)
class Scaling:
    """ns per chunk of each contender, for each stop count."""

    counts: tuple[int, ...]
    series: dict[str, tuple[float, ...]]  # label -> one figure per count
    floor: str  # the label of the pass-through floor (drawn dashed)
    ours: tuple[str, ...]  # stopstream's labels (drawn solid, on top)


@dataclass(frozen=True)
class Holdback:
    """Characters held back after each chunk, per contender, over one stream."""

    stops: str  # how the stop list is described in the caption
    series: dict[str, tuple[int, ...]]  # label -> one figure per chunk
    ours: str  # stopstream's label
    means: dict[str, dict[str, float]]  # stop set -> label -> mean characters held back


@dataclass(frozen=True)
class AdapterBar:
    name: str
    ns: float
    baseline: str
    baseline_ns: float


@dataclass
class Summary:
    """The figures the page opens with; a figure left ``None`` (not measured) is left out."""

    conditions: str  # the machine and Python, in a few words
    stops: str = "1 to 10,000"  # the stop counts the per-chunk ranges cover
    wrap_ns: tuple[float, float] | None = None  # wrap per chunk: fewest stops, most stops
    feed_ns: tuple[float, float] | None = None  # a Python loop over StopFilter.feed, the same
    floor_ns: float | None = None  # a bare generator passing the chunks through
    # (the engine's rules, speedup with 4 stops, speedup with 1,000), first one first
    engines: list[tuple[str, float, float]] = field(default_factory=list)
    sdk: list[AdapterBar] = field(default_factory=list)  # over SDK objects / the SDK's streaming
    held: tuple[float, float] | None = None  # mean characters held back, 4 stops: ours, vLLM's


@dataclass
class Page:
    title: str
    intro: list[str]  # Markdown paragraphs: how it was measured
    targets: Section
    sections: list[Section]
    scaling: Scaling
    holdback: Holdback
    adapters: list[AdapterBar]
    summary: Summary


# -- figures ---------------------------------------------------------------------------------


def fmt_ns(ns: float) -> str:
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e4:
        return f"{ns / 1e3:.0f} µs"
    if ns >= 1e3:
        return f"{ns / 1e3:.1f} µs"
    return f"{ns:.0f} ns"


def fmt_ratio(ratio: float) -> str:
    if ratio >= 100:
        return f"{ratio:,.0f}x"
    if ratio >= 10:
        return f"{ratio:.1f}x"
    return f"{ratio:.2f}x"


SUMMARY_TITLE = "What it costs a stream"
METHOD_TITLE = "How it was measured"
TARGETS_TITLE = "Targets"
TARGETS_NOTE = (
    "The targets are stretch goals the project sets itself, to steer work on the core. Most "
    "ask for more than a user could notice: that `wrap` cost the same per chunk, within 1.2x, "
    "with 1 stop or 100,000; that the async forms cost no more than the sync ones plus an "
    "async pass-through. A target not met means the core is not yet where the project wants "
    "it; the figures above are what a stream pays. `python benches/compare.py --strict` exits "
    "1 while a target is not met."
)


def summary_lines(s: Summary) -> list[str]:
    """The page's opening: one paragraph, then a section with one item per figure measured."""
    items = []
    if s.wrap_ns is not None:
        low, high = s.wrap_ns
        item = (
            f"- **Per chunk.** `wrap` takes {fmt_ns(low)} to {fmt_ns(high)} per streamed chunk "
            f"with {s.stops} stops"
        )
        if s.floor_ns is not None:
            item += f" (a bare generator passing the chunks on: {fmt_ns(s.floor_ns)})"
        item += f". At 1,000 chunks a second that is {high * 1_000 / 1e9:.3%} of one core at most."
        if s.feed_ns is not None:
            item += (
                f" A Python loop over `StopFilter.feed` takes {fmt_ns(s.feed_ns[0])} to "
                f"{fmt_ns(s.feed_ns[1])}."
            )
        items.append(item)
    if s.sdk:
        parts = [
            f"`{b.name.split(' ')[0]}` {fmt_ratio(b.ns / b.baseline_ns)} "
            f"({fmt_ns(b.ns)} per chunk against {fmt_ns(b.baseline_ns)})"
            for b in s.sdk
        ]
        items.append(
            "- **Next to the SDK.** Over the SDKs' own stream objects, the adapters cost a "
            "small share of what the SDK spends streaming them: " + ", ".join(parts) + "."
        )
    if s.engines:
        (name, four, thousand), *others = s.engines
        item = (
            f"- **Against the engines' stop rules.** `wrap` is {fmt_ratio(four)} faster than "
            f"{name} with 4 stops and {fmt_ratio(thousand)} faster with 1,000"
        )
        item += "".join(f" ({other}: {fmt_ratio(a)} and {fmt_ratio(b)})" for other, a, b in others)
        item += (
            ". Those rules look for each stop in turn, in Python (re-implemented here as the "
            "engines run them); stopstream scans once for all stops."
        )
        items.append(item)
    if s.held is not None:
        ours, vllm = s.held
        items.append(
            "- **Holdback.** After every chunk stopstream holds back exactly the text that could "
            f"still begin a stop, and nothing more: {ours:.2f} characters on average with 4 "
            f"stops, where vLLM's fixed holdback keeps {vllm:.2f} back from the client."
        )
    lead = (
        "What applying stop sequences with stopstream costs a streamed response, from one run "
        f"on {s.conditions}. The method is under [{METHOD_TITLE}](#how-it-was-measured); every "
        "figure's table follows the targets."
    )
    return [lead, f"## {SUMMARY_TITLE}", "\n".join(items)] if items else [lead]


# -- Markdown --------------------------------------------------------------------------------


def escape_cell(text: str) -> str:
    """A table cell's text as Markdown: ``|`` would end the cell, and ``<`` may start raw
    HTML (``</answer>`` would vanish from the rendered page)."""
    return text.replace("|", "\\|").replace("<", "&lt;")


def markdown_table(table: Table) -> str:
    return "\n\n".join(render_table(t.header, t.rows, escape_cell) for t in fit_table(table))


# The content column of the site at a 1280 px window (MkDocs Material, both sidebars shown) is
# 688 px; a table cell's text is 12.8 px, about 6.6 px a character, with 16 px of padding on
# each side, and a column is at least 5rem (100 px) wide. A word never breaks, so a column is at
# least its longest word wide: a table whose columns need more than the content column scrolls
# sideways, and the columns past the edge are out of sight.
CONTENT_PX = 688
CHAR_PX = 6.6
CELL_PADDING_PX = 32
COLUMN_MIN_PX = 100
FIRST_COLUMN_CHARS = 26  # the first column (labels) of a split table wraps to about this width


def column_px(cells: Sequence[str], chars: int | None = None) -> float:
    """The narrowest a column can be (its longest word), or with ``chars`` the width it takes
    with its text wrapped to about that many characters (never narrower than its longest
    word)."""
    longest = max(len(w) for c in cells for w in [*c.split(), ""])
    if chars is not None:
        longest = max(longest, min(chars, max(len(c) for c in cells)))
    return max(COLUMN_MIN_PX, longest * CHAR_PX + CELL_PADDING_PX)


def fit_table(table: Table, width: float = CONTENT_PX) -> list[Table]:
    """``table``, or, when its columns cannot fit ``width`` however their text wraps, tables
    of its columns that do (each repeating the first column, wrapped to about
    ``FIRST_COLUMN_CHARS``; the columns shared out evenly)."""
    columns = list(zip(table.header, *table.rows, strict=True))
    if sum(column_px(col) for col in columns) <= width or len(columns) <= 2:
        return [table]
    first = column_px(columns[0], FIRST_COLUMN_CHARS)
    widths = [column_px(col) for col in columns[1:]]
    parts = 1
    used = first
    for w in widths:
        if used + w > width and used > first:
            parts += 1
            used = first
        used += w
    # Even parts: 7 columns over two tables as 4 and 3, not 6 and 1.
    size = -(-len(widths) // parts)
    groups = [range(1 + k, 1 + min(k + size, len(widths))) for k in range(0, len(widths), size)]
    return [
        Table(
            (table.header[0], *(table.header[i] for i in group)),
            tuple((row[0], *(row[i] for i in group)) for row in table.rows),
        )
        for group in groups
    ]


def render_table(
    header: Sequence[str], rows: Sequence[Sequence[str]], escape: Callable[[str], str]
) -> str:
    """A Markdown table with aligned columns, each cell passed through ``escape``."""
    head = [escape(h) for h in header]
    cells = [[escape(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(head)]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    lines += [
        "| " + " | ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) + " |" for r in cells
    ]
    return "\n".join(lines)


CAPTIONS = {
    SCALING_SVG: "Cost per chunk against the number of stops (log-log)",
    HOLDBACK_SVG: "Characters held back after each chunk",
    ADAPTERS_SVG: "Provider adapters against what a gateway spends anyway",
}


def render(page: Page) -> str:
    """The page's Markdown (images referenced as ``img/NAME.svg``, relative to the page): what
    the figures mean, the targets, how they were measured, then every section."""
    out = [f"# {page.title}", *summary_lines(page.summary)]
    for section in (page.targets, Section(METHOD_TITLE, list(page.intro)), *page.sections):
        out.append(f"## {section.title}")
        if section.note and section is page.targets:
            out.append(section.note)  # what a target is, before how many were met
        if section.reading:
            out.append(f"**Reading:** {section.reading}")
        if section.plot is not None:
            out.append(f"![{CAPTIONS[section.plot]}]({IMAGES}/{section.plot})")
        if section.note and section is not page.targets:
            out.append(section.note)
        for block in section.blocks:
            out.append(markdown_table(block) if isinstance(block, Table) else block)
    return "\n\n".join(out) + "\n"


# -- plots -----------------------------------------------------------------------------------

# No date, no matplotlib version: the same figures give the same bytes.
METADATA: dict[str, str | None] = {"Date": None, "Creator": None}
OURS_COLOURS = ("#1b7837", "#5aae61", "#a6dba0")
OTHER_COLOURS = ("#c51b7d", "#e08214", "#8073ac", "#2166ac", "#b2182b")
FLOOR_COLOUR = "#777777"


def _figure(width: float, height: float) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _save(fig: Figure, path: Path) -> None:
    fig.savefig(path, format="svg", metadata=METADATA)
    # The rest of the file is a function of the figures; matplotlib still writes a comment
    # with its version in some releases.
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"<!-- Created with matplotlib [^>]*-->\n?", "", text)
    path.write_text(text, encoding="utf-8")


def _ns_label(ns: float, _pos: object = None) -> str:
    if ns >= 1e6:
        return f"{ns / 1e6:g} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:g} µs"
    return f"{ns:g} ns"


def plot_scaling(data: Scaling, path: Path) -> None:
    from matplotlib.ticker import FuncFormatter

    fig = _figure(7.0, 4.0)
    ax = fig.add_subplot()
    others = iter(OTHER_COLOURS)
    ours = iter(OURS_COLOURS)
    for label, values in data.series.items():
        if label == data.floor:
            colour, line, marker, z = FLOOR_COLOUR, "--", "", 2
        elif label in data.ours:
            colour, line, marker, z = next(ours), "-", "o", 4
        else:
            colour, line, marker, z = next(others), "-", "s", 3
        ax.plot(
            data.counts,
            values,
            label=label,
            color=colour,
            linestyle=line,
            marker=marker,
            zorder=z,
            linewidth=1.6,
            markersize=4,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(data.counts, [f"{n:,}" for n in data.counts])
    ax.minorticks_off()
    ax.yaxis.set_major_formatter(FuncFormatter(_ns_label))
    ax.set_xlabel("stops in the list (log scale)")
    ax.set_ylabel("time per chunk (log scale)")
    ax.set_title("Cost per streamed chunk as the stop list grows", loc="left")
    ax.legend(loc="upper left", fontsize=8)
    _save(fig, path)


def busiest_window(values: Sequence[int], width: int, step: int = 10) -> int:
    """The start of the ``width``-chunk window where ``values`` is most often non-zero (the
    first such window; 0 when there are fewer than ``width`` values)."""
    best, best_start = -1, 0
    for start in range(0, max(1, len(values) - width + 1), step):
        count = sum(1 for v in values[start : start + width] if v)
        if count > best:
            best, best_start = count, start
    return best_start


def plot_holdback(data: Holdback, path: Path, width: int = 120) -> None:
    fig = _figure(7.5, 3.9)
    series_ax, means_ax = fig.subplots(1, 2, width_ratios=(2.3, 1))
    start = busiest_window(data.series[data.ours], width)
    others = iter(OTHER_COLOURS)
    colours = {
        label: OURS_COLOURS[0] if label == data.ours else next(others) for label in data.series
    }
    for label, values in data.series.items():
        part = values[start : start + width]
        xs = range(start, start + len(part))
        ours = label == data.ours
        series_ax.step(
            xs,
            part,
            where="post",
            label=label,
            color=colours[label],
            linewidth=2.0 if ours else 1.3,
            zorder=4 if ours else 3,
        )
    series_ax.set_xlabel(f"chunk of the stream (the {width} where stopstream holds back most)")
    series_ax.set_ylabel("characters held back")
    series_ax.set_title(f"After each chunk, {data.stops}", loc="left")
    highest = max(max(values[start : start + width], default=0) for values in data.series.values())
    series_ax.set_ylim(0, highest * 1.15 + 0.5)
    fig.legend(loc="outside lower center", ncols=len(data.series), fontsize=8)
    _mean_bars(means_ax, data, colours)
    _save(fig, path)


def _mean_bars(ax: Axes, data: Holdback, colours: dict[str, str]) -> None:
    stop_sets = list(data.means)
    labels = list(data.series)
    bar = 0.8 / len(labels)
    for i, label in enumerate(labels):
        xs = [k + (i - (len(labels) - 1) / 2) * bar for k in range(len(stop_sets))]
        ax.bar(xs, [data.means[s][label] for s in stop_sets], bar, color=colours[label])
    ax.set_xticks(range(len(stop_sets)), stop_sets)
    ax.set_xlabel("stop list")
    ax.set_ylabel("mean characters held back")
    ax.set_title("Mean, per stop list", loc="left")
    ax.grid(axis="x", visible=False)


def plot_adapters(bars: Sequence[AdapterBar], path: Path) -> None:
    from matplotlib.ticker import FuncFormatter

    fig = _figure(7.5, 0.42 * len(bars) + 1.3)
    ax = fig.add_subplot()
    ys = list(range(len(bars)))[::-1]
    height = 0.38
    ax.barh(
        [y - height / 2 for y in ys],
        [b.ns for b in bars],
        height,
        color=OURS_COLOURS[0],
        label="stopstream adapter",
    )
    ax.barh(
        [y + height / 2 for y in ys],
        [b.baseline_ns for b in bars],
        height,
        color=FLOOR_COLOUR,
        label="what it is compared with",
    )
    for y, b in zip(ys, bars, strict=True):
        ax.text(
            max(b.ns, b.baseline_ns) * 1.15,
            y,
            f"{b.ns / b.baseline_ns:.2f}x",
            va="center",
            fontsize=8,
        )
    ax.set_yticks(ys, [f"{b.name}\nvs {b.baseline}" for b in bars], fontsize=7)
    ax.set_xscale("log")
    ax.minorticks_off()
    ax.xaxis.set_major_formatter(FuncFormatter(_ns_label))
    high = max(max(b.ns, b.baseline_ns) for b in bars)
    low = min(min(b.ns, b.baseline_ns) for b in bars)
    ax.set_xlim(10 ** math.floor(math.log10(low)), high * 4)
    ax.set_xlabel("time per item (log scale); label: the adapter's multiple")
    ax.set_title("Adapters per event or chunk, against their baselines", loc="left")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="y", visible=False)
    _save(fig, path)


def write_page(page: Page, out_dir: Path) -> list[Path]:
    """Write ``out_dir/performance.md`` and its plots under ``out_dir/img``; the paths."""
    import matplotlib

    images = out_dir / IMAGES
    images.mkdir(parents=True, exist_ok=True)
    written = [images / SCALING_SVG, images / HOLDBACK_SVG, images / ADAPTERS_SVG]
    with matplotlib.rc_context(
        {
            "svg.fonttype": "none",  # text stays text: no glyph outlines
            "svg.hashsalt": "stopstream-performance",  # fixed element ids
            "font.family": "DejaVu Sans",  # matplotlib's own: the same metrics everywhere
            "font.size": 9.0,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "grid.linewidth": 0.6,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "legend.frameon": False,
        }
    ):
        plot_scaling(page.scaling, written[0])
        plot_holdback(page.holdback, written[1])
        plot_adapters(page.adapters, written[2])
    markdown = out_dir / PAGE
    markdown.write_text(render(page), encoding="utf-8")
    return [markdown, *written]
