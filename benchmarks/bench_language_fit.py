"""Benchmark: program compile time, and CMA-ES fit time of a 10-constant program.

Budget (README, Benchmarks): fitting a 10-constant program on the fitting windows of the
training runs takes under 3 s on 2 cores. Prints:

1. per seed program: parse + check, numpy code generation, numba compilation (ms);
2. the trained_physics seed (10 constants) fitted globally on the full data's training
   runs, for three fitting seeds: wall time, evaluations, training loss before and after;
3. the fitted constants' loss re-checked through the evaluator on the *full* corpora
   (teacher forced), next to the fitting-window loss the fit optimised.

Run: ``.venv/bin/python benchmarks/bench_language_fit.py [--data DIR] [--closed-loop]``.
The machine may be shared: the load average is printed with the results.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evaluator.api import Evaluator, loss  # noqa: E402
from evolve.fitting import DEFAULT_MAX_EVALS, const_map, fit_program  # noqa: E402
from evolve.program.codegen import compile_program, step_model  # noqa: E402
from evolve.program.language import parse_program  # noqa: E402

SEEDS = ROOT / "seeds"
BIG = '''"""A 30-operation program (complexity cap) for compile timing."""
CONSTANTS = {"a": (1.0, 0.1, 10.0), "b": (1.0, 0.1, 10.0), "k": (256.0, 8.0, 2048.0),
             "p": (2.0, 1.0, 4.0), "o": (3000.0, 10.0, 50000.0)}
def step_time(f, c):
    cmp = c.a * (f.pf_gemm + f.pf_attn + f.dc_gemm + f.dc_attn)
    mem = c.b * (f.weight_read + f.kv_read + f.kv_write)
    tok = f.prefill_tokens + f.decode_tokens
    s = (cmp ** c.p + mem ** c.p) ** (1.0 / c.p)
    rg = where(tok < c.k, maximum(cmp, mem), s)
    q = clip(log1p(f.kv_max) * sqrt(f.batch_size), 0.0, 1e4) + exp(-f.tp) + abs(f.moe_gemm)
    return rg + q + c.o + minimum(f.tp_allreduce, 1e5)
'''


def ms(t: float) -> str:
    return f"{1e3 * t:8.1f}"


def bench_compile() -> None:
    print("compile time per program (ms): parse+check, numpy, numba  [first numba compile "
          "includes numba's warm-up]")
    progs = [(p.stem, p.read_text()) for p in sorted(SEEDS.glob("*.py"))] + [("cap30", BIG)]
    for name, src in progs:
        t0 = time.perf_counter()
        prog = parse_program(src)
        t1 = time.perf_counter()
        comp = compile_program(prog)  # numpy generation + exec, numba njit, queue_fn
        t2 = time.perf_counter()
        sec = comp.seconds
        print(f"  {name:16s} complexity {prog.complexity:2d}: parse {ms(t1 - t0)}  numpy "
              f"{ms(sec['numpy'] + sec['queue'])}  numba {ms(sec['numba'])}  "
              f"total {ms(t2 - t0)}")


def bench_fit(data: str | None, closed_loop: bool) -> None:
    t0 = time.perf_counter()
    ev = Evaluator.from_data(data)
    prog = parse_program((SEEDS / "trained_physics.py").read_text())
    model = step_model(prog)
    init = const_map(prog, {}, ev.scenarios, "global")
    ev.refresh_corpora(model, init)
    names = ev.names("train")
    steps = sum(ev.fit_sets[n].features.shape[1] for n in names)
    print(f"\ndata loaded and simulated at the initial constants in "
          f"{time.perf_counter() - t0:.1f} s; fitting windows of {len(names)} training "
          f"runs: {steps} steps")
    print(f"fit of trained_physics ({prog.n_constants} constants), scope global, "
          f"max_evals {DEFAULT_MAX_EVALS}:")
    times, last = [], None
    for seed in (1, 2, 3):
        t = time.perf_counter()
        res = fit_program(prog, ev, names, "global", seed=seed)
        dt = time.perf_counter() - t
        times.append(dt)
        print(f"  seed {seed}: {dt:5.2f} s, {res.n_evals} evaluations "
              f"({1e3 * dt / res.n_evals:.2f} ms each), loss {res.init_loss:.4f} -> "
              f"{res.loss:.4f} ({res.status})")
        last = res
    print(f"  median {statistics.median(times):.2f} s, max {max(times):.2f} s "
          f"(budget 3 s); load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    assert last is not None
    fitted = const_map(prog, last.groups, ev.scenarios, "global")
    for label, cm in (("initial (published BLIS)", init), ("fitted (seed 3)", fitted)):
        win = loss(ev.score(model, cm, names), names)
        full = loss(ev.score(model, cm, names, full=True), names)
        print(f"  {label:26s} training loss: fitting windows {win:.4f}, full corpora "
              f"{full:.4f}")
    if closed_loop:
        for label, cm in (("initial (published BLIS)", init), ("fitted (seed 3)", fitted)):
            t = time.perf_counter()
            sims = ev.simulate(model, cm, names)
            cl = loss({n: s.metrics for n, s in sims.items()}, names)
            print(f"  {label:26s} training loss closed loop: {cl:.4f} "
                  f"({time.perf_counter() - t:.1f} s)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", help="data directory (default: $EVOLVE_DATA or ../shared/data)")
    ap.add_argument("--closed-loop", action="store_true",
                    help="also simulate the training runs closed loop (slow)")
    args = ap.parse_args()
    bench_compile()
    bench_fit(args.data, args.closed_loop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
