"""Wall time of the user's main job: ``evolve run --generations 100 --seed 7``.

Why a benchmark of its own: the target (issue 11: under 20 minutes on 2 cores, default
config, full bundled data) is about the whole search as a user runs it (seeds, fits,
physics probes, corpus refreshes, the final polish and pick), which no micro-benchmark
adds up to. It runs the public CLI into a temporary archive and prints the wall time, the
children fitted and the pick.

Why a reference workload before and after: on this 2-core VM the same search (same
archive, byte for byte) has taken 17.3 to 21.5 minutes, and its CPU time varied as much
(1,916 s and 2,192 s on one commit the same afternoon): the machine's speed moves, not the
work. A fixed closed-loop simulation (all runs, BLIS's trained physics, one thread, best of
three) is timed before and after, so a figure can be read against the speed it ran at.
The reference runs the simulator, so it reads the machine only between commits that leave
the simulator's speed alone: 27adfc7 made it 8-18 % faster on the same machine (2.14 and
2.51 s before, 1.97 and 2.07 s after, alternated).

Run: ``python benchmarks/bench_search.py [--generations 100] [--seed 7] [--workers 2]
[--transfer W]`` (``--transfer``: the opt-in search loss that prices transfer,
docs/selection.md; not part of the target's default config)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REFERENCE = (
    "import os, time\n"
    "from evaluator.api import Evaluator\n"
    "from evaluator.scoring.baselines import TRAINED_PHYSICS, trained_physics_consts\n"
    "ev = Evaluator.from_data(os.environ.get('EVOLVE_DATA'))\n"
    "consts = {s.name: trained_physics_consts(s) for s in ev.scenarios}\n"
    "ev.simulate(TRAINED_PHYSICS, consts, names=ev.names()[:1])\n"
    "best = float('inf')\n"
    "for _ in range(3):\n"
    "    t0 = time.perf_counter(); ev.simulate(TRAINED_PHYSICS, consts)\n"
    "    best = min(best, time.perf_counter() - t0)\n"
    "print(best)\n")


def reference_seconds() -> float:
    """The reference workload's time now (seconds; see the module docstring)."""
    out = subprocess.run([sys.executable, "-c", REFERENCE], capture_output=True, text=True,
                         check=True)
    return float(out.stdout.split()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--generations", type=int, default=100)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--target-min", type=float, default=20.0)
    ap.add_argument("--transfer", type=float, default=0.0, metavar="W")
    args = ap.parse_args()
    ref_before = reference_seconds()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        cmd = [sys.executable, "-m", "evolve.cli.main", "run", "--generations",
               str(args.generations), "--seed", str(args.seed), "--workers",
               str(args.workers), "--archive", str(db), "--no-progress",
               *(["--transfer", str(args.transfer)] if args.transfer > 0 else [])]
        t0 = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
        if out.returncode != 0:
            print(out.stderr[-2000:], file=sys.stderr)
            return 1
        runs = json.loads(subprocess.run(
            [sys.executable, "-m", "evolve.cli.main", "runs", "--archive", str(db), "--json"],
            capture_output=True, text=True, check=True).stdout)
    last = runs[-1]
    ref_after = reference_seconds()
    print(f"evolve run --generations {args.generations} --seed {args.seed} --workers "
          f"{args.workers}: {wall / 60:.1f} min wall (target < {args.target_min:g} min: "
          f"{'met' if wall / 60 < args.target_min else 'MISSED'})")
    print(f"  {last['programs']} programs archived, status {last['status']}, pick "
          f"{last['pick_id'][:12]}, best training loss {last['best_loss']:.4f}")
    print(f"  machine speed: reference workload {ref_before:.2f} s before, {ref_after:.2f} s "
          "after (closed loop, all runs, one thread; slower = the machine was slower)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
