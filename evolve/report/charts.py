"""Page data -> inline SVG: the one place that decides what each chart shows and how.

Kept apart from the builders so those stay plain data (unit-tested without markup) and
from the templates so the templates stay layout only. Every marker that stands for a
program links to its page (``p/<id>.html``) and carries ``data-id``; frontier members carry
the class ``front`` (the browser test counts them), the pick ``pick``, the champion
``champ``.
"""

from __future__ import annotations

import math
import re
from html import escape

from evolve.report.frontier import FrontierPage, ScatterPoint
from evolve.report.lineage import BEND, GAP_Y, NODE_H, NODE_W, Lineage
from evolve.report.overview import Overview
from evolve.report.svg import Chart, HeatCell, Point, Series, heatmap
from evolve.report.validation import KEYS, ValidationPage


def page_name(pid: str) -> str:
    """File name of a program's page (16 hex digits: unique in any real archive). Ids are
    checked on reading the archive (``evolve.archive.ids``); anything else here is refused
    again, so no id can name a file outside ``p/``."""
    name = str(pid)[:16]
    if not re.fullmatch(r"[0-9a-f]{16}", name):
        raise ValueError(f"not a program id: {name!r}")
    return f"p/{name}.html"


def _num(x: float | None, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return "inf" if math.isinf(x) else f"{x:.{digits}g}"


def overview_charts(ov: Overview, root: str = "") -> dict[str, str]:
    gens = [float(r.generation) for r in ov.generations]
    loss = Chart(xlabel="generation", ylabel="training loss (log)", ylog=True, css_id="c-loss")
    loss.series = [
        Series("frontier best (train)", gens, [r.best_loss for r in ov.generations], "s0"),
        Series("pick (train)", gens, [r.pick_loss for r in ov.generations], "s1", step=True),
        Series("pick (validate)", gens, [r.pick_val_loss for r in ov.generations], "s2",
               step=True)]
    sizes = Chart(xlabel="generation", ylabel="programs", css_id="c-sizes")
    sizes.series = [
        Series("frontier size", gens, [float(r.frontier_size) for r in ov.generations], "s0",
               step=True),
        Series("grid cells occupied", gens, [float(r.occupied) for r in ov.generations],
               "s1", step=True)]
    out = {"loss": loss.render(), "sizes": sizes.render(), "heat": ""}
    if ov.heat is not None:
        cells = [HeatCell(row, col, lo, f"{pid[:12]}: loss {_num(lo)}, complexity {cx}, "
                          f"{row} features", root + page_name(pid))
                 for row, col, lo, pid, cx in ov.heat.cells]
        out["heat"] = heatmap(cells, ov.heat.row_labels, ov.heat.col_labels,
                              "complexity bin", "features used")
    return out


def _cls(p: ScatterPoint) -> str:
    return "pt" + (" front" if p.on_frontier else "") + (" pick" if p.pick else "") + (
        " champ" if p.champion else "") + (" llm" if p.operator.startswith("llm") else "")


def _title(p: ScatterPoint) -> str:
    roles = ", ".join(r for r, on in (("pick", p.pick), ("champion", p.champion),
                                      ("frontier", p.on_frontier)) if on)
    return (f"{p.program_id[:12]}{' (' + roles + ')' if roles else ''}: complexity "
            f"{p.complexity}, train {_num(p.train_loss)}, validate {_num(p.val_loss)}, "
            f"gen {p.generation}, {p.operator}")


def frontier_charts(fp: FrontierPage, root: str = "") -> dict[str, str]:
    """Training and validate loss vs complexity for every evaluated program."""
    out = {}
    for key, label, attr in (("train", "training loss (log)", "train_loss"),
                             ("val", "validate loss (log)", "val_loss")):
        chart = Chart(width=520, height=380, xlabel="complexity", ylabel=label, ylog=True,
                      css_id=f"scatter-{key}")
        for p in fp.points:
            y = getattr(p, attr)
            if not (math.isfinite(y) and y > 0):
                continue
            chart.points.append(Point(float(p.complexity), y, _cls(p), root + page_name(
                p.program_id), _title(p), p.program_id, 5.0 if p.on_frontier else 3.0))
        # the frontier as a staircase on the training chart
        if key == "train":
            fr = sorted(fp.frontier_points, key=lambda p: p.complexity)
            chart.series = [Series("frontier", [float(p.complexity) for p in fr],
                                   [p.train_loss for p in fr], "s1 frontier-line", step=True)]
        out[key] = chart.render()
    return out


def lineage_svg(lin: Lineage, root: str = "") -> str:
    """The ancestry DAG: boxes per program, edges labelled with the operator."""
    parts = [f'<svg class="chart lineage" viewBox="0 0 {lin.width} {lin.height}" '
             f'width="{lin.width}" height="{lin.height}">']
    for e in lin.edges:
        a, b = lin.nodes[e.parent], lin.nodes[e.child]
        x1, y1 = a.x + NODE_W / 2, a.y + NODE_H
        x2, y2 = b.x + NODE_W / 2, b.y
        cls = "edge jump" if e.jump else "edge"
        label = e.operator.split(":", 1)[-1]
        ratio = "" if math.isnan(e.ratio) else f" x{e.ratio:.2g}"
        my = (y1 + y2) / 2
        if y2 - y1 > NODE_H + GAP_Y + 1:  # skips a layer: bend left, around the nodes
            bx = min(a.x, b.x) - BEND
            d = (f"M{x1:.0f},{y1:.0f} C{x1:.0f},{y1 + 30:.0f} {bx:.0f},{y1 + 30:.0f} "
                 f"{bx:.0f},{my:.0f} S{x2:.0f},{y2 - 30:.0f} {x2:.0f},{y2:.0f}")
            lx, anchor = bx, "middle"
        else:
            d = f"M{x1:.0f},{y1:.0f} C{x1:.0f},{my:.0f} {x2:.0f},{my:.0f} {x2:.0f},{y2:.0f}"
            lx, anchor = (x1 + x2) / 2 + 3, "start"
        parts.append(f'<path class="{cls}" d="{d}"><title>{escape(e.operator)}: '
                     f"{escape(e.parent[:12])} -&gt; {escape(e.child[:12])}{ratio}</title></path>"
                     f'<text class="elabel{" jump" if e.jump else ""}" x="{lx:.0f}" '
                     f'y="{my + 3:.0f}" text-anchor="{anchor}">{escape(label)}{ratio}</text>')
    for n in lin.nodes.values():  # every value escaped where it lands, ids too
        cls = escape("node " + " ".join(n.roles))
        parts.append(f'<a href="{escape(root + page_name(n.program_id))}"><g class="{cls}" '
                     f'data-id="{escape(n.program_id)}"><rect x="{n.x:.0f}" y="{n.y:.0f}" '
                     f'width="{NODE_W}" height="{NODE_H}" rx="5"/><text x="{n.x + 6:.0f}" '
                     f'y="{n.y + 16:.0f}">{escape(n.program_id[:12])} '
                     f'g{escape(str(n.generation))}</text>'
                     f'<text class="sub" x="{n.x + 6:.0f}" y="{n.y + 32:.0f}">loss '
                     f"{_num(n.train_loss, 3)} cx {escape(str(n.complexity))}</text></g></a>")
    parts.append("</svg>")
    return "".join(parts)


def validation_charts(vp: ValidationPage) -> list[tuple[str, str, dict[str, str]]]:
    """Per target (pick, champion): predicted vs measured mean E2E and mean TTFT."""
    out = []
    for role, pid in vp.targets:
        charts = {}
        for key, label in KEYS:
            chart = Chart(width=440, height=360, xlabel=f"measured {label}",
                          ylabel=f"predicted {label}", xlog=True, ylog=True, diagonal=True,
                          css_id=f"pm-{pid[:12]}-{key}")
            for pt in vp.points:
                if pt.program_id == pid and pt.key == key and pt.measured > 0 \
                        and pt.predicted > 0:
                    chart.points.append(Point(pt.measured, pt.predicted, f"pt {pt.split}",
                                              None, f"{pt.run} ({pt.split}, {pt.mode}): "
                                              f"measured {pt.measured:.3g} s, predicted "
                                              f"{pt.predicted:.3g} s", pt.program_id, 4.0))
            charts[key] = chart.render()
        out.append((role, pid, charts))
    return out
