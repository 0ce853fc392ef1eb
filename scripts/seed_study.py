"""Independent runs of one configuration: the picked program's closed-loop errors per seed.

Usage: python scripts/seed_study.py --seeds 1 2 3 4 5 [--generations 100] [--config F]
       [--out runs/study]. Each seed runs ``evolve run``, then ``evolve validate`` on the
frontier pick; the summary gives, per run and metric, the median and the spread (min-max)
over seeds, so a result is never a lucky single run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np


def sh(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "evolve.cli", *args], check=True,
                          capture_output=True, text=True).stdout


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    ap.add_argument("--generations", type=int, default=100)
    ap.add_argument("--config", default=None)
    ap.add_argument("--out", default="runs/study")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for seed in args.seeds:
        db = out / f"seed-{seed}.db"
        res_path = out / f"seed-{seed}.json"
        if not res_path.exists():
            if db.exists():
                db.unlink()
            extra = ["--config", args.config] if args.config else []
            sh("run", *extra, "--generations", str(args.generations), "--seed", str(seed),
               "--archive", str(db))
            front = json.loads(sh("frontier", "--archive", str(db), "--json"))
            pick = next(m["id"] for m in front["members"] if m.get("picked"))
            val = json.loads(sh("validate", pick, "--archive", str(db), "--no-plots", "--json"))
            res_path.write_text(json.dumps(val, indent=1, sort_keys=True))
        results[seed] = json.loads(res_path.read_text())
        print(f"seed {seed}: picked {results[seed]['program'][:12]}", flush=True)
    names = sorted(next(iter(results.values()))["runs"])
    keys = ("e2e_mean", "ttft_mean", "itl_mean", "e2e_p99")
    print(f"\n{'run':35s} " + " ".join(f"{k:>22s}" for k in keys))
    for n in names:
        cells = []
        for k in keys:
            v = np.array([100 * r["runs"][n]["ape"].get(k, np.inf) for r in results.values()])
            cells.append(f"{np.median(v):6.1f}% [{v.min():5.1f},{v.max():6.1f}]")
        print(f"{n[16:50]:35s} " + " ".join(f"{c:>22s}" for c in cells))
    summary = {n: {k: [r["runs"][n]["ape"].get(k) for r in results.values()] for k in keys}
               for n in names}
    (out / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
