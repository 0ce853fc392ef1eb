"""Page 1, the run overview: what was run, what it cost, and how the search went.

Why these series: "how did loss fall over generations" is the frontier's lowest training
loss and the pick's training and validate loss per generation; "is the search still
finding things" is the frontier size and the grid's occupancy per generation; the MAP-Elites
heatmap shows where in (complexity, features) the elites live.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from evolve.archive.models import on_frontier
from evolve.report.data import RunData
from evolve.report.pick import champion


@dataclass
class GenerationRow:
    """One generation's summary."""

    generation: int
    best_loss: float  # lowest training loss on the frontier
    pick_id: str | None
    pick_loss: float
    pick_val_loss: float  # the pick's validate loss at that generation's constants
    frontier_size: int
    occupied: int  # grid cells holding an elite
    accepted: int  # evaluations accepted in this generation
    rejected: int


@dataclass
class GridHeat:
    """The last generation's MAP-Elites grid: rows = features used, cols = complexity bins."""

    generation: int
    row_labels: list[str]
    col_labels: list[str]
    cells: list[tuple[int, int, float, str, int]]  # row, col, loss, program id, complexity


@dataclass
class Overview:
    facts: list[tuple[str, str]]
    generations: list[GenerationRow]
    heat: GridHeat | None
    config_json: str
    eval_counts: dict[str, int] = field(default_factory=dict)  # "kind status" -> count
    pick_id: str | None = None
    champion_id: str | None = None


def _wall(created: str | None, finished: str | None) -> str:
    """Wall time between two ISO timestamps ('' when unknown)."""
    if not created or not finished:
        return "still running" if created and not finished else ""
    try:
        s = (datetime.fromisoformat(finished) - datetime.fromisoformat(created)).total_seconds()
    except ValueError:
        return ""
    return f"{int(s // 3600)} h {int(s % 3600 // 60)} min" if s >= 3600 else (
        f"{int(s // 60)} min {int(s % 60)} s")


def build_overview(data: RunData) -> Overview:
    cfg = data.config
    run_cfg, op = cfg.get("run", {}), cfg.get("operator", {})
    fit = cfg.get("fit", {})
    counts = Counter(f"{e.kind} {e.status}" for e in data.evals)
    children = sum(v for k, v in counts.items() if k.startswith("child "))
    r = data.run
    facts: list[tuple[str, str]] = [
        ("archive", str(data.archive_path)), ("run", str(r.id)), ("seed", str(r.seed)),
        ("status", r.status),
        ("generations", f"{max(r.generations_done, 0)} of {run_cfg.get('generations', '?')}"),
        ("data", str(run_cfg.get("data") or "default ($EVOLVE_DATA or ../shared/data)")),
        ("operator", str(op.get("kind", "?")) + (f" ({cfg.get('llm', {}).get('model')})"
                                                 if op.get("kind") == "llm" else "")),
        ("fitness / scope", f"{fit.get('fitness', '?')} / {fit.get('scope', '?')}"),
        ("programs seen", str(len(data.programs))),
        ("children fitted", f"{counts.get('child accepted', 0)} accepted of {children}"),
        ("evaluations", str(len(data.evals))),
        ("started (UTC)", r.created_at or ""),
        # not compute time: a run resumed later counts the pause between
        ("started to finished", _wall(r.created_at, r.finished_at)),
        ("code version", r.code_version or ""),
    ]
    if op.get("kind") == "llm" or data.llm_calls:
        facts.append(("LLM calls", str(len(data.llm_calls))))
        facts.append(("LLM tokens", f"{data.tokens:,}"))
        facts.append(("LLM cost", f"${data.cost_usd:.4f}"))
    edited = sum(p.edited for p in data.programs.values())
    if edited:
        facts.append(("edited sources", f"{edited} programs' stored source does not hash to "
                      "their id: the archive was changed after the run (marked on their pages)"))
    splits = Counter((r.splits or {}).values())
    facts.append(("measured runs", ", ".join(f"{n} {s}" for s, n in sorted(splits.items()))))
    return Overview(facts, generation_rows(data), grid_heat(data),
                    json.dumps(cfg, indent=2, sort_keys=True), dict(sorted(counts.items())),
                    data.pick_id(), champion(data))


def generation_rows(data: RunData) -> list[GenerationRow]:
    """One row per generation that has a frontier."""
    per_gen = Counter((e.generation, e.status) for e in data.evals)
    out = []
    for g in sorted(data.frontiers):
        front = data.frontiers[g]
        pick = next((f for f in front if f.picked), None)
        prog = data.programs.get(pick.program_id) if pick else None
        out.append(GenerationRow(
            g, min((f.loss for f in front), default=math.nan),
            pick.program_id if pick else None, pick.loss if pick else math.nan,
            data.pick_val_loss.get(g, prog.val_loss if prog else math.nan),
            sum(on_frontier(front)),
            len(data.grids.get(g, [])),
            per_gen[(g, "accepted")], per_gen[(g, "rejected")]))
    return out


MAX_CELLS = 1000  # grid columns or rows drawn at most (a real grid has tens)


def grid_heat(data: RunData) -> GridHeat | None:
    """The last grid as heatmap cells; complexity bins labelled by the run's edges."""
    if not data.grids:
        return None
    g = max(data.grids)
    edges: list[Any] = list(data.config.get("search", {}).get("complexity_edges") or [])
    cells = []
    max_col = max_row = 0
    for c in data.grids[g]:
        try:
            col, row = (int(x) for x in str(c.cell).strip("[]()").split(","))
        except ValueError:
            continue
        if not (0 <= col < MAX_CELLS and 0 <= row < MAX_CELLS):  # an edited archive: a
            continue  # cell "10**9,0" would draw a billion columns
        cells.append((row, col, c.loss, c.program_id, c.complexity))
        max_col, max_row = max(max_col, col), max(max_row, row)
    n_cols = max(len(edges) - 1, max_col + 1)
    col_labels = [f"{edges[j]}-{edges[j + 1] - 1}" if j + 1 < len(edges) else str(j)
                  for j in range(n_cols)]
    row_labels = [str(i) for i in range(max_row + 1)]
    return GridHeat(g, row_labels, col_labels, cells)
