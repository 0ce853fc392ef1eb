"""``evolve calibrate PROGRAM --model-config DIR --tp N [--kv-blocks N]``: a program's
constants for a model nobody measured, and what it predicts there.

docs/selection.md's rule, for any program (the pick of a search, a seed, a file): the
`layered` seed is fitted with one global set on the measured normal runs (train and
validate splits), the data's workloads are re-served by the new model
(``evaluator.ingest.unseen``: its config.json, TP and KV pool; no measurement), and the program's
constants are calibrated to `layered` on those batches (:mod:`evolve.fitting.calibrate`).
`evolve generalize ID --mode lomo` measures exactly this on the models that were
measured (README: 12 of 12 held-out normal runs within 10 % for the seed-7 pick).

Writes ``--out`` (default ``runs/calibrate-NAME``): ``program.py`` (the program's source),
``constants.json`` (one global set, the ``--constants`` format of `evolve export-go`,
`fit` and `generalize`) and ``calibration.json`` (the reference's set, the match loss and
the closed-loop predictions per workload), then prints the predictions and the export
command. Without ``--kv-blocks`` the KV pool is the one vLLM would allocate
(:mod:`evaluator.ingest.kv_pool`: its memory budget on the data's GPU; it reproduces the four
measured servers' pools to 0.2 %), and ``calibration.json`` records how it was estimated.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from evolve.cli.output import table
from evolve.config.schema import FitSection
from evolve.errors import UserError
from evolve.workflows.targets import (
    RULE,
    add_simulator_flags,
    check_flags,
    load_target,
    not_blank,
    seed_arg,
    simulator_options,
)

if TYPE_CHECKING:
    pass

HELP = "constants for a model nobody measured: a program calibrated to the layered rule"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("program", help="archived program id (or prefix), a program file "
                        "or a seed name")
    parser.add_argument("--model-config", required=True, metavar="PATH",
                        help="the new model's Hugging Face config.json (or its directory)")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel GPUs (default 1)")
    parser.add_argument("--kv-blocks", type=int, metavar="N",
                        help="KV-cache blocks of the server (vLLM logs '# GPU blocks: N'); "
                        "default: estimated from vLLM's memory budget "
                        "(evaluator/ingest/kv_pool.py)")
    parser.add_argument("--gpu-memory-utilization", type=float, metavar="F",
                        help="vLLM's share of GPU memory, for the estimate (default: 0.9, "
                        "vLLM's)")
    parser.add_argument("--name", help="model name for the constants (default: the config's "
                        "directory name)")
    parser.add_argument("--archive", default="archive.db", help="archive path")
    parser.add_argument("--run", type=int, help="archive run whose program to take")
    parser.set_defaults(constants=None)  # the calibration starts from declared values
    parser.add_argument("--data", help="data directory (default: $EVOLVE_DATA or ../shared/data)")
    add_simulator_flags(parser)
    parser.add_argument("--seed", type=seed_arg, default=7, help="fitting seed")
    parser.add_argument("--max-evals", type=int, default=3000,
                        help="teacher-forced evaluations of the rule's fit (default: "
                        "%(default)s, as its LOMO)")
    parser.add_argument("--prior", type=float, default=FitSection.prior_strength,
                        metavar="S", help="the rule's pull towards its declared values "
                        "(default: %(default)s)")
    parser.add_argument("--out", help="output directory (default: runs/calibrate-NAME)")
    parser.add_argument("--json", action="store_true", help="print calibration.json")


def run(args: argparse.Namespace) -> int:
    check_flags(args, at_least={"max_evals": 1}, nonnegative=("prior",))
    if args.tp < 1:  # the server's flags are checked here too, before the data loads
        raise UserError(f"--tp {args.tp}: must be a positive number of GPUs")
    share = args.gpu_memory_utilization
    if share is not None and not 0.0 < share <= 1.0:
        raise UserError(f"--gpu-memory-utilization {share}: must be in (0, 1] (vLLM's share "
                        "of GPU memory; 0.9 is its default)")
    if args.kv_blocks is not None and args.kv_blocks < 1:
        raise UserError(f"--kv-blocks {args.kv_blocks}: must be a positive number of blocks")
    # a pool no server has (1e21 once overflowed in the simulator: an internal error)
    if args.kv_blocks is not None and args.kv_blocks >= 2**31:
        raise UserError(f"--kv-blocks {args.kv_blocks}: out of range, must be below 2^31 "
                        "(vLLM logs '# GPU blocks: N')")
    if args.kv_blocks is not None and args.gpu_memory_utilization is not None:
        raise UserError("--gpu-memory-utilization: only sizes an estimated KV pool; "
                        "--kv-blocks gives the pool itself, pass one of the two")
    not_blank(args.model_config, "--model-config", "the config.json")
    not_blank(args.name, "--name", "the model")
    not_blank(args.out, "--out", "the output directory")
    from evolve.workflows.calibrate import CalibrateOptions, calibrate, writable_out

    config = Path(args.model_config)
    name = args.name or (config if config.is_dir() else config.parent).resolve().name
    if not name.strip() or name in (".", "..") or "/" in name or "\\" in name:
        raise UserError(f"--name {name!r}: a model name, not a path (it names the default "
                        "output directory runs/calibrate-NAME)")
    out = writable_out(Path(args.out or Path("runs") / f"calibrate-{name}"))
    program, _groups, label = load_target(args)
    opts = CalibrateOptions(args.program, name, config, args.tp, args.kv_blocks, share,
                            args.data, dict(simulator_options(args)), args.seed,
                            args.max_evals, args.prior, out)
    cal = calibrate(program, label, opts, lambda msg: print(msg, file=sys.stderr))
    doc, predictions, out = cal.doc, cal.predictions, cal.out
    if args.json:
        json.dump(doc, sys.stdout, indent=1, sort_keys=True)
        print()
        return 0
    rows = [[w, *(_cells(p["program"])), *(_cells(p[RULE]))]
            for w, p in sorted(predictions.items())]
    print(f"{label} for {name}, closed loop on the data's workloads (predictions; no "
          f"measurement of {name} exists); match loss {cal.match_loss:.4f}")
    print(table(["workload", "E2E s", "TTFT s", "decode ms", "failed",
                 "layered E2E s", "TTFT s", "decode ms", "failed"], rows,
                right=tuple(range(1, 9))))
    loop = cal.loop
    print(f"wrote {out}/program.py, constants.json, calibration.json; for BLIS:\n"
          f"  evolve export-go {out}/program.py --constants {out}/constants.json "
          f"--fitted-loop {loop} --no-refit -o latency_model.go")
    if loop != "blis":  # a refit against the measured models would undo the calibration
        print("note: calibrated in vLLM's engine loop; the exported model carries vLLM's "
              "async scheduling into stock BLIS (docs/blis.md, 'The engine loop')")
    return 0


def _cells(p: dict[str, float]) -> list[str]:
    return [f"{p['e2e_mean']:.2f}", f"{p['ttft_mean']:.2f}", f"{1e3 * p['itl_mean']:.1f}",
            f"{p['failures']:.0f}"]
