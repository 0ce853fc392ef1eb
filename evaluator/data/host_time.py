"""The measured server's host time per step, from its sampled schedule calls: a what-if floor.

Why: on the overloaded runs the schedule call's host time (``step.duration_us`` in
``steps/predictions.csv``, which times only the CPU scheduling call, data README trap 2)
reaches the step period itself (Mixtral reasoning 33 ms, CodeLlama reasoning 26 ms, against
0.2-1.1 ms on the normal runs), and the engine's own step counter shows Mixtral's engine
stepping 12 % slower than the replica (docs/notes/2026-12-06-tails-and-overload.md). An
engine whose host loop is the slower part steps at the host's pace, which no function of
the batch on the GPU carries. ``evolve validate --host-floor measured`` floors every
simulated step at the run's median sampled host time (``Scenario.host_floor_us``) to show
what that explains. It is a what-if: the figure is measured on the run being predicted, so
the search never uses it.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from evaluator.data.run_files import DataError

SAMPLED_STEPS = Path("steps") / "predictions.csv"
_RUN, _ID, _HOST = "experiment_id", "step.id", "step.duration_us"


def sampled_steps(data_root: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per run (experiment id): its sampled step ids, sorted, and the host time (µs) of
    each step's schedule call, from ``DATA/steps/predictions.csv``; a run without sampled
    steps is absent. A missing file, column, a step id that is not an integer or a host
    time that is not a finite number >= 0 is a :class:`DataError` naming the file, the
    line and the field."""
    path = data_root / SAMPLED_STEPS
    per_run: dict[str, dict[int, float]] = {}
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            rows = csv.DictReader(fh)
            missing = [c for c in (_RUN, _ID, _HOST) if c not in (rows.fieldnames or [])]
            if missing:
                raise DataError(f"{path}: no column {missing[0]!r} (the sampled steps need "
                                f"{_RUN!r}, {_ID!r} and {_HOST!r})")
            for line, row in enumerate(rows, start=2):
                try:
                    host = float(row[_HOST])
                except (TypeError, ValueError):
                    host = math.nan
                if not (host >= 0 and math.isfinite(host)):
                    raise DataError(f"{path}: line {line}: {_HOST} must be a finite number "
                                    f">= 0 (got {row[_HOST]!r})")
                try:
                    step = int(row[_ID])
                except (TypeError, ValueError):
                    raise DataError(f"{path}: line {line}: {_ID} must be an integer (got "
                                    f"{row[_ID]!r})") from None
                per_run.setdefault(row[_RUN], {})[step] = host
    except FileNotFoundError:
        raise DataError(f"{path}: file not found (--host-floor measured reads the "
                        "server's sampled steps)") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: cannot read (not UTF-8 text: byte {exc.start})") from None
    except csv.Error as exc:
        raise DataError(f"{path}: not valid CSV ({exc})") from None
    out = {}
    for run, steps in per_run.items():
        ids = np.array(sorted(steps), dtype=np.int64)
        out[run] = (ids, np.array([steps[i] for i in ids]))
    return out


def sampled_host_us(data_root: Path) -> dict[str, float]:
    """Per run (experiment id): the median host time (µs) of its sampled schedule calls
    (:func:`sampled_steps`, whose errors it raises); a run without sampled steps is absent."""
    return {run: float(np.median(host)) for run, (_ids, host) in
            sampled_steps(data_root).items()}
