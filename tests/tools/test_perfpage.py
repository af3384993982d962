"""The performance page's writer (``benches/perfpage.py``) on tiny synthetic results.

``benches/compare.py`` fills the same ``Page`` from a real run; here a few made-up figures
are enough to check the page and its plots: the page opens with what the figures mean for a
user and the targets come second, with no target's status before them; the page embeds each
plot it writes (as ``img/NAME.svg``, relative to itself, for MkDocs), each plot is a real SVG
that keeps its text as text, and the same figures give the same bytes; a table too wide for
the site's content column is split by columns.
"""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benches"))
import perfpage  # benches/ is not a package: imported from its directory

SVG = "{http://www.w3.org/2000/svg}"


def synthetic_page() -> perfpage.Page:
    counts = (1, 10, 100, 1_000)
    scaling = perfpage.Scaling(
        counts,
        {
            "floor": (40.0, 40.0, 40.0, 40.0),
            "stopstream wrap": (60.0, 61.0, 63.0, 64.0),
            "vLLM v1": (500.0, 3e3, 3e4, 3e5),
            "SGLang / llama.cpp": (700.0, 5e3, 5e4, 5e5),
        },
        floor="floor",
        ours=("stopstream wrap",),
    )
    ours = tuple(2 if i % 17 == 3 else 0 for i in range(400))
    holdback = perfpage.Holdback(
        "4 stops",
        {
            "stopstream (the minimum)": ours,
            "vLLM v1 (max(len) - 1)": tuple(min(i, 9) for i in range(400)),
            "SGLang / llama.cpp": tuple(5 * v for v in ours),
        },
        "stopstream (the minimum)",
        {
            "1": {"stopstream (the minimum)": 0.1, "vLLM v1 (max(len) - 1)": 8.0},
            "4": {"stopstream (the minimum)": 0.2, "vLLM v1 (max(len) - 1)": 9.0},
        },
    )
    # Two labels only in the series; the means name the same ones.
    for means in holdback.means.values():
        means["SGLang / llama.cpp"] = 1.5
    adapters = [
        perfpage.AdapterBar("sse.wrap_openai, per event", 400.0, "json.loads of the event", 1e3),
        perfpage.AdapterBar("openai.wrap_chat", 150.0, "the openai SDK's streaming", 9e3),
        perfpage.AdapterBar("stopstream awrap", 90.0, "async pass-through", 60.0),
    ]
    table = perfpage.Table(
        ("stops", "throughput"), (("['<|im_end|>', '</s>']", "3.10 GB/s"), ("1,000", "2.00 GB/s"))
    )
    sections = [
        perfpage.Section("Per-chunk cost", [table], "Flat.", perfpage.SCALING_SVG),
        perfpage.Section("Holdback", [table, "A note."], "The minimum.", perfpage.HOLDBACK_SVG),
        perfpage.Section("Adapters", [table], "Cheap.", perfpage.ADAPTERS_SVG),
        perfpage.Section("No plot", [table], "Plain."),
    ]
    targets_table = perfpage.Table(
        ("what", "measured", "target", "status"),
        (("wrap per chunk", "2.06x", "<= 1.5x", "not met"), ("holdback", "0", "0", "met")),
    )
    targets = perfpage.Section(
        perfpage.TARGETS_TITLE,
        [targets_table],
        "1 of 2 targets met; the other 1 is marked *not met*.",
        note=perfpage.TARGETS_NOTE,
    )
    summary = perfpage.Summary(
        "2 cores of an Example CPU, CPython 3.11.7 on Linux",
        wrap_ns=(28.0, 92.0),
        feed_ns=(84.0, 158.0),
        floor_ns=16.0,
        engines=[("vLLM's rules", 25.1, 1848.0), ("SGLang's / llama.cpp's", 39.5, 2254.0)],
        sdk=[adapters[1]],
        held=(0.11, 9.0),
    )
    return perfpage.Page(
        "Performance",
        ["Intro.", "**Load.** 0.50"],
        targets,
        sections,
        scaling,
        holdback,
        adapters,
        summary,
    )


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return perfpage.write_page(synthetic_page(), tmp_path_factory.mktemp("page"))


