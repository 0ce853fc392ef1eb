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
import math
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
    on_all_cores,
    output_dir,
    rule_program,
    seed_arg,
    simulator_options,
    write_file,
)

if TYPE_CHECKING:
    from evaluator.api import SimResult

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
    from evaluator.api import Evaluator, data_dir, estimate_kv_pool, unseen_scenarios
    from evolve.fitting import const_map
    from evolve.fitting.calibrate import carry
    from evolve.program.codegen import step_model

    config = Path(args.model_config)
    name = args.name or (config if config.is_dir() else config.parent).resolve().name
    if not name.strip() or name in (".", "..") or "/" in name or "\\" in name:
        raise UserError(f"--name {name!r}: a model name, not a path (it names the default "
                        "output directory runs/calibrate-NAME)")
    out = _writable_out(Path(args.out or Path("runs") / f"calibrate-{name}"))
    program, _groups, label = load_target(args)
    ev = Evaluator.from_data(args.data, **simulator_options(args))
    if name in {s.model for s in ev.scenarios}:
        raise UserError(f"--name {name}: a measured model of the data; its constants are "
                        "fitted on its own runs (evolve fit / evolve run); pass another name")
    sources = [s for s in ev.scenarios if s.split != "test"]  # the test split is never read
    kv_blocks, budget = args.kv_blocks, None
    if kv_blocks is None:
        extra = {} if share is None else {"utilization": share}
        budget = estimate_kv_pool(config, tp=args.tp, block_size=sources[0].server.block_size,
                                  data=data_dir(args.data), **extra)
        kv_blocks = budget.blocks
        print(f"KV blocks: {kv_blocks} estimated ({budget.describe()}); vLLM's log "
              "'# GPU blocks: N' is exact: pass it as --kv-blocks", file=sys.stderr)
    new = unseen_scenarios(sources, config, tp=args.tp, kv_blocks=kv_blocks, name=name,
                           data=data_dir(args.data))
    fit_on = [s.name for s in sources if s.workload != "reasoning"]
    calib_on = [s.name for s in new if s.workload != "reasoning"]
    if not fit_on or not calib_on:
        raise UserError(f"{data_dir(args.data)}: no measured normal (non-reasoning) runs "
                        "outside the test split to fit the rule and calibrate on")
    out = output_dir(out, "--out")  # created once the input is known to be good
    ev = on_all_cores(Evaluator([*ev.scenarios, *new]))
    print(f"calibrating {label} for {name} (TP {args.tp}, {kv_blocks} KV blocks) on "
          f"{len(calib_on)} workloads; the rule fitted on {len(fit_on)} measured runs",
          file=sys.stderr)
    reference = rule_program()
    record = carry(program, reference, ev, fit_on, calib_on, seed=args.seed,
                   max_evals=args.max_evals, prior=args.prior, pool=FitSection.pool_strength)
    if not math.isfinite(record["match_loss"]):  # once written, with NaN predictions
        raise UserError(f"{args.program}: no constants in its bounds price {name}'s "
                        f"batches (match loss to {RULE} inf: a time not finite, or physics "
                        "broken, at every candidate); nothing written")
    names = [s.name for s in new]
    sims = ev.simulate(step_model(program),
                       const_map(program, {"global": record["calibrated"]}, new, "global"),
                       names=names)
    ref = ev.simulate(step_model(reference),
                      const_map(reference, {"global": record["reference"]}, new, "global"),
                      names=names)
    predictions = {s.workload: {"program": _pred(sims[s.name]), RULE: _pred(ref[s.name]),
                                "workload_of": s.meta["workload_of"]} for s in new}
    doc = {"program": program.id, "model": name, "model_config": str(config), "tp": args.tp,
           "kv_blocks": kv_blocks, "kv_blocks_estimate": budget and budget.as_dict(),
           "seed": args.seed, "max_evals": args.max_evals,
           **record, "predictions": predictions}
    for fname, text in (("program.py", program.source),
                        ("constants.json", json.dumps({"global": record["calibrated"]},
                                                      indent=1, sort_keys=True)),
                        ("calibration.json", json.dumps(doc, indent=1, sort_keys=True))):
        write_file(out / fname, text if text.endswith("\n") else text + "\n", "--out")
    if args.json:
        json.dump(doc, sys.stdout, indent=1, sort_keys=True)
        print()
        return 0
    rows = [[w, *(_cells(p["program"])), *(_cells(p[RULE]))]
            for w, p in sorted(predictions.items())]
    print(f"{label} for {name}, closed loop on the data's workloads (predictions; no "
          f"measurement of {name} exists); match loss {record['match_loss']:.4f}")
    print(table(["workload", "E2E s", "TTFT s", "decode ms", "failed",
                 "layered E2E s", "TTFT s", "decode ms", "failed"], rows,
                right=tuple(range(1, 9))))
    loop = ev.scenarios[0].loop
    print(f"wrote {out}/program.py, constants.json, calibration.json; for BLIS:\n"
          f"  evolve export-go {out}/program.py --constants {out}/constants.json "
          f"--fitted-loop {loop} --no-refit -o latency_model.go")
    if loop != "blis":  # a refit against the measured models would undo the calibration
        print("note: calibrated in vLLM's engine loop; for stock BLIS calibrate with "
              "--loop blis (docs/blis.md, 'The engine loop')")
    return 0


def _writable_out(out: Path) -> Path:
    """``--out`` checked before the data is loaded, without creating it (a refused
    calibration leaves no directory behind): the nearest existing ancestor must be a
    directory one can write in."""
    import tempfile

    base = out
    while not base.exists() and base.parent != base:
        base = base.parent
    if not base.is_dir():
        where = "" if base == out else f"{base} "
        raise UserError(f"--out {out}: {where}exists and is not a directory")
    try:
        with tempfile.TemporaryFile(dir=base):
            pass
    except OSError as exc:
        raise UserError(f"--out {out}: cannot write there ({exc.strerror})") from None
    return out


def _pred(res: SimResult) -> dict[str, float]:
    """The closed-loop aggregates a capacity planner reads (seconds; failures a count)."""
    pred = res.metrics.pred
    return {k: float(pred.get(k, math.nan)) for k in ("e2e_mean", "ttft_mean", "itl_mean",
                                                       "e2e_p99", "failures")}


def _cells(p: dict[str, float]) -> list[str]:
    return [f"{p['e2e_mean']:.2f}", f"{p['ttft_mean']:.2f}", f"{1e3 * p['itl_mean']:.1f}",
            f"{p['failures']:.0f}"]
