"""The engine's own step counter against the replica (issue 58): where the overload slowdown sits.

What: the measured servers number their engine steps, and ``steps/predictions.csv`` samples
them to the end of every run, so the largest sampled id is the number of steps the engine
took in the run. Against the closed-loop simulation of an archived pick over the same
requests this prints, per run: engine steps measured and simulated and the mean step period
they imply; on the overloaded ``reasoning`` runs, the schedule call's host time
(``step.duration_us``, data README trap 2) over the last sampled steps against the requests
still open; and, in the three runs whose sampled steps carry the batch
(``steps/enriched_steps.parquet``), the host time and the exact step period by running
batch, and how often a prefill is followed by a one-token "prefill" step; last, the
reasoning runs simulated with the measured host time as a floor under every step.

Why: the client's timestamps cannot tell a slower engine from a slower API server or client;
the step counter can. And a host cost per open request would have to fall while a run's
queue drains; the drain is where the reasoning runs' sampled steps are.

Run (from the repository root; about 1 min on one core)::

    .venv/bin/python scripts/analysis/engine_steps.py [--archive runs/s7.db] \
        [--program ca7be6830cc6]

The batch section needs ``pyarrow`` (not a project dependency), as ``tails.py`` does;
without it that section is skipped with a note.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from evaluator.api import sampled_steps
from evaluator.features.glossary import N_DECODE, N_PREFILL, PREFILL_TOKENS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tails import find, load, short  # a sibling analysis script

CLIENT_TIMEOUT_S = 300.0  # inference-perf's timeout in the measured runs (data README)


def request_ends(arrival_s: np.ndarray, e2e_s: np.ndarray, failed: np.ndarray) -> np.ndarray:
    """When each request stopped being open (s): its completion, or its client timeout;
    NaN for a request that neither completed nor failed (none in the measured runs)."""
    done = np.isfinite(e2e_s) & ~failed
    return np.where(done, arrival_s + np.where(done, e2e_s, 0.0),
                    np.where(failed, arrival_s + CLIENT_TIMEOUT_S, np.nan))


def open_requests(arrival_s: np.ndarray, end_s: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Requests open at each time in ``at``: arrived at or before it, ended after it."""
    arrived = np.searchsorted(np.sort(arrival_s), at, side="right")
    ended = np.searchsorted(np.sort(end_s[np.isfinite(end_s)]), at, side="right")
    return arrived - ended


def step_time(ids: np.ndarray, n_measured: int, sim_end_us: np.ndarray) -> np.ndarray:
    """The time (s) of measured step ``ids``, read off the simulated steps at the same
    fraction of the run's steps. An approximation: it assumes the engine and the replica
    spend their steps alike over the run, which is what lets the measured host times be
    set against the measured open requests at all (the sampled steps have no clock)."""
    j = np.clip(np.rint(ids / max(n_measured, 1) * len(sim_end_us)).astype(np.int64) - 1,
                0, len(sim_end_us) - 1)
    return sim_end_us[j] * 1e-6


def prefill_followups(ids: np.ndarray, prefill_reqs: np.ndarray,
                      prefill_tokens: np.ndarray) -> tuple[float, float, float]:
    """Over consecutive sampled steps: the share of steps with a prefill request, and the
    chance that the next step carries exactly one prefill token after a step that prefilled
    more than one token, and after a step without prefill."""
    order = np.argsort(ids)
    ids, pr, pt = ids[order], prefill_reqs[order], prefill_tokens[order]
    k = np.flatnonzero(np.diff(ids) == 1)
    if k.size == 0:
        return float("nan"), float("nan"), float("nan")
    one_next = pt[k + 1] == 1
    big = (pr[k] > 0) & (pt[k] > 1)
    none = pr[k] == 0
    return (float(np.mean(pr > 0)),
            float(one_next[big].mean()) if big.any() else float("nan"),
            float(one_next[none].mean()) if none.any() else float("nan"))


# --------------------------------------------------------------------------- sections


