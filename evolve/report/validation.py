"""Page 6, validation: predicted vs measured for the pick and the champion, and the plots
``evolve validate`` wrote.

Two sources, and why both:

* **Stored metrics** (always there): every accepted evaluation keeps predicted and measured
  aggregates per run or stage slice (closed loop for training and validate runs). Predicted
  vs measured mean E2E and mean TTFT per run comes straight from them, no simulation. Test
  runs are shown closed loop on the whole run, as the run's end simulated them for its
  final hall of fame (:mod:`evolve.search.final_scores`); the teacher-forced test metrics
  the search stored are not shown (on a queueing run they hold the corpora's queue, not
  the program's), so a run without end-of-run figures shows no test points.
* **Whole-run validation of the pick** (``evolve report --validate``): the command runs
  ``evolve validate``'s simulation of the pick (``evolve.workflows.pick_validation``) and
  hands the page its table and lines (:class:`WholeRuns`) and its plots, so the reader
  does not have to run another command and regenerate.
* **``evolve validate`` PNGs** (``--validate-dir DIR``, default off): per-request E2E CDFs
  need the simulated requests, which the archive does not keep; ``evolve validate ID --out
  DIR`` simulates all 16 runs whole and writes ``pred_vs_measured.png``,
  ``e2e_cdfs.png`` and ``knees.png``, and ``plots.json`` naming the program. The report
  embeds every PNG of DIR (base64, so the page stays one file) and says whose they are:
  plots of another program than the pick beside the pick's table would mislead.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evolve.archive.final_scores import MODE as FINAL_MODE
from evolve.report.data import RunData
from evolve.report.pick import champion
from evolve.text.canonical import canonical_json
from evolve.text.words import MODE_WORDS

KEYS = (("e2e_mean", "mean E2E (s)"), ("ttft_mean", "mean TTFT (s)"))
PLOTS_OF = "plots.json"  # written by `evolve validate` beside its PNGs: {"program": id, ...}


@dataclass
class PredMeas:
    """One run (or slice) of one program: measured and predicted value of one metric."""

    program_id: str
    role: str
    run: str
    split: str
    mode: str
    key: str
    measured: float
    predicted: float


@dataclass
class WholeRuns:
    """``evolve validate``'s table and lines for one program, rendered as text already
    (the report shows them as they are)."""

    program_id: str
    scope: str
    loop: str
    headers: list[str]
    rows: list[list[str]]
    lines: list[str]


@dataclass
class Image:
    name: str
    data_uri: str


@dataclass
class ValidationPage:
    targets: list[tuple[str, str]]  # (role, program id)
    points: list[PredMeas]
    images: list[Image]
    validate_dir: str | None
    plots_note: str = ""  # whose plots they are, said when not the pick's or champion's
    test_note: str = ""  # why no test points are shown, when none are
    whole: WholeRuns | None = None  # `evolve report --validate`: the pick, every whole run

    @property
    def how(self) -> str:
        """How the stored metrics were scored, per split, as the metrics say (the page used
        to state one fixed rule, untrue for a run cut with ``--head-seconds``)."""
        modes: dict[str, set[str]] = {}
        for pt in self.points:
            modes.setdefault(pt.split, set()).add(_HOW.get(pt.mode, pt.mode or "unrecorded"))
        order = sorted(modes, key=lambda s: (_SPLITS.index(s) if s in _SPLITS else 9, s))
        return "; ".join(f"{s}: {', '.join(sorted(modes[s]))}" for s in order)


_SPLITS = ("train", "validate", "test")
_HOW = {**MODE_WORDS, FINAL_MODE: "closed loop on the whole run, at the end of the run"}


def pred_vs_measured(data: RunData, pid: str, role: str) -> list[PredMeas]:
    """The stored per-run figures of ``pid`` but its test runs, which come from the run's
    end-of-run closed-loop simulations (none if it has none)."""
    p = data.programs.get(pid)
    stored = {n: m for n, m in ((p.metrics if p else None) or {}).items()
              if m.get("split") != "test"}
    out: list[PredMeas] = []
    for name, m in sorted({**stored, **((p.test_closed_loop if p else None) or {})}.items()):
        pred, meas = m.get("pred") or {}, m.get("meas") or {}
        for key, _label in KEYS:
            if key in pred and key in meas and m.get("valid", True):
                out.append(PredMeas(pid, role, name, str(m.get("split", "")),
                                    str(m.get("mode", "")), key, float(meas[key]),
                                    float(pred[key])))
    return out


def load_images(directory: str | Path | None) -> list[Image]:
    """Every PNG in ``directory`` as a data URI (sorted by name); [] if none."""
    if not directory:
        return []
    d = Path(directory)
    if not d.is_dir():
        return []
    return [Image(f.name, "data:image/png;base64," + base64.b64encode(f.read_bytes()).decode())
            for f in sorted(d.glob("*.png"))]


def build_validation(data: RunData, validate_dir: str | Path | None = None,
                     whole: WholeRuns | None = None) -> ValidationPage:
    pick, champ = data.pick_id(), champion(data)
    targets = [(r, pid) for r, pid in (("pick", pick), ("champion", champ)) if pid]
    if len(targets) == 2 and targets[0][1] == targets[1][1]:
        targets = [("pick and champion", targets[0][1])]
    points = [pt for role, pid in targets for pt in pred_vs_measured(data, pid, role)]
    images = load_images(validate_dir)
    consts = {pid: (data.programs[pid].constants if pid in data.programs else None)
              for _r, pid in targets}
    note = plots_note(validate_dir, consts) if images else ""
    untested = [pid for _r, pid in targets if pid in data.programs
                and data.programs[pid].test_closed_loop is None
                and any(m.get("split") == "test"
                        for m in (data.programs[pid].metrics or {}).values())]
    test_note = ("No test points: this run has no closed-loop test figures for "
                 f"{', '.join(p[:12] for p in untested)} (a run computes them when it ends); "
                 "the teacher-forced ones the search stored are not shown.") if untested else ""
    return ValidationPage(targets, points, images,
                          str(validate_dir) if validate_dir else None, note, test_note, whole)


def constants_digest(groups: Any) -> str:
    """A short hash of fitted constants ({group: {name: value}}): the same program at other
    constants (another run's fit, ``--constants``, the declared ones) is another model."""
    return hashlib.sha256(canonical_json(groups or {}).encode()).hexdigest()[:16]


def plots_note(directory: str | Path | None, targets: dict[str, Any]) -> str:
    """'' when ``plots.json`` names the pick or the champion (``targets``: id -> its
    constants) at its constants; otherwise what is known."""
    path = Path(directory or ".") / PLOTS_OF
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        pid = str(doc["program"])
    except (OSError, ValueError, TypeError, KeyError, RecursionError):
        return (f"Which program these plots show is not recorded (no readable {PLOTS_OF}; "
                "`evolve validate --out` writes it).")
    if pid not in targets:
        return (f"These plots are of program {pid[:12]}, which is neither the pick nor the "
                "champion of this run.")
    if doc.get("constants") != constants_digest(targets[pid]):
        return (f"These plots are of program {pid[:12]} at other constants than this run's "
                "(another run's fit, constants given to `evolve validate`, or another `--scope`).")
    return ""
