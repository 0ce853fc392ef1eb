"""The rendering helpers: highlighting keeps the source text, diffs classify lines, chart
scales and markers are sane (no HTML matching beyond these invariants)."""

from __future__ import annotations

import html
import re

from evolve.report.highlight import diff_lines, highlight_python
from evolve.report.svg import Chart, Point, Scale

SOURCE = '''"""Doc."""
CONSTANTS = {"a": (1.0, 0.0, 2.0)}  # bounds


def step_time(f, c):
    return c.a * maximum(f.kv_write, 2.5e-3 * f.batch_size)
'''


def _text(markup: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", markup))


def test_highlighting_keeps_the_text_exactly():
    for src in (SOURCE, SOURCE + "x = (\n", "not python at all ''' \n", "", "a<b & c>d\n"):
        assert _text(highlight_python(src)) == src
    out = highlight_python(SOURCE)
    assert '<span class="k">def</span>' in out and '<span class="nf">step_time</span>' in out
    assert '<span class="m">2.5e-3</span>' in out and '<span class="c"># bounds</span>' in out


def test_diff_lines():
    new = SOURCE.replace("2.5e-3", "3e-3")
    kinds = [d.kind for d in diff_lines(SOURCE, new)]
    assert kinds.count("add") == kinds.count("del") == 1 and kinds[0] == "hunk"
    assert diff_lines(SOURCE, SOURCE) == []


def test_scales_and_ticks():
    s = Scale.fit([0.05, 0.2], 0, 100, log=True)
    ticks = s.ticks()
    assert len(ticks) >= 3 and all(s.lo <= t <= s.hi for t in ticks)
    assert abs(s(s.lo) - 0) < 1e-9 and abs(s(s.hi) - 100) < 1e-9
    lin = Scale.fit([0, 10], 0, 100)
    assert lin.ticks()[0] <= 0.5 and lin.ticks()[-1] >= 9.5
    assert Scale.fit([], 0, 1).ticks()  # no data: still an axis


def test_chart_draws_one_marker_per_finite_point():
    c = Chart(ylog=True)
    c.points = [Point(1, 0.1, "pt front", "p/a.html", "a", "a"), Point(2, float("nan")),
                Point(3, -1.0), Point(4, 2.0, "pt", None, "<b>", "b")]
    svg = c.render()
    assert svg.count("<circle") == 2 and svg.count("<a href") == 1
    assert "&lt;b&gt;" in svg and 'data-id="a"' in svg