def section_counts(ev, sims, steps) -> dict[str, float]:
    print("\n## 1. Engine steps in the whole run, measured against simulated\n")
    print("Measured: the largest sampled step id. Period: (last end - first arrival) / "
          "steps, over the same span on both sides (the engine steps only while busy).")
    print("| run | split | steps measured | simulated | measured / simulated | "
          "period ms measured / simulated |")
    print("|---|---|---|---|---|---|")
    ratio = {}
    for sc in ev.scenarios:
        if sc.name not in steps:
            continue
        c = sims[sc.name].corpus
        n_meas, n_sim = int(steps[sc.name][0].max()), c.n_steps
        m = sc.measured
        t = sc.arrival_us * 1e-6
        end_m = np.nanmax(request_ends(t, m.e2e_s, m.failed))
        span_m, span_s = end_m - t.min(), c.end_us[-1] * 1e-6 - t.min()
        ratio[sc.name] = n_meas / n_sim
        print(f"| {short(sc.name)} | {sc.split} | {n_meas:,} | {n_sim:,} | "
              f"{n_meas / n_sim:.3f} | {1e3 * span_m / n_meas:.2f} / "
              f"{1e3 * span_s / n_sim:.2f} |")
    return ratio


def section_drain(ev, sims, steps) -> None:
    print("\n## 2. Reasoning runs: the schedule call's host time while the queue drains\n")
    print("The sampled steps cover only the end of these runs. Per tenth of them: the "
          "time (read off the simulated steps, see `step_time`), the requests open then "
          "(client timestamps), the simulated running batch, and the median host time.")
    for sc in ev.scenarios:
        if "reasoning" not in sc.name or sc.name not in steps:
            continue
        ids, host = steps[sc.name]
        c = sims[sc.name].corpus
        m = sc.measured
        t_arr = sc.arrival_us * 1e-6
        end = request_ends(t_arr, m.e2e_s, m.failed)
        n_meas = int(ids.max())
        print(f"\n{short(sc.name)} ({sc.split}): {len(ids)} sampled steps, ids "
              f"{ids.min():,}-{n_meas:,}\n")
        print("| time s | open requests | simulated running | host time ms, median |")
        print("|---|---|---|---|")
        edges = np.linspace(ids.min(), n_meas + 1, 11)
        for a, b in itertools.pairwise(edges):
            sel = (ids >= a) & (ids < b)
            if not sel.any():
                continue
            t0, t1 = step_time(np.array([a, b]), n_meas, c.end_us)
            j0 = int(np.searchsorted(c.end_us * 1e-6, t0))
            j1 = max(int(np.searchsorted(c.end_us * 1e-6, t1)), j0 + 1)
            running = float((c.stats[N_DECODE, j0:j1] + c.stats[N_PREFILL, j0:j1]).mean())
            n_open = int(open_requests(t_arr, end, np.array([0.5 * (t0 + t1)]))[0])
            print(f"| {t0:.0f}-{t1:.0f} | {n_open:,} | {running:.0f} | "
                  f"{np.median(host[sel]) / 1e3:.1f} |")


