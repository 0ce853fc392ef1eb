"""Closed-loop validation of one program against every measured run: table and plots.

Why closed loop: a program's official score. Teacher forcing holds the batches fixed;
here the simulator lets batches, queues and client timeouts react to the program, exactly
as BLIS would run it. Plots use matplotlib's Agg backend (files only, no display).

For runs that queue (measured mean TTFT over 5 s) it also reports the decode interval by
admission time (:func:`decode_drift`). Why: on the overloaded Mixtral ``reasoning`` run
the measured interval grows from 31 to 40 ms as the wait before admission grows, with the
batch full throughout, and a model of the batch alone holds it flat
(``evaluator/sim/simulator.py``); one mean per run hides that, a row per admission window
shows it, for the bundled runs and for a user's own.

Percentiles are reported twice: over every request (what inference-perf reports) and
"steady", over requests arriving after the measured server's cold start
(``evaluator.api.STEADY_WARMUP_S``, 30 s), both sides alike: the simulator starts warm, and
the measured runs' first seconds hold most of their top 1 % of TTFT (issue 58,
docs/notes/2026-12-06-tails-and-overload.md). The steady ones are what the search's loss
weighs; the TTFT CDF plot shows both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from evaluator.api import (
    SENSITIVITY_DELTA,
    STAT_INDEX,
    STEADY_WARMUP_S,
    ConstMap,
    Evaluator,
    RunMetrics,
    StepModel,
    e2e_response,
    request_latencies,
    steady_mask,
)
from evolve.assess.physics import context_price, probes_for
from evolve.text.words import run_label

TABLE_KEYS = (("e2e_mean", "E2E"), ("e2e_p90", "E2E p90"), ("e2e_p99", "E2E p99"),
              ("e2e_p99_steady", "E2E p99 steady"),
              ("ttft_mean", "TTFT"), ("ttft_p90", "TTFT p90"), ("ttft_p99", "TTFT p99"),
              ("ttft_p90_steady", "TTFT p90 steady"), ("ttft_p99_steady", "TTFT p99 steady"),
              ("itl_mean", "decode interval"))
# the percentile errors counted against issue 58's targets (10 % on the normal runs)
PERCENTILE_KEYS = (("ttft_p90_steady", "p90 TTFT steady"), ("ttft_p90", "p90 TTFT all"),
                   ("ttft_p99_steady", "p99 TTFT steady"), ("ttft_p99", "p99 TTFT all"),
                   ("e2e_p99_steady", "p99 E2E steady"), ("e2e_p99", "p99 E2E all"))
PERCENTILE_LIMIT = 0.10


DRIFT_WINDOW_S = 100.0  # admission-time window of decode_drift
DRIFT_MIN_REQUESTS = 20  # fewer completed requests in a window: no mean reported


@dataclass
class Validation:
    metrics: dict[str, RunMetrics]
    latencies: dict[str, tuple[np.ndarray, np.ndarray]]  # run -> (sim E2E s, measured E2E s)
    drift: dict[str, list[dict[str, float | None]]] = field(default_factory=dict)
    context_price: dict[str, float | None] = field(default_factory=dict)  # x the kernel
    # run -> relative change of mean E2E with every step time at 1 -/+ SENSITIVITY_DELTA
    sensitivity: dict[str, dict[str, float]] = field(default_factory=dict)
    # run -> its batches over its model's validated training runs' (None: none validated)
    envelope: dict[str, dict[str, float] | None] = field(default_factory=dict)
    # run -> per-request TTFT (s) of the completed requests: (simulated, measured,
    # simulated steady mask, measured steady mask)
    ttft: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = field(
        default_factory=dict)


ENVELOPE_Q = 99.0  # percentile of a run's steps that stands for its batches
BEYOND = 1.25  # a run this many times past its model's training runs: extrapolation


def envelope(ev: Evaluator, corpora: Mapping[str, Any]) -> dict[str, dict[str, float] | None]:
    """How far each run's simulated batches reach past its model's training runs.

    Why: a prediction inside the measured envelope is an interpolation; one past it (the
    reasoning runs' contexts, a user's larger load) rests on the program's form alone, and a
    capacity planner should know which it is getting. Per run, the 99th percentile over its
    steps of the batch size (requests) and of the longest context (``kv_max``), divided by
    the largest of the same over its model's training runs."""
    rows = {"batch": (STAT_INDEX["n_prefill"], STAT_INDEX["n_decode"]),
            "context": (STAT_INDEX["kv_max"],)}
    reach = {n: {k: float(np.percentile(c.stats[list(r)].sum(axis=0), ENVELOPE_Q))
                 if c.stats.shape[1] else 0.0 for k, r in rows.items()}
             for n, c in corpora.items()}
    limit: dict[str, dict[str, float]] = {}  # model -> the most its training runs reach
    for n, r in reach.items():
        if ev.by_name[n].split == "train":
            top = limit.setdefault(ev.by_name[n].model, dict.fromkeys(rows, 1.0))
            for k in rows:
                top[k] = max(top[k], r[k])
    return {n: {k: r[k] / lim[k] for k in rows}
            if (lim := limit.get(ev.by_name[n].model)) else None for n, r in reach.items()}


