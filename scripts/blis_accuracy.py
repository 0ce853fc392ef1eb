#!/usr/bin/env python3
"""Accuracy inside real BLIS: an exported program replayed on every measured run.

Why: what a BLIS user gets is the exported Go model running in BLIS's own loop, and that
is the accuracy that counts. This takes docs/blis.md's path end to end, as a user would:

1. ``evolve export-go ARGS -o OUT/evolved.go --save-constants OUT/constants.json`` (ARGS
   after ``--``: a program id with ``--archive``, or a file with ``--constants``; by
   default export-go keeps constants fitted in vLLM's loop and the model carries vLLM's
   async scheduling, ``--bridge refit`` refits them for BLIS's loop instead);
2. ``scripts/build_blis.py``: BLIS at the pinned commit with the model in it;
3. per run, ``evolve export-trace RUN`` and the ``blis replay`` command it prints;
4. BLIS's per-request results against the measured runs (mean E2E and TTFT of the
   completed requests, failures = requests BLIS did not complete), and against evolve's
   replica (the same constants): ``evolve validate ... --loop vllm --step-noise 0`` when
   the model carries async scheduling (its Go header says so), else ``--loop blis``.

    python scripts/blis_accuracy.py --out runs/blis -- bda4b959 --archive runs/s7.db
    python scripts/blis_accuracy.py --out runs/blis --runs codegen --json -- layered \\
        --constants l.json --fitted-loop blis

``--lomo``: the same for a model nobody measured, model by model as ``evolve generalize
--mode lomo`` holds it out: the arguments after ``--`` go to ``evolve generalize PROGRAM
--mode lomo --loop vllm`` (e.g. ``layered --polish-evals 0``), each fold's constants are
exported as fitted (the model carrying async scheduling), built into BLIS and replayed on
the runs of the model the fold never saw (``--bridge refit``: folds fitted in BLIS's loop).

``--async-scheduling``: the third route of docs/blis.md ("BLIS with async scheduling of its own"):
BLIS built with ``build_blis.py --async-scheduling``, the program exported for vLLM's loop
(``--loop vllm`` is added to export-go's arguments), and the replica is ``evolve validate
--loop vllm --step-noise 0`` (BLIS's ``StepTime`` is deterministic).

Prints a table (``--json``: the figures) and writes them to ``OUT/accuracy.json``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
EVOLVE = [sys.executable, "-c", "import sys; from evolve.cli.main import main; sys.exit(main())"]


def _run(argv: list[str], what: str, cwd: Path | None = None) -> str:
    """Run ``argv``; its stdout, or exit naming ``what`` failed with its stderr's tail."""
    res = subprocess.run(argv, capture_output=True, text=True, cwd=cwd)
    if res.returncode != 0:
        sys.exit(f"blis_accuracy: {what} failed (exit {res.returncode}):\n"
                 f"{res.stderr[-3000:]}{res.stdout[-1000:]}")
    return res.stdout


def export(out: Path, export_args: list[str], data: str | None) -> tuple[Path, Path, Path]:
    """The Go file, its constants and the program's source (for ``evolve validate``)."""
    go, consts, prog = out / "evolved.go", out / "constants.json", out / "program.py"
    data_args = ["--data", data] if data else []
    print(f"exporting: evolve export-go {shlex.join(export_args)}", file=sys.stderr)
    res = subprocess.run([*EVOLVE, "export-go", *export_args, *data_args, "-o", str(go),
                          "--save-constants", str(consts)], text=True, stderr=subprocess.PIPE)
    sys.stderr.write(res.stderr)
    if res.returncode != 0:
        sys.exit(f"blis_accuracy: export-go failed (exit {res.returncode})")
    text = go.read_text()
    start = text.index("// Program source:") + len("// Program source:")
    end = text.index("\npackage latency")
    # the header holds the source as "// \t<line>" (go.py's _header; tabs as 4 spaces)
    src = [ln[4:] if ln.startswith("// \t") else "" for ln in text[start:end].splitlines()]
    prog.write_text("\n".join(src).strip("\n") + "\n")
    return go, consts, prog


