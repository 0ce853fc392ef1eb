"""Benchmark: candidates fitted and judged per second, by executor and worker count, and
where the time of one candidate goes.

Why this shape: a search is bounded by how many children it can fit and judge per hour,
and scaling out only pays where that time is spent in the workers, not in the driver. So
the same search (seed 7, full bundled data, default config, ``--generations N``, polish
off: it runs once per run and fits no candidate) runs with every (executor, workers)
pair, and for generations 1..N (generation 0, the seeds, is reported apart) this prints:

* candidates per second: children sent to the executor (screened, not yet deduplicated;
  each is fingerprinted, fitted teacher forced and judged closed loop) / wall time;
* the driver's share: the wall time outside ``Executor.map`` (selection, the operator,
  screening, recording, corpus refreshes with their re-scoring, archive writes);
* with ``--workers 1`` on the local executor (everything in one process, so it can be
  timed), the time per candidate by phase: compile (parse + numpy + numba), fingerprint,
  teacher-forced fit (CMA-ES), closed-loop judging (stage slices simulated, physics
  check), and the archive write per candidate.

Every configuration decides the same (same seed: same archive; checked by digest here).
Each runs in a fresh process, so none inherits another's compiled programs or Ray session.
Run: ``python benchmarks/bench_throughput.py [--generations 8] [--workers 1 2]
[--executors local ray] [--json F]``. The machine may be shared with other work: the load
average is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import evolve.program.codegen as codegen  # noqa: E402
import evolve.search.execution.pool as pool  # noqa: E402
import evolve.search.judge as judge  # noqa: E402
import evolve.search.loop as loop  # noqa: E402
from evolve.archive import Archive  # noqa: E402
from evolve.archive.digest import archive_digest  # noqa: E402
from evolve.config.schema import Config, apply_dict, validate  # noqa: E402


class Phases:
    """Exclusive wall time per phase (a nested timed call is not counted twice)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.total: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._stack: list[list[float]] = []

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*a: Any, **k: Any) -> Any:
            if not self.enabled:
                return fn(*a, **k)
            self._stack.append([time.perf_counter(), 0.0])
            try:
                return fn(*a, **k)
            finally:
                t0, inner = self._stack.pop()
                dt = time.perf_counter() - t0
                self.total[name] += dt - inner
                self.calls[name] += 1
                if self._stack:
                    self._stack[-1][1] += dt
        return timed


def config(args: argparse.Namespace, executor: str, workers: int, path: str) -> Config:
    cfg = Config()
    apply_dict(cfg, {"run": {"seed": args.seed, "generations": args.generations,
                             "workers": workers, "executor": executor, "progress": False,
                             "archive": path, "data": args.data or ""},
                     "search": {"children": args.children},
                     "fit": {"polish_evals": 0}}, "bench")
    return validate(cfg, "bench")