def decode_drift(measured: tuple[np.ndarray, ...], simulated: tuple[np.ndarray, ...],
                 window_s: float = DRIFT_WINDOW_S) -> list[dict[str, float | None]]:
    """Mean decode interval (ms) of the completed requests per window of admission time
    (arrival + TTFT, s), measured and simulated. Each side is ``(arrival_s, ttft_s, e2e_s,
    output_tokens)`` of its completed requests; a window with fewer than
    ``DRIFT_MIN_REQUESTS`` requests on one side reports None for that side."""
    sides = []  # per side: window index and decode interval (ms) of each request
    for arrival, ttft, e2e, out in (measured, simulated):
        admit = np.asarray(arrival, float) + np.asarray(ttft, float)
        itl = (np.asarray(e2e, float) - ttft) / np.maximum(np.asarray(out, float) - 1, 1)
        sides.append((np.floor(admit / window_s).astype(np.int64), itl * 1e3))
    n_win = max((int(w.max()) + 1 for w, _ in sides if w.size), default=1)
    rows: list[dict[str, float | None]] = [
        {"from_s": k * window_s, "to_s": (k + 1) * window_s} for k in range(n_win)]
    for key, (win, itl) in zip(("measured", "simulated"), sides, strict=True):
        count = np.bincount(win, minlength=n_win)
        total = np.bincount(win, weights=itl, minlength=n_win)
        for k, row in enumerate(rows):
            row[f"{key}_n"] = float(count[k])
            row[f"{key}_ms"] = (float(total[k] / count[k]) if count[k] >= DRIFT_MIN_REQUESTS
                                else None)
    return rows


def validate(ev: Evaluator, model: StepModel, consts: ConstMap,
             names: list[str] | None = None, progress=None) -> Validation:
    from evolve.search.context import QUEUE_DOMINATED_TTFT_S

    sims = ev.simulate(model, consts, names=names, progress=progress)
    lat, drift, ttfts = {}, {}, {}
    for name, res in sims.items():
        sc = ev.by_name[name]
        c = res.corpus
        ok, ttft, e2e = request_latencies(c, c.end_us,
                                          np.asarray(consts[name], dtype=np.float64), model,
                                          blis=sc.loop == "blis")
        m = sc.measured
        done = ~m.failed & np.isfinite(m.e2e_s)
        lat[name] = (e2e, m.e2e_s[done])
        steady = steady_mask(sc)
        with_ttft = done & np.isfinite(m.ttft_s)
        ttfts[name] = (ttft, m.ttft_s[with_ttft], steady[ok], steady[with_ttft])
        if m.summary.get("ttft_mean", 0.0) >= QUEUE_DOMINATED_TTFT_S:
            done &= np.isfinite(m.ttft_s)
            drift[name] = decode_drift(
                (sc.arrival_us[done] * 1e-6, m.ttft_s[done], m.e2e_s[done],
                 sc.output_tokens[done]),
                (c.arrival_us[ok] * 1e-6, ttft, e2e, c.output_tokens[ok]))
    first: dict[str, str] = {}  # model -> its first run by name, as probes_for takes it
    for name in sorted(sims):
        first.setdefault(ev.by_name[name].model, name)
    price: dict[str, float | None] = {}
    for short, probe in probes_for(ev, list(sims)).items():
        v = context_price(model, np.asarray(consts[first[short]], np.float64), probe)
        price[short] = v if np.isfinite(v) else None  # None: no long-context pairs
    moved = e2e_response(ev.simulate, model, consts, sims)
    return Validation({n: r.metrics for n, r in sims.items()}, lat, drift, price, moved,
                      envelope(ev, {n: r.corpus for n, r in sims.items()}), ttfts)


KNEE = 2.0  # at a knee: mean E2E moves more than this many times the step-time change


def sensitivity_lines(val: Validation) -> list[str]:
    """One line: the runs at their knee, where a small step-time error is a large miss."""
    if not val.sensitivity:
        return []
    knee = [(n, v) for n, v in val.sensitivity.items()
            if max(abs(v["minus"]), abs(v["plus"])) > KNEE * SENSITIVITY_DELTA]
    cells = ", ".join(f"{run_label(n)} {100 * v['minus']:+.1f}/"
                      f"{100 * v['plus']:+.1f} %" for n, v in knee) or "none"
    return [f"runs at a knee (mean E2E moves over {KNEE:g}x as much as every step time, "
            f"{SENSITIVITY_DELTA:.0%} shorter/longer): {cells}"]


