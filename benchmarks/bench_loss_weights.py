"""Benchmark: which percentile loss weights give picks that hold on the validate split.

Issue 58 put the steady p90/p99 TTFT and p99 E2E into the search loss with weights taken
from the measured spread of each statistic (docs/notes/2026-12-06-tails-and-overload.md);
this confirms (or not) those weights by search: for each weight set, a short offline
search per run seed (``--generations``, default 10), then ``evolve validate PICK --split
validate`` of its pick. Only validate-split runs are simulated: the test runs are never
read here. Printed per weight set and seed: the pick, and its APE on each validate run of
mean E2E, mean TTFT, steady p90 TTFT, steady p99 TTFT and steady p99 E2E; then, per
weight set, how many of those figures are within 10 % and their mean (each capped at 1,
as the loss caps percentiles), over seeds. Weight sets: ``--sets`` of
``p90:p99:e2e99`` (default ``0:0:0,0.5:0.25:0.5,1:0.5:1``). Run:
``.venv/bin/python benchmarks/bench_loss_weights.py --seeds 7,1,2``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from results import cli  # noqa: E402  (the public CLI, as the README's results use it)

FIGURES = ("e2e_mean", "ttft_mean", "ttft_p90_steady", "ttft_p99_steady", "e2e_p99_steady")


def weights_toml(spec: str) -> str:
    """``p90:p99:e2e99`` as the ``[loss]`` section of a run config."""
    try:
        p90, p99, e99 = (float(x) for x in spec.split(":"))
    except ValueError:
        raise SystemExit(f"--sets: {spec!r} is not p90:p99:e2e99 (three numbers)") from None
    return (f"[loss]\nttft_p90_steady = {p90}\nttft_p99_steady = {p99}\n"
            f"e2e_p99_steady = {e99}\n")


def pick_apes(archive: Path) -> tuple[str, dict[str, dict[str, float]]]:
    """The run's pick and its APEs on the validate runs (closed loop, the run's settings)."""
    members = json.loads(cli("frontier", "--archive", str(archive), "--json"))["members"]
    pick = next(m["id"] for m in members if m.get("picked"))
    out = json.loads(cli("validate", pick, "--archive", str(archive), "--split",
                            "validate", "--json", "--no-plots"))
    return pick, {name: {k: r["ape"][k] for k in FIGURES}
                  for name, r in sorted(out["runs"].items())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="7,1,2")
    ap.add_argument("--sets", default="0:0:0,0.5:0.25:0.5,1:0.5:1")
    ap.add_argument("--generations", type=int, default=10)
    ap.add_argument("--keep", help="keep the archives in this folder")
    args = ap.parse_args()
    os.chdir(ROOT)  # the data directory's default is relative to the checkout
    out_dir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-lw-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; offline, "
          f"{args.generations} generations; APEs on the validate split (%): "
          + ", ".join(FIGURES), flush=True)
    summary: dict[str, list[float]] = {}
    for spec in args.sets.split(","):
        cfg = out_dir / f"w-{spec.replace(':', '_')}.toml"
        cfg.write_text(weights_toml(spec))
        for seed in (int(s) for s in args.seeds.split(",")):
            archive = out_dir / f"w-{spec.replace(':', '_')}-seed{seed}.db"
            archive.unlink(missing_ok=True)
            t0 = time.monotonic()
            cli("run", "--generations", str(args.generations), "--seed", str(seed),
                   "--config", str(cfg), "--archive", str(archive), "--no-progress")
            pick, apes = pick_apes(archive)
            print(f"weights {spec:<14} seed {seed:<3} pick {pick[:12]}  "
                  f"({(time.monotonic() - t0) / 60:.1f} min)", flush=True)
            for name, ape in apes.items():
                print(f"    {name[16:]:<44}" + "".join(f"{100 * ape[k]:>8.1f}" for k in FIGURES),
                      flush=True)
                summary.setdefault(spec, []).extend(min(ape[k], 1.0) for k in FIGURES)
    print(f"{'weights':<16}{'within 10 %':>12}{'mean APE %':>12}")
    for spec, apes in summary.items():
        print(f"{spec:<16}{sum(a <= 0.10 for a in apes):>7} of {len(apes):<3}"
              f"{100 * sum(apes) / len(apes):>12.1f}")
    print(f"archives in {out_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
