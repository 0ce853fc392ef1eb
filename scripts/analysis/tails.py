"""Tails and overload (issue 58, phase 1): figures of docs/notes/2026-12-06-tails-and-overload.md.

What: per-request TTFT of the measured runs against the closed-loop simulation of an
archived pick (where the p90/p99 requests sit: run start, load stages, prompt length,
arrival bursts); the engine's sampled step periods around a smooth function of the batch
(spread, tail, autocorrelation); a seeded multiplicative noise on every simulated step and
what it does to the simulated TTFT tail; the slope of (measured - simulated) TTFT in prompt
tokens; and, on the overloaded ``reasoning`` runs, client timeouts and the decode interval
against the queue each request saw.

Why: the pick's simulated TTFT distribution is too thin while its mean is right; before
adding a mechanism to the simulator, each candidate is measured here. Every figure is
labelled with its run's split; the test runs are described, never used to choose.

Run (from the repository root; about 1-2 min on one core)::

    .venv/bin/python scripts/analysis/tails.py [--archive runs/s7.db] [--program bda4b959ee57]

The step section needs ``pyarrow`` (not a project dependency) to read
``steps/enriched_steps.parquet``; without it that section is skipped with a note
(``pip install --target DIR pyarrow`` and ``PYTHONPATH=DIR`` work without touching the venv).
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
WARMUP_S = 30.0  # the first seconds of a run: cold engine, cold prompt cache
QS = (50, 90, 99, 99.9)


def find(name: str):
    """The object ``name`` defined at top level somewhere in evaluator/ or evolve/.

    Why: the packages are being reorganised into subpackages; locating the definition by
    grep keeps this script working across the move (first match wins)."""
    pat = re.compile(rf"^(def|class) {name}\b", re.M)
    for pkg in ("evaluator", "evolve"):
        for p in sorted((ROOT / pkg).rglob("*.py")):
            try:
                text = p.read_text()
            except (OSError, UnicodeDecodeError):
                continue
            if pat.search(text):
                mod = ".".join(p.relative_to(ROOT).with_suffix("").parts)
                return getattr(importlib.import_module(mod), name)
    raise ImportError(f"{name}: not found under evaluator/ or evolve/")


def short(name: str) -> str:
    return name.split("-", 2)[2].replace("-v0-1", "").replace("8x7b-", "")


def ms(x) -> str:
    return f"{1e3 * x:.1f}"


def pct(p: float, m: float) -> str:
    return f"{100 * (p - m) / m:+.1f}%"


# --------------------------------------------------------------------------- loading


def load(archive: str, program_id: str, data: str | None):
    Evaluator = find("Evaluator")
    step_model = find("step_model")
    const_map = find("const_map")
    load_fitted = find("load_fitted")
    infer_scope = find("infer_scope")
    args = argparse.Namespace(program=program_id, archive=archive, run=None, constants=None)
    program, groups, _label, _loop = load_fitted(args)
    ev = Evaluator.from_data(data)
    consts = const_map(program, groups, ev.scenarios, infer_scope(groups, ev.scenarios))
    return ev, step_model(program), consts


def per_request(ev, model, consts, sims) -> dict[str, dict[str, np.ndarray]]:
    """Per run, aligned per request: arrival (s), input tokens, measured / simulated TTFT
    and E2E (s, NaN where not completed), and the simulated queue wait (s)."""
    request_latencies = find("request_latencies")
    out = {}
    for name, res in sims.items():
        sc, c = ev.by_name[name], res.corpus
        ok, ttft, e2e = request_latencies(c, c.end_us, np.asarray(consts[name], float), model)
        s_ttft = np.full(sc.n_requests, np.nan)
        s_e2e = np.full(sc.n_requests, np.nan)
        s_ttft[ok], s_e2e[ok] = ttft, e2e
        m = sc.measured
        done = ~m.failed & np.isfinite(m.ttft_s) & np.isfinite(m.e2e_s)
        out[name] = {"t": sc.arrival_us * 1e-6, "inp": sc.input_tokens.astype(float),
                     "out": sc.output_tokens.astype(float),
                     "m_ttft": np.where(done, m.ttft_s, np.nan),
                     "m_e2e": np.where(done, m.e2e_s, np.nan),
                     "m_failed": m.failed.copy(), "s_ttft": s_ttft, "s_e2e": s_e2e,
                     "s_aborted": c.aborted.copy(), "s_wait": c.wait_us * 1e-6}
    return out


# --------------------------------------------------------------------------- section 1


def section_where(ev, reqs: dict) -> None:
    print("\n## 1. Where the p99 TTFT requests sit (normal runs)\n")
    print("TTFT quantiles in ms, measured / simulated; 'steady' = arrivals after the first "
          f"{WARMUP_S:g} s. top1%: the measured top 1 % of TTFT: share arriving in the "
          "first 30 s, mean input tokens over the run's mean, arrivals in the 2 s before "
          "them over the run's average.")
    print("| run | split | p50 | p90 | p99 | p99.9 | p90 steady | p99 steady | "
          "top1% in first 30 s | top1% input/mean | top1% arrivals 2 s before / mean |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, r in reqs.items():
        if "reasoning" in name:
            continue
        sc = ev.by_name[name]
        both = np.isfinite(r["m_ttft"]) & np.isfinite(r["s_ttft"])
        mt, st, t = r["m_ttft"][both], r["s_ttft"][both], r["t"][both]
        cells = [f"{ms(np.percentile(mt, q))}/{ms(np.percentile(st, q))}" for q in QS]
        steady = t >= WARMUP_S
        for q in (90, 99):
            cells.append(f"{ms(np.percentile(mt[steady], q))}/"
                         f"{ms(np.percentile(st[steady], q))}")
        top = mt >= np.percentile(mt, 99)
        first = np.mean(t[top] < WARMUP_S)
        inp = r["inp"][both]
        # arrivals in the 2 s before each request, over the run's mean rate x 2 s
        arr = np.sort(r["t"])
        before = np.searchsorted(arr, t) - np.searchsorted(arr, t - 2.0)
        rate = before.mean()
        cells += [f"{100 * first:.0f}%", f"{inp[top].mean() / inp.mean():.3f}",
                  f"{before[top & steady].mean() / rate:.2f}" if (top & steady).any()
                  else "-"]
        print(f"| {short(name)} | {sc.split} | " + " | ".join(cells) + " |")

    print("\nMedian / max measured TTFT (ms) by arrival time (first minute) against the "
          "simulated median:")
    edges = (0, 1, 5, 10, 30, 60)
    print("| run | " + " | ".join(f"{a}-{b} s meas med/max, sim med" for a, b in
                                  itertools.pairwise(edges)) + " | after 60 s |")
    print("|---|" + "---|" * len(edges))
    for name, r in reqs.items():
        if "reasoning" in name:
            continue
        cells = []
        for a, b in [*itertools.pairwise(edges), (60, 1e9)]:
            s = (r["t"] >= a) & (r["t"] < b) & np.isfinite(r["m_ttft"]) & np.isfinite(r["s_ttft"])
            if s.sum() == 0:
                cells.append("-")
                continue
            cells.append(f"{ms(np.median(r['m_ttft'][s]))}/{ms(np.max(r['m_ttft'][s]))}, "
                         f"{ms(np.median(r['s_ttft'][s]))}")
        print(f"| {short(name)} | " + " | ".join(cells) + " |")


def section_steady_shape(ev, reqs: dict) -> None:
    print("\n## 1b. Steady-state TTFT shape (arrivals after 30 s, normal runs)\n")
    print("Spread of TTFT about its median (ms): measured vs simulated; corr = per-request "
          "correlation of measured and simulated TTFT; the residual (meas - sim) spread "
          "is what the simulation misses request by request.")
    print("| run | split | meas p99-p50 | sim p99-p50 | meas p90-p50 | sim p90-p50 | corr | "
          "resid sd | resid p99-p50 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in reqs.items():
        if "reasoning" in name:
            continue
        s = (r["t"] >= WARMUP_S) & np.isfinite(r["m_ttft"]) & np.isfinite(r["s_ttft"])
        mt, st = r["m_ttft"][s], r["s_ttft"][s]
        res = mt - st
        p = np.percentile
        print(f"| {short(name)} | {ev.by_name[name].split} | {ms(p(mt, 99) - p(mt, 50))} | "
              f"{ms(p(st, 99) - p(st, 50))} | {ms(p(mt, 90) - p(mt, 50))} | "
              f"{ms(p(st, 90) - p(st, 50))} | {np.corrcoef(mt, st)[0, 1]:.2f} | "
              f"{ms(res.std())} | {ms(p(res, 99) - p(res, 50))} |")


# --------------------------------------------------------------------------- section 3


def section_prompt_slope(ev, reqs: dict) -> None:
    print("\n## 3. Admission cost in prompt length\n")
    print("Within a run (arrivals after 30 s): least-squares slope of measured - simulated "
          "TTFT in input tokens (µs per token, +-2 s.e.), and the input range it rests on.")
    print("| run | split | input p1-p99 | slope µs/token | +-2se |")
    print("|---|---|---|---|---|")
    rows = []
    for name, r in reqs.items():
        if "reasoning" in name:
            continue
        s = (r["t"] >= WARMUP_S) & np.isfinite(r["m_ttft"]) & np.isfinite(r["s_ttft"])
        x, y = r["inp"][s], (r["m_ttft"][s] - r["s_ttft"][s]) * 1e6
        lo, hi = np.percentile(x, [1, 99])
        keep = y < np.percentile(y, 99)  # a few queue spikes would dominate least squares
        x, y = x[keep], y[keep]
        xc = x - x.mean()
        b = (xc * (y - y.mean())).sum() / (xc ** 2).sum()
        resid = y - y.mean() - b * xc
        se = np.sqrt((resid ** 2).sum() / (len(x) - 2) / (xc ** 2).sum())
        rows.append((ev.by_name[name].split, b, se))
        print(f"| {short(name)} | {ev.by_name[name].split} | {lo:.0f}-{hi:.0f} | {b:+.1f} | "
              f"{2 * se:.1f} |")
    tv = [(b, se) for sp, b, se in rows if sp in ("train", "validate")]
    w = np.array([1 / se ** 2 for _, se in tv])
    bw = float(np.sum(w * np.array([b for b, _ in tv])) / w.sum())
    print(f"\ninverse-variance pooled slope over train+validate runs: {bw:+.1f} +- "
          f"{2 / np.sqrt(w.sum()):.1f} µs/token (2 s.e.)")

    print("\nAcross workloads (one constant queue_us per model absorbs the level): mean "
          "measured - simulated TTFT (ms, arrivals after 30 s) against the workload's mean "
          "input; slope per model over its train/validate normal runs.")
    print("| model | workload (split): mean input, mean resid ms | slope µs/token |")
    print("|---|---|---|")
    by_model: dict[str, list] = {}
    for name, r in reqs.items():
        sc = ev.by_name[name]
        if "reasoning" in name or sc.split == "test":
            continue
        s = (r["t"] >= WARMUP_S) & np.isfinite(r["m_ttft"]) & np.isfinite(r["s_ttft"])
        by_model.setdefault(sc.model, []).append(
            (sc.workload, sc.split, r["inp"][s].mean(),
             np.median(r["m_ttft"][s] - r["s_ttft"][s]) * 1e3))
    for model, pts in by_model.items():
        x = np.array([p[2] for p in pts])
        y = np.array([p[3] for p in pts])
        b = np.polyfit(x, y, 1)[0] * 1e3 if len(pts) > 1 else float("nan")
        cells = ", ".join(f"{w} ({sp}): {xi:.0f}, {yi:+.1f}" for w, sp, xi, yi in pts)
        print(f"| {model} | {cells} | {b:+.1f} |")


# --------------------------------------------------------------------------- section 2


def section_steps() -> dict[str, float]:
    print("\n## 2. Step-time noise in the engine's sampled steps\n")
    try:
        import pyarrow.parquet as pq
    except ImportError:
        print("pyarrow not importable: step section skipped (see the module docstring)")
        return {}
    path = find("data_dir")(None) / "steps" / "enriched_steps.parquet"
    tab = pq.read_table(path).to_pydict()
    cols = {k: np.asarray(v) for k, v in tab.items()}
    out: dict[str, float] = {}
    print("Exact step periods: consecutive sampled steps (id difference 1), period = "
          "ts_start difference. Smooth function of the batch: least squares of period on "
          "[1, decode tokens, prefill tokens, prefill requests, decode tokens^2], per run. "
          "r = period / fit.")
    print("| run | pairs | median ms | sd(log r) | r p1 | r p10 | r p90 | r p99 | r max | "
          "share r>1.2 | sd(log r) decode-only | lag-~10 autocorr |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for exp in sorted(set(cols["experiment_id"])):
        sel = np.flatnonzero(cols["experiment_id"] == exp)
        sel = sel[np.argsort(cols["step.id"][sel])]
        sid, ts = cols["step.id"][sel], cols["step.ts_start_ns"][sel]
        _, first = np.unique(sid, return_index=True)  # the file repeats some steps
        sel, sid, ts = sel[first], sid[first], ts[first]
        j = np.flatnonzero(np.diff(sid) == 1)
        period = (ts[j + 1] - ts[j]) * 1e-3  # µs
        i = sel[j]
        dec = cols["batch.decode_tokens"][i].astype(float)
        pf = cols["batch.prefill_tokens"][i].astype(float)
        npf = cols["batch.num_prefill_reqs"][i].astype(float)
        X = np.column_stack([np.ones_like(dec), dec, pf, npf, dec ** 2])
        good = period > 0
        coef, *_ = np.linalg.lstsq(X[good], period[good], rcond=None)
        fit = X @ coef
        r = period / fit
        lr = np.log(r[good & (fit > 0)])
        q = np.percentile(r, [1, 10, 90, 99])
        dec_only = (pf == 0) & good
        # autocorrelation of log r between successive sampled pairs (~10 steps apart)
        gap = np.diff(sid[j])
        near = (gap > 0) & (gap <= 20)
        lr_all = np.log(np.clip(r, 1e-3, None))
        ac = np.corrcoef(lr_all[:-1][near], lr_all[1:][near])[0, 1]
        print(f"| {short(exp)} | {len(j)} | {np.median(period) / 1e3:.1f} | {lr.std():.3f} | "
              + " | ".join(f"{v:.2f}" for v in q)
              + f" | {r.max():.2f} | {np.mean(r > 1.2):.3f} | "
              f"{np.log(r[dec_only]).std():.3f} | {ac:+.2f} |")
        out[exp] = float(lr.std())
        # spread by batch size
        bs = dec + npf
        cells = []
        for a, b in ((0, 32), (32, 64), (64, 96), (96, 129)):
            s = (bs >= a) & (bs < b) & good
            if s.sum() >= 30:
                cells.append(f"{a}-{b - 1}: sd(log r) {np.log(r[s]).std():.3f} (n {s.sum()})")
        print(f"|  by batch size | {'; '.join(cells)} |||||||||||")
    return out


# --------------------------------------------------------------------------- noise test


def noisy_model(model, base_len: int):
    """``model`` with every step time multiplied by a mean-one lognormal factor
    exp(sigma z - sigma^2/2), z an AR(1) N(0,1) sequence with coefficient rho. sigma, rho
    and the AR state ride at the end of the constant vector (positions base_len ..
    base_len+2), which the program never reads. Seeded with :func:`seed_noise`."""
    import numba as nb

    inner = model.scalar_fn
    sig = nb.float64(nb.float64[::1], nb.float64[::1])
    i_sig, i_rho, i_z = base_len, base_len + 1, base_len + 2

    @nb.njit(sig)
    def fn(f, c):
        t = inner(f, c)
        s, rho = c[i_sig], c[i_rho]
        z = rho * c[i_z] + np.sqrt(1.0 - rho * rho) * np.random.standard_normal()
        c[i_z] = z
        return t * np.exp(s * z - 0.5 * s * s)

    from dataclasses import replace

    return replace(model, scalar_fn=fn)


def seed_noise(seed: int) -> None:
    import numba as nb

    @nb.njit
    def _seed(s):
        np.random.seed(s)

    _seed(seed)


def section_noise(ev, model, consts, reqs_base: dict, sigmas, rhos, seeds=(1, 2, 3)) -> None:
    print("\n## 2b. Seeded step-time noise in the simulation (normal runs, train+validate)\n")
    print("Every simulated step time x exp(sigma z - sigma^2/2), z AR(1) with coefficient "
          "rho; TTFT p90/p99 signed error against measured (all requests), mean over "
          f"seeds {list(seeds)}. Base: no noise.")
    names = [n for n in ev.names() if "reasoning" not in n and ev.by_name[n].split != "test"]
    base_len = len(next(iter(consts.values())))
    configs = [("base", 0.0, 0.0)] + [(f"s{s:g} rho{r:g}", s, r) for s in sigmas for r in rhos]
    table: dict[str, dict[str, tuple[float, ...]]] = {}
    for label, s, rho in configs:
        if s == 0.0:
            reqs = reqs_base
            acc = {n: [_tail_err(reqs[n])] for n in names}
        else:
            m = noisy_model(model, base_len)
            acc = {n: [] for n in names}
            for sd in seeds:
                seed_noise(sd)
                c2 = {n: np.concatenate([np.asarray(consts[n], float), [s, rho, 0.0]])
                      for n in names}
                sims = ev.simulate(m, c2, names=names, threads=1)
                reqs = per_request(ev, m, c2, sims)
                for n in names:
                    acc[n].append(_tail_err(reqs[n]))
        table[label] = {n: tuple(np.mean(v, axis=0)) for n, v in acc.items()}
    heads = [label for label, _, _ in configs]
    print("| run | split | " + " | ".join(f"{h} p90/p99/p99 steady/mean" for h in heads) + " |")
    print("|---|---|" + "---|" * len(heads))
    for n in names:
        cells = ["/".join(f"{100 * v:+.0f}" for v in table[h][n]) for h in heads]
        print(f"| {short(n)} | {ev.by_name[n].split} | " + " | ".join(cells) + " |")
    print("| **within 10 % p99 (of " + str(len(names)) + ")** | | " + " | ".join(
        str(sum(abs(table[h][n][1]) < 0.10 for n in names)) for h in heads) + " |")
    print("| **within 10 % p99 steady** | | " + " | ".join(
        str(sum(abs(table[h][n][2]) < 0.10 for n in names)) for h in heads) + " |")
    print("| **median abs p99 err** | | " + " | ".join(
        f"{100 * np.median([abs(table[h][n][1]) for n in names]):.0f}%" for h in heads) + " |")


def _tail_err(r) -> tuple[float, ...]:
    """Signed relative errors: TTFT p90, p99, p99 of arrivals after WARMUP_S, mean."""
    both = np.isfinite(r["m_ttft"]) & np.isfinite(r["s_ttft"])
    m, s = r["m_ttft"][both], r["s_ttft"][both]
    st = r["t"][both] >= WARMUP_S

    def err(x, y):
        return (x - y) / y

    return (err(np.percentile(s, 90), np.percentile(m, 90)),
            err(np.percentile(s, 99), np.percentile(m, 99)),
            err(np.percentile(s[st], 99), np.percentile(m[st], 99)),
            err(s.mean(), m.mean()))


# --------------------------------------------------------------------------- section 4


def section_overload(ev, reqs: dict) -> None:
    print("\n## 4. Overload (reasoning runs)\n")
    print("Client timeouts by arrival window (measured / simulated); a request times out "
          "when it has no response by 300 s.")
    for name, r in reqs.items():
        if "reasoning" not in name:
            continue
        sp = ev.by_name[name].split
        edges = np.arange(0, 1300, 200)
        mh = np.histogram(r["t"][r["m_failed"]], edges)[0]
        sh = np.histogram(r["t"][r["s_aborted"]], edges)[0]
        cells = ", ".join(f"{a}-{b}s {x}/{y}" for a, b, x, y in
                          zip(edges[:-1], edges[1:], mh, sh, strict=True))
        print(f"- {short(name)} ({sp}): total {r['m_failed'].sum()}/{r['s_aborted'].sum()}; "
              f"{cells}")
    print("\nDecode interval (ms) of completed requests against the number of requests "
          "open at their admission (arrived, not finished, not timed out; measured from "
          "the client's own timestamps, simulated from the replica), and the slope of "
          "the interval in open requests over the admitted-after-60 s requests.")
    print("| run | split | open at admission: p10 / p50 / p90 (meas) | interval ms by open "
          "tercile (meas) | same (sim) | (meas - sim) slope, µs per open request |")
    print("|---|---|---|---|---|---|")
    windows: list[str] = []
    for name, r in reqs.items():
        if "reasoning" not in name:
            continue
        res = []
        for side in ("m", "s"):
            ttft, e2e = r[f"{side}_ttft"], r[f"{side}_e2e"]
            done = np.isfinite(ttft) & np.isfinite(e2e)
            fail = r["m_failed"] if side == "m" else r["s_aborted"]
            end = np.where(done, r["t"] + e2e, np.where(fail, r["t"] + 300.0, np.nan))
            admit = r["t"] + ttft
            # open at time x: arrived before x and ending after x
            t_sorted = np.sort(r["t"])
            e_sorted = np.sort(end[np.isfinite(end)])
            a = admit[done]
            open_n = np.searchsorted(t_sorted, a) - np.searchsorted(e_sorted, a)
            itl = (e2e[done] - ttft[done]) / np.maximum(r["out"][done] - 1, 1) * 1e3
            res.append((a, open_n, itl))
        (am, om, im), (as_, os_, is_) = res
        tb = np.percentile(om, [33.3, 66.7])

        def terc(o, i, tb=tb):
            k = np.digitize(o, tb)
            return "/".join(f"{i[k == j].mean():.1f}" if (k == j).any() else "-"
                            for j in range(3))

        # net of the batch: measured minus simulated mean interval per 100 s admission
        # window, against the window's median open count (measured)
        w = np.arange(0, 1600, 100)
        km, ks = np.digitize(am, w), np.digitize(as_, w)
        pts = [(np.median(om[km == j]), im[km == j].mean() - is_[ks == j].mean())
               for j in range(1, len(w)) if (km == j).sum() >= 20 and (ks == j).sum() >= 20]
        b = (np.polyfit([x for x, _ in pts], [y for _, y in pts], 1)[0] * 1e3
             if len(pts) > 2 else float("nan"))
        windows.append(f"- {short(name)} ({ev.by_name[name].split}): " + ", ".join(
            f"{x:.0f} open {y:+.1f} ms" for x, y in pts))
        print(f"| {short(name)} | {ev.by_name[name].split} | "
              f"{'/'.join(f'{v:.0f}' for v in np.percentile(om, [10, 50, 90]))} | "
              f"{terc(om, im)} | {terc(os_, is_)} | {b:+.1f} |")
    print("\nPer 100 s admission window: median open requests (measured) and measured - "
          "simulated mean decode interval:")
    print("\n".join(windows))


def section_e2e_p99(ev, reqs: dict) -> None:
    print("\n## 5. p99 E2E (normal runs): where the slow completions sit\n")
    print("| run | split | E2E p99 meas/sim s | share of measured top 1 % arriving in "
          "the first 30 s | p99 steady meas/sim s |")
    print("|---|---|---|---|---|")
    for name, r in reqs.items():
        if "reasoning" in name:
            continue
        s = np.isfinite(r["m_e2e"]) & np.isfinite(r["s_e2e"])
        me, se, t = r["m_e2e"][s], r["s_e2e"][s], r["t"][s]
        top = me >= np.percentile(me, 99)
        st = t >= WARMUP_S
        print(f"| {short(name)} | {ev.by_name[name].split} | {np.percentile(me, 99):.2f}/"
              f"{np.percentile(se, 99):.2f} | {100 * np.mean(t[top] < WARMUP_S):.0f}% | "
              f"{np.percentile(me[st], 99):.2f}/{np.percentile(se[st], 99):.2f} |")


def section_bootstrap(ev, reqs: dict, n_boot: int = 200) -> None:
    print("\n## 6. How noisy the measured percentiles are (normal runs, arrivals after 30 s)\n")
    print("Bootstrap (200 resamples of requests) relative standard error of the measured "
          "statistic, %; the run-to-run noise floor a loss term on it cannot beat.")
    print("| run | split | n | mean TTFT | p90 TTFT | p99 TTFT | mean E2E | p99 E2E |")
    print("|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for name, r in reqs.items():
        if "reasoning" in name:
            continue
        s = (r["t"] >= WARMUP_S) & np.isfinite(r["m_ttft"]) & np.isfinite(r["m_e2e"])
        tt, ee = r["m_ttft"][s], r["m_e2e"][s]
        stats = {"mt": [], "t90": [], "t99": [], "me": [], "e99": []}
        for _ in range(n_boot):
            k = rng.integers(0, len(tt), len(tt))
            a, b = tt[k], ee[k]
            stats["mt"].append(a.mean())
            stats["t90"].append(np.percentile(a, 90))
            stats["t99"].append(np.percentile(a, 99))
            stats["me"].append(b.mean())
            stats["e99"].append(np.percentile(b, 99))
        cells = [f"{100 * np.std(v) / np.mean(v):.2f}" for v in stats.values()]
        print(f"| {short(name)} | {ev.by_name[name].split} | {len(tt)} | " + " | ".join(cells)
              + " |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--archive", default="runs/s7.db")
    ap.add_argument("--program", default="bda4b959ee57")
    ap.add_argument("--data", default=None)
    ap.add_argument("--no-noise", action="store_true", help="skip the noise simulations")
    ap.add_argument("--sigmas", default="0.06,0.1,0.2")
    ap.add_argument("--rhos", default="0,0.9")
    a = ap.parse_args()
    ev, model, consts = load(a.archive, a.program, a.data)
    print(f"# Tails and overload: program {a.program} from {a.archive}, closed loop (vLLM loop)")
    print("splits: " + ", ".join(f"{short(s.name)} {s.split}" for s in ev.scenarios))
    sims = ev.simulate(model, consts, threads=1)
    reqs = per_request(ev, model, consts, sims)
    section_where(ev, reqs)
    section_steady_shape(ev, reqs)
    section_e2e_p99(ev, reqs)
    section_prompt_slope(ev, reqs)
    section_bootstrap(ev, reqs)
    section_steps()
    if not a.no_noise:
        section_noise(ev, model, consts, reqs,
                      [float(x) for x in a.sigmas.split(",")],
                      [float(x) for x in a.rhos.split(",")])
    section_overload(ev, reqs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