def section_batch(ev, sims) -> None:
    print("\n## 3. Host time and step period by running batch (runs with sampled batches)\n")
    try:
        import pyarrow.parquet as pq
    except ImportError:
        print("pyarrow not importable: batch section skipped (see the module docstring)")
        return
    path = find("data_dir")(None) / "steps" / "enriched_steps.parquet"
    cols = {k: np.asarray(v) for k, v in pq.read_table(path).to_pydict().items()}
    for exp in sorted(set(cols["experiment_id"])):
        sel = np.flatnonzero(cols["experiment_id"] == exp)
        sid = cols["step.id"][sel]
        _, first = np.unique(sid, return_index=True)  # the file repeats some steps
        sel = sel[first]
        sid, ts = cols["step.id"][sel], cols["step.ts_start_ns"][sel]
        run = cols["queue.running_depth"][sel]
        host = cols["step.duration_us"][sel].astype(float)
        j = np.flatnonzero(np.diff(sid) == 1)
        period = (ts[j + 1] - ts[j]) * 1e-3
        split = ev.by_name[exp].split if exp in ev.by_name else "?"
        print(f"\n{short(exp)} ({split}):\n")
        sim_run = sim_step = None
        if exp in sims:
            c = sims[exp].corpus
            sim_run = c.stats[N_DECODE] + c.stats[N_PREFILL]
            sim_step = np.diff(np.concatenate([[0.0], c.end_us]))
        print("| running requests | steps | host time ms, median | pairs | exact period ms, "
              "median | replica's step ms, median |")
        print("|---|---|---|---|---|---|")
        for a, b in ((0, 30), (30, 45), (45, 60), (60, 80), (80, 100), (100, 115),
                     (115, 129)):
            s = (run >= a) & (run < b)
            p = (run[j] >= a) & (run[j] < b)
            if s.sum() < 5:
                continue
            per = f"{np.median(period[p]) / 1e3:.2f}" if p.sum() >= 5 else "-"
            rep = "-"
            if sim_run is not None and sim_step is not None:
                q = (sim_run >= a) & (sim_run < b) & (sim_step < 1e5)  # not an idle gap
                rep = f"{np.median(sim_step[q]) / 1e3:.2f}" if q.sum() >= 5 else "-"
            print(f"| {a}-{b - 1} | {s.sum()} | {np.median(host[s]) / 1e3:.2f} | "
                  f"{p.sum()} | {per} | {rep} |")
        share, after_big, after_none = prefill_followups(
            sid, cols["batch.num_prefill_reqs"][sel], cols["batch.prefill_tokens"][sel])
        line = (f"Steps with a prefill request: measured {share:.2f}")
        if exp in sims:
            st = sims[exp].corpus.stats
            line += f", simulated {np.mean(st[PREFILL_TOKENS] > 0):.2f}"
        print(f"\n{line}. The next step carries exactly one prefill token after a "
              f"step that prefilled more than one: {after_big:.2f}; after a step "
              f"without prefill: {after_none:.3f}.")


def section_floor(ev, model, consts, sims, steps) -> None:
    print("\n## 4. What-if: reasoning runs with the measured host time as a floor\n")
    print("Every simulated step lasts at least the median host time of the run's sampled "
          "steps (`--host-floor measured`; here without the step noise `evolve validate` "
          "adds, so the figures differ from its by a point or so). Signed errors, "
          "simulated against measured; timeouts simulated / measured.")
    print("| run | split | floor ms | mean E2E | mean TTFT | decode interval | timeouts |"
          " steps, simulated |")
    print("|---|---|---|---|---|---|---|---|")
    simulate = find("simulate")
    for sc in ev.scenarios:
        if "reasoning" not in sc.name or sc.name not in steps:
            continue
        floor = float(np.median(steps[sc.name][1]))  # as sampled_host_us
        with_floor = simulate(replace(sc, host_floor_us=floor), model,
                              np.asarray(consts[sc.name], float))
        for label, res in (("as fitted", sims[sc.name]), ("with floor", with_floor)):
            p, m = res.metrics.pred, res.metrics.meas
            err = [f"{100 * (p[k] / m[k] - 1):+.1f} %" for k in
                   ("e2e_mean", "ttft_mean", "itl_mean")]
            print(f"| {short(sc.name)} {label} | {sc.split} | "
                  f"{floor / 1e3 if label != 'as fitted' else 0:.1f} | {' | '.join(err)} | "
                  f"{p['failures']:,.0f} / {m['failures']:,.0f} | {res.corpus.n_steps:,} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--archive", default="runs/s7.db")
    ap.add_argument("--program", default="ca7be6830cc6")
    ap.add_argument("--data", default=None)
    a = ap.parse_args()
    ev, model, consts = load(a.archive, a.program, a.data)
    print(f"# The engine's step counter: program {a.program} from {a.archive}, closed "
          "loop (vLLM loop)")
    steps = sampled_steps(find("data_dir")(a.data))
    sims = ev.simulate(model, consts, threads=1)
    section_counts(ev, sims, steps)
    section_drain(ev, sims, steps)
    section_batch(ev, sims)
    section_floor(ev, model, consts, sims, steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