def envelope_lines(val: Validation) -> list[str]:
    """One line: the runs whose batches reach past their model's training runs."""
    if not val.envelope:
        return []
    cells = []
    for n, v in val.envelope.items():
        short = run_label(n)
        if v is None:
            cells.append(f"{short} (no training run of its model validated)")
        elif max(v.values()) > BEYOND:
            cells.append(f"{short} (batch x{v['batch']:.1f}, context x{v['context']:.1f})")
    return [f"beyond the training runs (99th-percentile batch or longest context over "
            f"{BEYOND:g}x its model's training runs': an extrapolation): "
            f"{', '.join(cells) or 'none'}"]


def context_lines(val: Validation) -> list[str]:
    """One line: how steeply the program prices long contexts, per model."""
    if not val.context_price:
        return []
    cells = ", ".join(f"{m} {'n/a' if v is None else f'{v:.2f}x'}"
                      for m, v in sorted(val.context_price.items()))
    return [f"long-context price (step time added along longer decode contexts over what "
            f"the measured decode-attention kernel adds; BLIS's published model: 1.7-1.9x): "
            f"{cells}"]


def drift_lines(val: Validation) -> list[str]:
    """One line per queueing run: measured / simulated decode interval per window."""
    out = []
    for name, rows in val.drift.items():
        cells = [f"{r['from_s']:.0f}-{r['to_s']:.0f}s {_ms(r['measured_ms'])}/"
                 f"{_ms(r['simulated_ms'])}" for r in rows
                 if r["measured_ms"] is not None or r["simulated_ms"] is not None]
        short = run_label(name)
        out.append(f"decode interval by admission time, {short} (ms, measured/simulated): "
                   + ", ".join(cells))
    return out


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def table_rows(metrics: Mapping[str, RunMetrics]) -> list[list[str]]:
    rows = []
    for name, m in metrics.items():
        row = [run_label(name), m.split]
        for key, _label in TABLE_KEYS:
            p, me, a = m.pred.get(key), m.meas.get(key), m.ape.get(key)
            row.append("-" if me is None else f"{me:.3f}")
            row.append("-" if p is None else f"{p:.3f}")
            row.append("-" if a is None else f"{100 * a:.1f}%")
        row.append(f"{m.pred.get('failures', 0):.0f}/{m.meas.get('failures', 0):.0f}")
        row.append(m.reason)
        rows.append(row)
    return rows


def table_headers() -> list[str]:
    heads = ["run", "split"]
    for _key, label in TABLE_KEYS:
        heads += [f"{label} meas", "pred", "APE"]
    return [*heads, "failed sim/meas", "note"]


def percentile_counts(metrics: Mapping[str, RunMetrics],
                      limit: float = PERCENTILE_LIMIT) -> dict[str, list[int]]:
    """Per percentile key of :data:`PERCENTILE_KEYS`, [normal runs within ``limit``, normal
    runs] (the non-reasoning runs; a run lacking the key misses)."""
    normal = [m for m in metrics.values() if m.workload != "reasoning"]
    return {k: [sum(1 for m in normal if m.ape.get(k, np.inf) <= limit), len(normal)]
            for k, _label in PERCENTILE_KEYS}


def summary_lines(metrics: Mapping[str, RunMetrics]) -> list[str]:
    """Counts against the issue's targets, per split."""
    lines = []
    for split in ("train", "validate", "test"):
        runs = [m for m in metrics.values() if m.split == split]
        if not runs:
            continue
        e2e = [m.ape.get("e2e_mean", np.inf) for m in runs]
        ttft = [m.ape.get("ttft_mean", np.inf) for m in runs]
        lines.append(f"{split}: {len(runs)} runs, mean E2E APE median {100 * np.median(e2e):.1f}%"
                     f" max {100 * np.max(e2e):.1f}%, mean TTFT APE median "
                     f"{100 * np.median(ttft):.1f}% max {100 * np.max(ttft):.1f}%")
    normal = [m for m in metrics.values() if m.workload != "reasoning"]
    if normal:
        for lim in (0.03, 0.05, 0.10):
            k = sum(1 for m in normal if m.ape.get("e2e_mean", np.inf) < lim)
            lines.append(f"non-reasoning runs within {100 * lim:.0f}% mean E2E: {k} of "
                         f"{len(normal)}")
        counts = percentile_counts(metrics)
        cells = ", ".join(f"{label} {counts[k][0]}" for k, label in PERCENTILE_KEYS)
        lines.append(f"non-reasoning runs within {100 * PERCENTILE_LIMIT:.0f}% (steady: "
                     f"arrivals after the first {STEADY_WARMUP_S:g} s, both sides; all: every "
                     f"request) of {len(normal)}: {cells}")
    return lines


