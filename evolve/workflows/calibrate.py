"""``evolve calibrate``'s work: a program's constants for a model nobody measured.

docs/selection.md's rule (see the command's docstring): the `layered` seed fitted on the
measured normal runs, the data's workloads re-served by the new model, the program's
constants calibrated to `layered` on those batches, then both simulated closed loop per
workload. :func:`calibrate` writes ``program.py``, ``constants.json`` and
``calibration.json`` into the output directory and returns a :class:`Calibration`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evolve.config.schema import FitSection
from evolve.errors import UserError
from evolve.program.language import Program
from evolve.workflows.targets import RULE, on_all_cores, output_dir, rule_program, write_file

if TYPE_CHECKING:
    from evaluator.api import SimResult


@dataclass
class CalibrateOptions:
    spec: str  # the program as the user named it
    name: str  # the new model's name
    config: Path  # its config.json (or the folder holding it)
    tp: int
    kv_blocks: int | None
    share: float | None  # --gpu-memory-utilization
    data: str | None
    simulator: dict[str, Any]
    seed: int
    max_evals: int
    prior: float
    out: Path


@dataclass
class Calibration:
    doc: dict[str, Any]  # calibration.json
    predictions: dict[str, dict[str, Any]]  # workload -> program / layered predictions
    match_loss: float
    kv_blocks: int
    out: Path
    loop: str


def calibrate(program: Program, label: str, opts: CalibrateOptions,
              say: Callable[[str], None]) -> Calibration:
    from evaluator.api import Evaluator, data_dir, estimate_kv_pool, unseen_scenarios
    from evolve.fitting import const_map
    from evolve.fitting.calibrate import carry
    from evolve.program.codegen import step_model

    name, config, share, out = opts.name, opts.config, opts.share, opts.out
    ev = Evaluator.from_data(opts.data, **opts.simulator)
    if name in {s.model for s in ev.scenarios}:
        raise UserError(f"--name {name}: a measured model of the data; its constants are "
                        "fitted on its own runs (evolve fit / evolve run); pass another name")
    sources = [s for s in ev.scenarios if s.split != "test"]  # the test split is never read
    kv_blocks, budget = opts.kv_blocks, None
    if kv_blocks is None:
        extra = {} if share is None else {"utilization": share}
        budget = estimate_kv_pool(config, tp=opts.tp, block_size=sources[0].server.block_size,
                                  data=data_dir(opts.data), **extra)
        kv_blocks = budget.blocks
        say(f"KV blocks: {kv_blocks} estimated ({budget.describe()}); vLLM's log "
            "'# GPU blocks: N' is exact: pass it as --kv-blocks")
    new = unseen_scenarios(sources, config, tp=opts.tp, kv_blocks=kv_blocks, name=name,
                           data=data_dir(opts.data))
    fit_on = [s.name for s in sources if s.workload != "reasoning"]
    calib_on = [s.name for s in new if s.workload != "reasoning"]
    if not fit_on or not calib_on:
        raise UserError(f"{data_dir(opts.data)}: no measured normal (non-reasoning) runs "
                        "outside the test split to fit the rule and calibrate on")
    out = output_dir(out, "--out")  # created once the input is known to be good
    ev = on_all_cores(Evaluator([*ev.scenarios, *new]))
    say(f"calibrating {label} for {name} (TP {opts.tp}, {kv_blocks} KV blocks) on "
        f"{len(calib_on)} workloads; the rule fitted on {len(fit_on)} measured runs")
    reference = rule_program()
    record = carry(program, reference, ev, fit_on, calib_on, seed=opts.seed,
                   max_evals=opts.max_evals, prior=opts.prior, pool=FitSection.pool_strength)
    if not math.isfinite(record["match_loss"]):  # once written, with NaN predictions
        raise UserError(f"{opts.spec}: no constants in its bounds price {name}'s "
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
    doc = {"program": program.id, "model": name, "model_config": str(config), "tp": opts.tp,
           "kv_blocks": kv_blocks, "kv_blocks_estimate": budget and budget.as_dict(),
           "seed": opts.seed, "max_evals": opts.max_evals,
           **record, "predictions": predictions}
    for fname, text in (("program.py", program.source),
                        ("constants.json", json.dumps({"global": record["calibrated"]},
                                                      indent=1, sort_keys=True)),
                        ("calibration.json", json.dumps(doc, indent=1, sort_keys=True))):
        write_file(out / fname, text if text.endswith("\n") else text + "\n", "--out")
    return Calibration(doc, predictions, float(record["match_loss"]), kv_blocks, out,
                       ev.scenarios[0].loop)


def writable_out(out: Path) -> Path:
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
