"""Evaluator budgets (README, Benchmarks): scoring throughput, fitting-corpus scoring time,
closed-loop simulation of all 16 runs. Prints figures; run ``python benchmarks/bench_evaluator.py``.

The 30-operation program below is scored teacher forced on the full corpora of all 16 runs
(simulated once with BLIS trained-physics), pinned to one core via the thread env vars.
"""

from __future__ import annotations

import os
import sys
import time

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402

from evaluator.api import Evaluator  # noqa: E402
from evaluator.features.components import compute_features  # noqa: E402
from evaluator.scoring.baselines import TRAINED_PHYSICS, trained_physics_consts  # noqa: E402
from evaluator.scoring.score import score_corpus, step_times  # noqa: E402
from evolve.program.codegen import step_model  # noqa: E402
from evolve.program.language import parse_program  # noqa: E402

PROGRAM_30 = '''
"""A 30-operation benchmark program (not a good model; it exercises every call)."""
CONSTANTS = {"a": (1.0, 0.1, 10.0), "b": (1.0, 0.1, 10.0), "k": (100.0, 1.0, 1000.0),
             "p": (2.0, 1.0, 3.0), "t": (512.0, 1.0, 2048.0)}

def step_time(f, c):
    pf = c.a * (f.pf_gemm + f.pf_attn) + sqrt(f.prefill_tokens + 1.0)
    dc = c.b * (f.dc_gemm + f.dc_attn) + log1p(f.kv_sum) * 0.5
    mem = f.weight_read + f.kv_read + f.kv_write
    smooth = (pf ** c.p + mem ** c.p) ** (1.0 / c.p)
    big = where(f.prefill_tokens > c.t, maximum(pf, dc), minimum(pf + dc, mem * 2.0))
    return clip(smooth + big + abs(dc - mem), 1.0, 1e7) + c.k
'''


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> int:
    ev = Evaluator.from_data(os.environ.get("EVOLVE_DATA"))
    consts = {s.name: trained_physics_consts(s) for s in ev.scenarios}
    t0 = time.perf_counter()
    sims = ev.simulate(TRAINED_PHYSICS, consts, names=ev.names()[:1])
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    sims = ev.simulate(TRAINED_PHYSICS, consts)
    closed = time.perf_counter() - t0
    n_steps = sum(r.corpus.n_steps for r in sims.values())
    print(f"closed loop, all {len(sims)} runs, trained-physics: {closed:.2f} s "
          f"({n_steps:,} steps, {n_steps / closed / 1e6:.2f} M steps/s; target < 60 s); "
          f"first call incl. numba load/compile {first:.2f} s")

    prog = parse_program(PROGRAM_30)
    model = step_model(prog)
    c = prog.init_vector()
    print(f"benchmark program complexity: {prog.complexity} operations")
    feats = [compute_features(r.corpus.stats, ev.by_name[n].arch_vector)
             for n, r in sims.items()]
    big = np.ascontiguousarray(np.concatenate(feats, axis=1))
    secs = _best(lambda: step_times(model, big, c), 5)
    print(f"teacher-forced step times, 30-op program, one core: {big.shape[1] / secs / 1e6:.1f} "
          f"M steps/s ({big.shape[1]:,} steps in {secs * 1e3:.1f} ms; target >= 20 M/s)")
    full = _best(lambda: [score_corpus(ev.by_name[n], r.corpus, model,
                                       np.asarray(c)) for n, r in sims.items()], 3)
    print(f"full teacher-forced scoring incl. features and per-request metrics, 16 runs: "
          f"{full * 1e3:.0f} ms")

    for name, r in sims.items():
        ev.corpora[name] = r.corpus
    from evaluator.sim.corpus import build_fit_set

    ev.fit_sets = {n: build_fit_set(ev.by_name[n], r.corpus) for n, r in sims.items()}
    n_fit = sum(fs.features.shape[1] for fs in ev.fit_sets.values())
    cm = dict.fromkeys(ev.names(), c)
    secs = _best(lambda: ev.score(model, cm), 20)
    print(f"scoring on the fitting corpora (16 runs, {n_fit:,} steps in windows): "
          f"{secs * 1e3:.2f} ms (target < 5 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