def plot(val: Validation, out_dir: Path, title: str) -> list[Path]:
    """Predicted vs measured per run, per-request E2E CDFs per run, and each run's E2E
    response to the step time (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    for ax, key, label in ((axes[0], "e2e_mean", "mean E2E (s)"),
                           (axes[1], "ttft_mean", "mean TTFT (s)")):
        for m in val.metrics.values():
            if key in m.pred and key in m.meas:
                marker = {"train": "o", "validate": "s", "test": "^"}.get(m.split, "x")
                color = {"train": "C0", "validate": "C1", "test": "C3"}.get(m.split, "C7")
                ax.scatter(m.meas[key], m.pred[key], marker=marker, color=color,
                           label=m.split)
        lo = min([v for m in val.metrics.values() for v in (m.meas.get(key), m.pred.get(key))
                  if v] or [1e-3])
        hi = max([v for m in val.metrics.values() for v in (m.meas.get(key), m.pred.get(key))
                  if v] or [1.0])
        ax.plot([lo, hi], [lo, hi], "k--", lw=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(f"measured {label}")
        ax.set_ylabel(f"simulated {label}")
        handles, labels = ax.get_legend_handles_labels()
        uniq = dict(zip(labels, handles, strict=False))
        ax.legend(uniq.values(), uniq.keys())
    paths.append(_save(plt, fig, f"{title}: closed loop vs measured, per run",
                       out_dir / "pred_vs_measured.png", 110))

    n = len(val.latencies)
    cols = 4
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3 * rows), squeeze=False)
    for ax, (name, (sim, meas)) in zip(axes.flat, val.latencies.items(), strict=False):
        for vals, label in ((meas, "measured"), (sim, "simulated")):
            if vals.size:
                v = np.sort(vals)
                ax.plot(v, np.arange(1, v.size + 1) / v.size, label=label)
        ax.set_title(run_label(name), fontsize=8)
        ax.set_xlabel("E2E (s)", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    paths.append(_save(plt, fig, f"{title}: per-request E2E CDF, measured vs simulated",
                       out_dir / "e2e_cdfs.png", 90))
    if val.ttft:
        paths.append(_ttft_plot(plt, val, title, out_dir / "ttft_cdfs.png"))
    if val.sensitivity:
        paths.append(_knee_plot(plt, val, title, out_dir / "knees.png"))
    return paths


def _ttft_plot(plt: Any, val: Validation, title: str, path: Path) -> Path:
    """Per run, the TTFT CDF measured vs simulated: steady requests (solid) and every
    request (dashed, thin), log time axis; the top of the CDF (p90-p100) is where the
    measured cold start shows."""
    n = len(val.ttft)
    cols = 4
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3 * rows), squeeze=False)
    for ax, (name, (sim, meas, sim_st, meas_st)) in zip(axes.flat, val.ttft.items(),
                                                        strict=False):
        for vals, steady, label, color in ((meas, meas_st, "measured", "C0"),
                                           (sim, sim_st, "simulated", "C1")):
            for sel, style, suffix in ((steady, "-", " steady"), (None, "--", " all")):
                v = np.sort(vals if sel is None else vals[sel])
                if v.size:
                    ax.plot(v * 1e3, np.arange(1, v.size + 1) / v.size, style, color=color,
                            lw=1.0 if sel is None else 1.5, label=label + suffix)
        ax.set_xscale("log")
        ax.set_title(run_label(name), fontsize=8)
        ax.set_xlabel("TTFT (ms)", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6)
    return _save(plt, fig, f"{title}: per-request TTFT CDF, measured vs simulated (steady: "
                 f"arrivals after {STEADY_WARMUP_S:g} s)", path, 90)


def _knee_plot(plt: Any, val: Validation, title: str, path: Path) -> Path:
    """Per run, simulated mean E2E change at step times -/+SENSITIVITY_DELTA: a bar far
    past the dashed lines (the step-time change itself) is a run at its knee."""
    names = list(val.sensitivity)
    y = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(names) + 1.5))
    for key, color, label in (("minus", "C0", "steps shorter"), ("plus", "C3", "steps longer")):
        ax.barh(y, [100 * val.sensitivity[n][key] for n in names], color=color, label=label)
    for x in (-100 * SENSITIVITY_DELTA, 100 * SENSITIVITY_DELTA):
        ax.axvline(x, color="k", ls="--", lw=1)
    ax.set_yticks(y, [run_label(n) for n in names], fontsize=7)
    ax.set_xlabel(f"simulated mean E2E change (%) with every step time "
                  f"{100 * SENSITIVITY_DELTA:.0f} % shorter / longer")
    ax.legend(fontsize=7)
    return _save(plt, fig, f"{title}: where each run's knee is", path, 100)


def _save(plt: Any, fig: Any, title: str, path: Path, dpi: int) -> Path:
    """Title, lay out, write and close one figure."""
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