def test_page_embeds_each_plot_and_each_plot_is_an_svg(written: list[Path]) -> None:
    tmp_path = written[0].parent
    page = tmp_path / perfpage.PAGE
    assert written[0] == page
    svgs = sorted(p for p in written if p.suffix == ".svg")
    assert sorted((tmp_path / "img").iterdir()) == svgs
    assert {p.name for p in svgs} == {
        perfpage.SCALING_SVG,
        perfpage.HOLDBACK_SVG,
        perfpage.ADAPTERS_SVG,
    }

    text = page.read_text(encoding="utf-8")
    embedded = re.findall(r"!\[[^\]]+\]\((img/[^)]+\.svg)\)", text)
    assert sorted(embedded) == sorted(f"img/{p.name}" for p in svgs)
    headings = re.findall(r"^## (.*)$", text, re.M)
    assert headings[:3] == [perfpage.SUMMARY_TITLE, perfpage.TARGETS_TITLE, perfpage.METHOD_TITLE]
    assert "## How it was measured\n\nIntro.\n\n**Load.** 0.50\n\n## Per-chunk cost\n" in text
    # Plain Markdown tables; a cell's "|" and "<" are escaped.
    assert "| ['&lt;\\|im_end\\|>', '&lt;/s>'] | 3.10 GB/s  |" in text
    assert text.count("**Reading:**") == 5

    for svg in svgs:
        data = svg.read_bytes()
        assert 5_000 < len(data) < 150_000, (svg.name, len(data))
        root = ET.fromstring(data)
        assert root.tag == f"{SVG}svg"
        assert float(root.attrib["width"].removesuffix("pt")) > 100
        # Text stays text (svg.fonttype 'none'), no glyph outlines are embedded.
        texts = [t for t in root.iter(f"{SVG}text") if "".join(t.itertext()).strip()]
        assert len(texts) >= 5, svg.name
        assert b"DejaVuSans-" not in data
        assert len(list(root.iter(f"{SVG}path"))) >= 10, svg.name
        # Nothing that changes from run to run but the figures.
        assert b"<dc:date>" not in data and b"Matplotlib v" not in data
    labels = "".join((tmp_path / "img" / perfpage.SCALING_SVG).read_text(encoding="utf-8"))
    assert "stopstream wrap" in labels and "SGLang / llama.cpp" in labels


def test_the_page_opens_with_what_it_means_and_no_target_status(written: list[Path]) -> None:
    text = written[0].read_text(encoding="utf-8")
    first, rest = text.split(f"\n## {perfpage.TARGETS_TITLE}\n", 1)
    assert first.startswith("# Performance\n\nWhat applying stop sequences with stopstream costs")
    assert "2 cores of an Example CPU, CPython 3.11.7 on Linux" in first
    for figure in (
        "`wrap` takes 28 ns to 92 ns per streamed chunk with 1 to 10,000 stops",
        "(a bare generator passing the chunks on: 16 ns)",
        "At 1,000 chunks a second that is 0.009% of one core at most.",
        "`StopFilter.feed` takes 84 ns to 158 ns",
        "`openai.wrap_chat` 0.02x (150 ns per chunk against 9.0 µs)",
        "25.1x faster than vLLM's rules with 4 stops and 1,848x faster with 1,000",
        "(SGLang's / llama.cpp's: 39.5x and 2,254x)",
        "0.11 characters on average with 4 stops, where vLLM's fixed holdback keeps 9.00",
    ):
        assert figure in first, figure
    for mark in ("MISSED", "missed", "not met", "status"):
        assert mark not in first, mark
    # The targets section says what a target is before the table and its marks.
    explained = rest.index("stretch goals")
    assert explained < rest.index("| not met |") and explained < rest.index("**Reading:**")
    assert "MISSED" not in text


def test_a_summary_without_figures_is_one_line() -> None:
    lines = perfpage.summary_lines(perfpage.Summary("a machine"))
    assert len(lines) == 1 and "a machine" in lines[0]


def test_wide_tables_are_split_by_columns_to_fit_the_page() -> None:
    labels = ["stopstream wrap", "speedup: stopstream wrap vs vLLM v1 (fixed holdback)"]
    wide = perfpage.Table(
        ("contender \\ stops", *(str(n) for n in range(1, 8))),
        tuple((label, *(f"{n}.31 ms (82,155x) *" for n in range(1, 8))) for label in labels),
    )
    parts = perfpage.fit_table(wide)
    assert [len(p.header) for p in parts] == [5, 4]  # 7 columns: 4 and 3, each with the labels
    assert [p.header[0] for p in parts] == [wide.header[0]] * 2
    assert [row[0] for row in parts[1].rows] == labels
    assert [h for p in parts for h in p.header[1:]] == list(wide.header[1:])
    for part in parts:
        columns = list(zip(part.header, *part.rows, strict=True))
        first = perfpage.column_px(columns[0], perfpage.FIRST_COLUMN_CHARS)
        assert first + sum(perfpage.column_px(c) for c in columns[1:]) <= perfpage.CONTENT_PX
    markdown = perfpage.markdown_table(wide)
    assert markdown.count("| contender \\ stops") == 2
    # A table that fits, however long its cells (they wrap), stays whole.
    narrow = perfpage.Table(("what", "ratio"), (("a long label " * 20, "0.02x"),))
    assert perfpage.fit_table(narrow) == [narrow]
    five = perfpage.Table(
        ("adapter", "per item", "compared with", "per item", "ratio"),
        (
            (
                "anthropic.wrap_messages over SDK events",
                "1.2 µs",
                "the anthropic SDK's streaming",
                "17 µs",
                "0.07x",
            ),
        ),
    )
    assert perfpage.fit_table(five) == [five]


def test_the_same_figures_give_the_same_bytes(written: list[Path], tmp_path: Path) -> None:
    again = perfpage.write_page(synthetic_page(), tmp_path)
    for a, b in zip(written, again, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_busiest_window() -> None:
    assert perfpage.busiest_window([0] * 50 + [1, 0, 1] + [0] * 50, 20) == 40
    assert perfpage.busiest_window([1, 1], 20) == 0


def test_without_matplotlib_the_message_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(SystemExit, match=r"pip install 'stopstream\[bench\]'"):
        perfpage.require_matplotlib()
