"""``evolve fit SEED_OR_FILE``: fit a program's constants and show how it does on every run.

Steps: parse the program (a seed name from ``seeds/`` or a file path); simulate every
measured run closed loop at the program's initial constants to build the corpora; fit the
constants with CMA-ES on the *train* runs' fitting windows (teacher forced); print the
fitted constants and a per-run table, train / validate / test kept apart. The table is
teacher forced on the full corpora (batches fixed at the initial constants) unless
``--closed-loop`` re-simulates every run with the fitted constants (the official score).
``--polish-evals N`` then refines the constants closed loop (CMA-ES over simulations of
the training runs' stage slices, the search's polish): teacher forcing prices candidates
on batches formed at the initial constants, which biases the fit; on runs simulated from
a known program the polish recovers its constants to 0.1 % (tests/ingest).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from evolve.errors import UserError
from evolve.program.codegen import step_model
from evolve.workflows.targets import (
    SEEDS_DIR,
    add_simulator_flags,
    available_seeds,
    check_flags,
    not_blank,
    note_roofline_kernels,
    on_all_cores,
    output_file,
    program_file,
    seed_arg,
    simulator_options,
    write_file,
)

HELP = "fit a program's constants and print its per-run table"
SPLIT_ORDER = ("train", "validate", "test")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from evolve.fitting import DEFAULT_MAX_EVALS, DEFAULT_RESTARTS, SCOPES

    parser.add_argument("program", metavar="SEED_OR_FILE",
                        help=f"a seed name ({', '.join(available_seeds())}) or a program file")
    parser.add_argument("--scope", choices=SCOPES, default="global",
                        help="which runs share one constant vector (default: global)")
    parser.add_argument("--seed", type=seed_arg, default=7, help="fitting seed (default: 7)")
    parser.add_argument("--data", metavar="DIR",
                        help="data directory (default: $EVOLVE_DATA or ../shared/data)")
    add_simulator_flags(parser)
    parser.add_argument("--max-evals", type=int, default=DEFAULT_MAX_EVALS, metavar="N",
                        help=f"loss evaluations per constant group (default: {DEFAULT_MAX_EVALS})")
    parser.add_argument("--restarts", type=int, default=DEFAULT_RESTARTS, metavar="N",
                        help=f"CMA-ES restarts on failure (default: {DEFAULT_RESTARTS})")
    parser.add_argument("--head-seconds", type=float, metavar="S",
                        help="cut every measured run to its first S seconds (quick demos)")
    parser.add_argument("--closed-loop", action="store_true",
                        help="score the table by closed-loop simulation at the fitted constants")
    parser.add_argument("--polish-evals", type=int, default=0, metavar="N",
                        help="then refine the constants closed loop, N simulations of the "
                             "training runs' stage slices per group (default: 0, off)")
    parser.add_argument("--prior", type=float, default=0.0, metavar="S",
                        help="pull the constants towards the program's declared initial "
                        "values with strength S / (training runs) (default: 0, off)")
    parser.add_argument("--save-constants", metavar="FILE",
                        help="write the fitted constants as JSON {group: {name: value}}, "
                        "the form `evolve export-go PROGRAM --constants FILE` and `evolve "
                        "validate PROGRAM --constants FILE` read")
    parser.add_argument("--no-physics", action="store_true",
                        help="fit without the search's physics penalty (evolve/assess/physics.py: "
                        "synthetic batches priced positive, monotone, above the memory "
                        "floor and the measured attention kernels' context slope)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def load_program(spec: str):
    """A program from a file path or a seed name; ``UserError`` if neither parses."""
    from evolve.errors import ProgramError
    from evolve.program.language import parse_program

    path = program_file(spec)
    if path is None and Path(spec).is_dir():
        raise UserError(f"{spec}: a directory, not a program file")
    if path is None:
        raise UserError(f"{spec}: no such file and no seed of that name (seeds: "
                        f"{', '.join(available_seeds()) or 'none found in ' + str(SEEDS_DIR)})")
    try:
        return parse_program(path.read_bytes()), path
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror})") from None
    except ProgramError as exc:
        raise UserError(f"{path}: {exc}") from None


def _fmt(x: float | None, digits: int = 3) -> str:
    if x is None or math.isnan(x):
        return "-"
    return "inf" if math.isinf(x) else f"{x:.{digits}f}"


def _pct(x: float | None) -> str:
    if x is None or math.isnan(x):
        return "-"
    return "inf" if math.isinf(x) else f"{100 * x:.1f}%"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(  # noqa: E731
        c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths,
                                                                              strict=True)))
    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, rows)])


def _physics_note(model: Any, ev: Any, train: list[str], init_map: Any, consts: Any,
                  probes: Any) -> str:
    """Why a fit can end above its starting loss: it minimises the training loss plus the
    physics penalty, and the initial constants may break physics (said, with the check)."""
    from evolve.assess.physics import by_model, check

    before = check(model, by_model(ev, init_map, train), probes) or "none"
    after = check(model, by_model(ev, consts, train), probes) or "none"
    return (f"the fit minimises the training loss plus the physics penalty "
            f"(evolve/assess/physics.py; --no-physics fits the loss alone)\n  at the initial "
            f"constants: {before}\n  fitted: {after}")


def say(msg: str) -> None:
    """Progress goes to stderr so that ``--json`` output stays clean."""
    print(msg, file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from evaluator.api import Evaluator, data_dir, load_scenarios, loss
    from evolve.fitting import const_map, fit_program, group_key

    check_flags(args, at_least={"max_evals": 1, "restarts": 0, "polish_evals": 0},
                nonnegative=("prior",))  # before the runs are simulated, not after
    if args.head_seconds is not None and not 0 < args.head_seconds < math.inf:
        raise UserError(f"--head-seconds {args.head_seconds}: out of range, must be a finite "
                        "number > 0")
    not_blank(args.save_constants, "--save-constants", "the JSON file to write")
    if args.save_constants:  # an unwritable path is found now, not after the fit
        output_file(args.save_constants, "--save-constants")
    program, path = load_program(args.program)
    scenarios = load_scenarios(args.data, **simulator_options(args))
    if args.head_seconds is not None:
        scenarios = [s.head(args.head_seconds) for s in scenarios]
    ev = on_all_cores(Evaluator(scenarios))
    note_roofline_kernels(program, scenarios)
    train = ev.names("train")
    if not train:
        raise UserError(f"{data_dir(args.data)}: no run has split 'train' (the runs the "
                        "constants are fitted on)")
    model = step_model(program)
    say(f"program {program.id[:12]} ({path}), {program.n_constants} constants, "
        f"complexity {program.complexity}; simulating {len(ev.scenarios)} runs at the "
        "initial constants...")
    init_map = const_map(program, {}, ev.scenarios, args.scope)
    _check_finite(program, model, ev, init_map, path, "initial")
    with _simulating(program, path, "initial"):  # a failed simulation: no batches to fit
        version = ev.refresh_corpora(model, init_map, strict=True,
                                     progress=lambda n: say(f"  simulated {n}"))
    t0 = time.perf_counter()
    from evolve.assess.physics import probes_for

    # the search's physics penalty (evolve/assess/physics.py), in both fits
    probes = {} if args.no_physics else probes_for(ev, train)
    res = fit_program(program, ev, train, args.scope, args.seed, args.max_evals, args.restarts,
                      prior_strength=args.prior, probes=probes)
    say(f"fitted {len(res.groups)} group(s) in {time.perf_counter() - t0:.2f} s, "
        f"{res.n_evals} evaluations, status {res.status}")
    polish = None
    if args.polish_evals > 0:  # teacher forcing prices on batches formed at the start
        from evolve.fitting import closed_loop_fit

        polish = closed_loop_fit(program, ev, train, args.scope, args.seed, start=res.groups,
                                 max_evals=args.polish_evals, prior_strength=args.prior,
                                 probes=probes)
        say(f"closed-loop polish: {polish.n_evals} simulations, slice loss "
            f"{_fmt(polish.loss, 4)}, status {polish.status}")
        if polish.status == "ok":
            res.groups = polish.groups
    consts = const_map(program, res.groups, ev.scenarios, args.scope)
    _check_finite(program, model, ev, consts, path, "fitted")
    if args.save_constants:
        write_file(args.save_constants,
                   json.dumps(res.groups, indent=1, sort_keys=True) + "\n", "--save-constants")
        say(f"wrote {args.save_constants} ({args.scope}: {', '.join(sorted(res.groups))})")
    all_names = ev.names()
    if args.closed_loop:
        say("re-simulating every run closed loop at the fitted constants...")
        with _simulating(program, path, "fitted"):
            sims = ev.simulate(model, consts, all_names,
                               progress=lambda n: say(f"  simulated {n}"))
        metrics = {n: s.metrics for n, s in sims.items()}
        scoring = "closed loop at the fitted constants"
    else:
        with _simulating(program, path, "fitted"):
            metrics = ev.score(model, consts, all_names, full=True)
        scoring = ("teacher forced on the full corpora (batches simulated at the initial "
                   "constants)")
    fitted = {n: group_key(ev.by_name[n], args.scope) in res.groups for n in all_names}
    split_loss = {s: loss(metrics, [n for n in all_names if ev.by_name[n].split == s])
                  for s in SPLIT_ORDER if any(ev.by_name[n].split == s for n in all_names)}
    if args.json:
        json.dump({
            "program": program.id, "path": str(path), "scope": args.scope, "seed": args.seed,
            "corpus_version": version, "scoring": scoring,
            "fit": {"groups": res.groups, "loss": res.loss, "init_loss": res.init_loss,
                    "n_evals": res.n_evals, "status": res.status,
                    "group_status": res.group_status,
                    "inert": {g: list(v) for g, v in res.inert.items()}},
            "split_loss": split_loss,
            "polish": None if polish is None else {"loss": polish.loss, "status": polish.status,
                                                   "n_evals": polish.n_evals},
            "runs": [{**metrics[n].to_dict(), "fitted_constants": fitted[n]}
                     for n in all_names],
        }, sys.stdout, indent=1, sort_keys=True, default=float)
        print()
        return 0
    _print_constants(program, res)
    print(f"\ntraining loss (fitting windows, teacher forced): {_fmt(res.init_loss, 4)} at "
          f"the initial constants -> {_fmt(res.loss, 4)} fitted ({res.status})")
    if probes and res.loss > res.init_loss:
        print(_physics_note(model, ev, train, init_map, consts, probes))
    print(f"\nper run: {scoring}; times in s; APE of the mean")
    for split in SPLIT_ORDER:
        names = [n for n in all_names if ev.by_name[n].split == split]
        if not names:
            continue
        rows = []
        for n in names:
            m = metrics[n]
            row = [n + ("" if fitted[n] else " *"), split]
            for k in ("e2e_mean", "ttft_mean"):
                row += [_fmt(m.meas.get(k)), _fmt(m.pred.get(k)), _pct(m.ape.get(k))]
            row.append("" if m.valid else m.reason)
            rows.append(row)
        print(f"\n[{split}] loss {_fmt(split_loss[split], 4)}")
        print(_table(["run", "split", "E2E meas", "E2E pred", "E2E APE", "TTFT meas",
                      "TTFT pred", "TTFT APE", "note"], rows))
    if not all(fitted.values()):
        print("\n* no fitted constants for this run's group under this scope: initial values")
    return 0


def _check_finite(program, model, ev, consts, path: Path, when: str) -> None:
    """A program whose step time is NaN or infinite cannot be scored: say what is wrong
    with it (on the synthetic probe batches of each model), not print a table of runs in
    which no request completed."""
    import numpy as np

    from evaluator.api import probe_batches

    seen: set[str] = set()
    for sc in ev.scenarios:
        if sc.model in seen:
            continue
        seen.add(sc.model)
        probe = probe_batches(sc)
        n = probe.features.shape[1]
        with np.errstate(all="ignore"):
            t = np.broadcast_to(np.asarray(model.vector_fn(probe.features, consts[sc.name]),
                                           dtype=np.float64), (n,))
        bad = np.flatnonzero(~np.isfinite(t))
        if bad.size:
            j = int(bad[0])
            raise UserError(f"{path}: program {program.id[:12]}: step_time is "
                            f"{float(t[j])!r} us on the batch '{probe.label[j]}' "
                            f"({sc.model}) at its {when} constants; a step time must be a "
                            "finite number")


@contextlib.contextmanager
def _simulating(program, path: Path, when: str) -> Iterator[None]:
    """What the simulator refuses in a program (e.g. a negative queueing_time) is the
    program's fault: one line naming it."""
    try:
        yield
    except (ValueError, ArithmeticError) as exc:
        raise UserError(f"{path}: program {program.id[:12]} at its {when} constants: "
                        f"{exc}") from None


def _print_constants(program, res) -> None:
    groups = sorted(res.groups)
    headers = ["constant", "init", "low", "high", *groups]
    inert = res.inert
    rows = [[s.name, f"{s.init:.6g}", f"{s.low:.6g}", f"{s.high:.6g}",
             *(f"{res.groups[g][s.name]:.6g}" + ("=" if s.name in inert.get(g, ()) else "")
               for g in groups)] for s in program.constants]
    print(f"fitted constants ({len(groups)} group(s))")
    print(_table(headers, rows) if rows else "(the program declares no constants)")
    if any(inert.values()):
        print("= kept at its start: no step time of the group's runs depends on it "
              "(evolve/fitting/inert.py)")