def measure(args: argparse.Namespace, executor: str, workers: int) -> dict[str, Any]:
    """One search; the timings of generations 1..N and (workers 1, local) the phases."""
    ph = Phases()  # the driver's view
    cand = Phases(enabled=False)  # a candidate's phases: on during the maps of g >= 1
    saved = (pool.fingerprint, judge.fit_program, judge.score_program, codegen.compile_program,
             loop.maybe_refresh)
    in_process = executor == "local" and workers == 1
    if in_process:  # the candidate's phases run in this process: time them
        pool.fingerprint = cand.wrap("fingerprint", pool.fingerprint)
        judge.fit_program = cand.wrap("teacher-forced fit", judge.fit_program)
        judge.score_program = cand.wrap("closed-loop judging", judge.score_program)
        codegen.compile_program = cand.wrap("compile", codegen.compile_program)
    loop.maybe_refresh = ph.wrap("refresh", loop.maybe_refresh)
    marks: dict[int, float] = {}
    n_jobs = defaultdict(int)
    maps: list[tuple[int, int, float]] = []  # (generation, jobs, seconds) of every map
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config(args, executor, workers, os.path.join(tmp, "a.db"))
        try:
            with Archive(cfg.run.archive) as archive:
                t_init = time.perf_counter()
                search = loop.Search(cfg, archive, log=lambda _m: None)
                t_ready = time.perf_counter()
                gen = search._generation

                def generation(g: int) -> list[Any]:
                    marks.setdefault(g, time.perf_counter())
                    ph.total["_g"] = g
                    return gen(g)

                search._generation = generation  # type: ignore[method-assign]
                pmap = search.pool.map

                def counted(jobs: Any, digits: Any = None) -> Any:
                    g = int(ph.total["_g"])
                    n_jobs[g] += len(jobs)
                    cand.enabled = g >= 1
                    t0 = time.perf_counter()
                    try:
                        return ph.wrap("map" if g else "map0", pmap)(jobs, digits)
                    finally:
                        cand.enabled = False
                        maps.append((g, len(jobs), round(time.perf_counter() - t0, 3)))

                search.pool.map = counted  # type: ignore[method-assign]
                archive.commit_generation = ph.wrap(  # type: ignore[method-assign]
                    "archive write", archive.commit_generation)
                summary = search.run()
                t_end = time.perf_counter()
                digest = archive_digest(archive)
        finally:
            (pool.fingerprint, judge.fit_program, judge.score_program,
             codegen.compile_program, loop.maybe_refresh) = saved
    n = sum(v for g, v in n_jobs.items() if g >= 1)
    wall = t_end - marks[1]
    out = {"executor": executor, "workers": workers, "candidates": n, "wall_s": wall,
           "per_s": n / wall, "startup_s": t_ready - t_init, "gen0_s": marks[1] - marks[0],
           "map_s": ph.total["map"], "driver_s": wall - ph.total["map"],
           "refresh_s": ph.total["refresh"], "status": summary.status, "digest": digest,
           "archive_write_s": ph.total["archive write"], "maps": maps}
    if in_process:
        out["phases_per_candidate_ms"] = {
            k: 1e3 * cand.total[k] / n
            for k in ("compile", "fingerprint", "teacher-forced fit", "closed-loop judging")}
        out["phases_per_candidate_ms"]["archive write"] = 1e3 * ph.total["archive write"] / n
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--generations", type=int, default=8)
    ap.add_argument("--children", type=int, default=8)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--executors", nargs="+", default=["local", "ray"])
    ap.add_argument("--data", default=None)
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # EXECUTOR:WORKERS
    args = ap.parse_args()
    if args.one:  # one configuration, in a fresh process: prints its figures as JSON
        executor, w = args.one.split(":")
        print("RESULT " + json.dumps(measure(args, executor, int(w))), flush=True)
        return 0
    print(f"load average before: {os.getloadavg()}  ({os.cpu_count()} cores)", flush=True)
    results = []
    for executor in args.executors:
        for w in args.workers:  # each in its own process: no state carried between them
            cmd = [sys.executable, __file__, "--one", f"{executor}:{w}", "--generations",
                   str(args.generations), "--children", str(args.children), "--seed",
                   str(args.seed), *(["--data", args.data] if args.data else [])]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            line = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
            if done.returncode != 0 or not line:
                print(f"{executor} workers {w}: failed\n{done.stderr[-3000:]}", flush=True)
                return 1
            r = json.loads(line[-1][len("RESULT "):])
            results.append(r)
            print(f"{executor:5s} workers {w}: {r['candidates']} candidates in "
                  f"{r['wall_s']:.1f} s = {r['per_s']:.2f}/s (executor {r['map_s']:.1f} s, "
                  f"driver {r['driver_s']:.1f} s of which refresh {r['refresh_s']:.1f} s, "
                  f"archive {r['archive_write_s']:.2f} s); generation 0 {r['gen0_s']:.1f} s, "
                  f"start-up {r['startup_s']:.1f} s; digest {r['digest'][:12]}", flush=True)
    base = {(r["executor"], r["workers"]): r["per_s"] for r in results}
    print("\n| executor | workers | candidates/s | vs local workers 1 |\n|---|---|---|---|")
    for r in results:
        ref = base.get(("local", 1))
        rel = f"{r['per_s'] / ref:.2f}x" if ref else "-"
        print(f"| {r['executor']} | {r['workers']} | {r['per_s']:.2f} | {rel} |")
    for r in results:
        if "phases_per_candidate_ms" in r:
            print("\nper candidate (local, workers 1), ms:")
            for k, v in r["phases_per_candidate_ms"].items():
                print(f"  {k:22s} {v:8.1f}")
            n = r["candidates"]
            rest = r["driver_s"] - r["refresh_s"] - r["archive_write_s"]
            print(f"  {'corpus refresh':22s} {1e3 * r['refresh_s'] / n:8.1f}  (driver: "
                  "re-simulate; workers: re-score the elites)")
            print(f"  {'driver, the rest':22s} {1e3 * rest / n:8.1f}  (selection, operator, "
                  "screening, recording)")
    digests = {r["digest"] for r in results}
    print(f"\nsame archive in every configuration: {len(digests) == 1}")
    print(f"load average after: {os.getloadavg()}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, sort_keys=True))
    return 0 if len(digests) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