def build(go: Path, out: Path, async_scheduling: bool = False) -> Path:
    blis = out / "bin" / "blis"
    blis.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    more = ["--async-scheduling"] if async_scheduling else []
    _run([sys.executable, str(ROOT / "scripts" / "build_blis.py"), "--model", str(go),
          "--out", str(blis), *more], "build_blis.py")
    print(f"built {blis} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return blis


def replay(name: str, n_req: int, blis: Path, out: Path, data: str | None
           ) -> dict[str, float]:
    """BLIS's figures on one run: mean E2E / TTFT (s) of completed requests, failures."""
    prefix = out / "traces" / name
    prefix.parent.mkdir(parents=True, exist_ok=True)
    data_args = ["--data", data] if data else []
    cmd = _run([*EVOLVE, "export-trace", name, *data_args, "--out", str(prefix), "--blis",
                str(blis), "--blis-dir", str(blis.parent)], f"export-trace {name}")
    t0 = time.perf_counter()
    _run(shlex.split(cmd.strip().splitlines()[-1]), f"blis replay {name}", cwd=out)
    res = json.loads(Path(f"{prefix}.results.json").read_text())
    e2e = [r["e2e_us"] for r in res]
    ttft = [r["ttft_us"] for r in res]
    return {"e2e_mean": float(np.mean(e2e)) / 1e6 if e2e else float("nan"),
            "ttft_mean": float(np.mean(ttft)) / 1e6 if ttft else float("nan"),
            "completed": len(res), "failures": float(n_req - len(res)),
            "replay_s": time.perf_counter() - t0}


def replica(prog: Path, consts: Path, data: str | None, names: list[str],
            async_scheduling: bool = False) -> dict:
    """``evolve validate --loop blis`` on the same constants: evolve's replica of BLIS
    (``async_scheduling``: ``--loop vllm --step-noise 0``, of the patched BLIS or of a
    model that carries async scheduling)."""
    data_args = ["--data", data] if data else []
    loop = ["vllm", "--step-noise", "0"] if async_scheduling else ["blis"]
    out = _run([*EVOLVE, "validate", str(prog), "--constants", str(consts), "--loop", *loop,
                "--json", "--no-plots", *data_args], f"evolve validate --loop {loop[0]}")
    runs = json.loads(out)["runs"]
    return {n: runs[n] for n in names}


def lomo_folds(out: Path, gen_args: list[str], data: str | None, loop: str = "blis"
               ) -> tuple[str, dict]:
    """``evolve generalize ... --mode lomo --loop LOOP --json``: (program, {model: groups})."""
    data_args = ["--data", data] if data else []
    print(f"folds: evolve generalize {shlex.join(gen_args)} --mode lomo --loop {loop}",
          file=sys.stderr)
    doc = json.loads(_run([*EVOLVE, "generalize", *gen_args, "--mode", "lomo", "--loop",
                           loop, "--json", *data_args], "evolve generalize"))
    (out / "lomo.json").write_text(json.dumps(doc, indent=1, sort_keys=True))
    return gen_args[0], doc["constants"]


def err(sim: float, meas: float) -> float:
    return sim / meas - 1.0 if meas else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs/blis"), help="work folder")
    ap.add_argument("--data", help="data directory (default: $EVOLVE_DATA or ../shared/data)")
    ap.add_argument("--runs", nargs="*", default=[], metavar="PART",
                    help="only runs whose name contains one of these (default: all)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--lomo", action="store_true",
                    help="leave one model out: the arguments after -- are evolve generalize's")
    ap.add_argument("--async-scheduling", action="store_true",
                    help="BLIS with vLLM's async step formation and the program's vLLM-loop "
                         "constants (docs/blis.md)")
    ap.add_argument("--bridge", choices=("async", "refit"), default="async",
                    help="stock BLIS: the model carries async scheduling (default) or "
                         "constants refitted for BLIS's loop (export-go --bridge)")
    ap.add_argument("export_args", nargs=argparse.REMAINDER,
                    help="after --: the arguments of `evolve export-go` (program, --archive...)")
    args = ap.parse_args()
    export_args = args.export_args[1:] if args.export_args[:1] == ["--"] else args.export_args
    if not export_args:
        ap.error("give the program to export after --, e.g. -- bda4b959 --archive a.db")
    if args.async_scheduling and not args.lomo and "--loop" not in export_args:
        export_args = [*export_args, "--loop", "vllm"]
    if args.bridge == "refit" and not args.lomo and "--bridge" not in export_args:
        export_args = [*export_args, "--bridge", "refit"]
    from evaluator.api import load_scenarios
    from evolve.workflows.export_go import CARRIED

    args.out = args.out.resolve()  # the replays run in it: every path absolute
    args.out.mkdir(parents=True, exist_ok=True)
    scenarios = load_scenarios(args.data)
    chosen = [s for s in scenarios if not args.runs or any(p in s.name for p in args.runs)]
    if args.lomo:
        loop = "blis" if args.bridge == "refit" and not args.async_scheduling else "vllm"
        spec, folds = lomo_folds(args.out, export_args, args.data, loop)
        target = "vllm" if args.async_scheduling else "blis"
        jobs = []
        for model, groups in sorted(folds.items()):
            fold = args.out / f"fold-{model}"
            fold.mkdir(exist_ok=True)
            (fold / "fold.json").write_text(json.dumps(groups))
            scope = "global" if list(groups) == ["global"] else "pooled"
            jobs.append((fold, [spec, "--constants", str(fold / "fold.json"), "--scope", scope,
                                "--fitted-loop", loop, "--loop", target, "--no-refit"],
                         [s for s in chosen if s.model == model]))
    else:
        jobs = [(args.out, export_args, chosen)]
    figures = {}
    for work, ex_args, runs in jobs:
        go, consts, prog = export(work, ex_args, args.data)
        blis = build(go, work, args.async_scheduling)
        carried = CARRIED in go.read_text().split("package latency")[0]  # the Go header
        ours = replica(prog, consts, args.data, [s.name for s in runs],
                       args.async_scheduling or carried)
        figures.update(compare(runs, blis, work, args.data, ours))
    (args.out / "accuracy.json").write_text(json.dumps(figures, indent=1, sort_keys=True))
    if args.json:
        print(json.dumps(figures, indent=1, sort_keys=True))
        return
    print_table(figures)


def compare(runs: list, blis: Path, work: Path, data: str | None, ours: dict) -> dict:
    """Per run: BLIS against the measurements and against evolve's replica."""
    figures = {}
    for sc in runs:
        b = replay(sc.name, sc.n_requests, blis, work, data)
        meas = sc.measured.summary
        m = ours[sc.name]
        figures[sc.name] = {
            "split": sc.split, "measured": {k: meas.get(k) for k in ("e2e_mean", "ttft_mean",
                                                                     "failures")},
            "blis": b, "replica": {k: m["pred"].get(k) for k in ("e2e_mean", "ttft_mean",
                                                                  "failures")},
            "blis_err": {k: err(b[k], meas[k]) for k in ("e2e_mean", "ttft_mean")},
            "replica_vs_blis": {k: err(m["pred"][k], b[k]) if k in m["pred"] else None
                                for k in ("e2e_mean", "ttft_mean")}}
        f = figures[sc.name]
        print(f"  {sc.name}: BLIS E2E {100 * f['blis_err']['e2e_mean']:+.1f} %, TTFT "
              f"{100 * f['blis_err']['ttft_mean']:+.1f} % ({b['replay_s']:.0f} s)",
              file=sys.stderr)
    return figures


def print_table(figures: dict) -> None:
    print(f"{'run':34} {'split':8} {'E2E err':>8} {'TTFT err':>9} {'fail meas':>9} "
          f"{'fail BLIS':>9} {'replica-BLIS E2E':>16} {'TTFT':>6}")
    for name, f in figures.items():
        rv = f["replica_vs_blis"]
        print(f"{name[16:]:34} {f['split']:8} {100 * f['blis_err']['e2e_mean']:+7.1f}% "
              f"{100 * f['blis_err']['ttft_mean']:+8.1f}% {f['measured']['failures']:9.0f} "
              f"{f['blis']['failures']:9.0f} {_pct(rv['e2e_mean']):>16} "
              f"{_pct(rv['ttft_mean']):>6}")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.2f}%"


if __name__ == "__main__":
    main()
