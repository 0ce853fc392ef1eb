"""``evolve fit``'s work: simulate the runs, fit a program's constants, score every run.

Steps: simulate every measured run closed loop at the program's initial constants to build
the corpora; fit the constants with CMA-ES on the *train* runs' fitting windows (teacher
forced, with the search's physics penalty unless told otherwise); optionally polish them
closed loop; score every run teacher forced on the full corpora, or closed loop at the
fitted constants. :func:`fit` returns a :class:`FitOutcome`; the command renders it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evolve.errors import UserError
from evolve.program.codegen import step_model
from evolve.program.language import Program
from evolve.workflows.targets import (
    SEEDS_DIR,
    available_seeds,
    note_roofline_kernels,
    on_all_cores,
    program_file,
)

SPLIT_ORDER = ("train", "validate", "test")


@dataclass
class FitOptions:
    """What ``evolve fit`` was asked for (its flags, checked)."""

    scope: str = "global"
    seed: int = 7
    data: str | None = None
    simulator: dict[str, Any] | None = None  # targets.simulator_options
    max_evals: int = 1
    restarts: int = 0
    head_seconds: float | None = None
    closed_loop: bool = False
    polish_evals: int = 0
    prior: float = 0.0
    physics: bool = True


@dataclass
class FitOutcome:
    """A fitted program and its score on every run."""

    program: Program
    path: Path
    version: str  # corpus version of the corpora simulated at the initial constants
    res: Any  # evolve.fitting.FitResult (groups, loss, init_loss, status, inert...)
    polish: Any  # the closed-loop polish's result, or None
    metrics: dict[str, Any]  # run -> RunMetrics
    scoring: str  # how ``metrics`` were computed, in words
    names: list[str]  # every run, in the data's order
    splits: dict[str, str]  # run -> split
    fitted: dict[str, bool]  # run -> whether its group has fitted constants
    split_loss: dict[str, float]
    physics_note: str | None  # why the fit ended above its start, when it did

    def as_dict(self, scope: str, seed: int) -> dict[str, Any]:
        """``evolve fit --json``'s document."""
        res, polish = self.res, self.polish
        return {
            "program": self.program.id, "path": str(self.path), "scope": scope, "seed": seed,
            "corpus_version": self.version, "scoring": self.scoring,
            "fit": {"groups": res.groups, "loss": res.loss, "init_loss": res.init_loss,
                    "n_evals": res.n_evals, "status": res.status,
                    "group_status": res.group_status,
                    "inert": {g: list(v) for g, v in res.inert.items()}},
            "split_loss": self.split_loss,
            "polish": None if polish is None else {"loss": polish.loss, "status": polish.status,
                                                   "n_evals": polish.n_evals},
            "runs": [{**self.metrics[n].to_dict(), "fitted_constants": self.fitted[n]}
                     for n in self.names],
        }


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


def fit(program: Program, path: Path, opts: FitOptions, say: Callable[[str], None]
        ) -> FitOutcome:
    """Simulate, fit, optionally polish, and score ``program`` (progress through ``say``)."""
    from evaluator.api import Evaluator, data_dir, load_scenarios, loss
    from evolve.assess.physics import probes_for
    from evolve.fitting import const_map, fit_program, group_key

    scenarios = load_scenarios(opts.data, **(opts.simulator or {}))
    if opts.head_seconds is not None:
        scenarios = [s.head(opts.head_seconds) for s in scenarios]
    ev = on_all_cores(Evaluator(scenarios))
    note_roofline_kernels(program, scenarios)
    train = ev.names("train")
    if not train:
        raise UserError(f"{data_dir(opts.data)}: no run has split 'train' (the runs the "
                        "constants are fitted on)")
    model = step_model(program)
    say(f"program {program.id[:12]} ({path}), {program.n_constants} constants, "
        f"complexity {program.complexity}; simulating {len(ev.scenarios)} runs at the "
        "initial constants...")
    init_map = const_map(program, {}, ev.scenarios, opts.scope)
    _check_finite(program, model, ev, init_map, path, "initial")
    with _simulating(program, path, "initial"):  # a failed simulation: no batches to fit
        version = ev.refresh_corpora(model, init_map, strict=True,
                                     progress=lambda n: say(f"  simulated {n}"))
    t0 = time.perf_counter()
    # the search's physics penalty (evolve/assess/physics.py), in both fits
    probes = probes_for(ev, train) if opts.physics else {}
    res = fit_program(program, ev, train, opts.scope, opts.seed, opts.max_evals,
                      opts.restarts, prior_strength=opts.prior, probes=probes)
    say(f"fitted {len(res.groups)} group(s) in {time.perf_counter() - t0:.2f} s, "
        f"{res.n_evals} evaluations, status {res.status}")
    polish = None
    if opts.polish_evals > 0:  # teacher forcing prices on batches formed at the start
        from evolve.fitting import closed_loop_fit
        from evolve.text.numbers import num

        polish = closed_loop_fit(program, ev, train, opts.scope, opts.seed, start=res.groups,
                                 max_evals=opts.polish_evals, prior_strength=opts.prior,
                                 probes=probes)
        say(f"closed-loop polish: {polish.n_evals} simulations, slice loss "
            f"{num(polish.loss, 4)}, status {polish.status}")
        if polish.status == "ok":
            res.groups = polish.groups
    consts = const_map(program, res.groups, ev.scenarios, opts.scope)
    _check_finite(program, model, ev, consts, path, "fitted")
    names = ev.names()
    if opts.closed_loop:
        say("re-simulating every run closed loop at the fitted constants...")
        with _simulating(program, path, "fitted"):
            sims = ev.simulate(model, consts, names, progress=lambda n: say(f"  simulated {n}"))
        metrics = {n: s.metrics for n, s in sims.items()}
        scoring = "closed loop at the fitted constants"
    else:
        with _simulating(program, path, "fitted"):
            metrics = ev.score(model, consts, names, full=True)
        scoring = ("teacher forced on the full corpora (batches simulated at the initial "
                   "constants)")
    splits = {n: ev.by_name[n].split for n in names}
    fitted = {n: group_key(ev.by_name[n], opts.scope) in res.groups for n in names}
    split_loss = {s: loss(metrics, [n for n in names if splits[n] == s])
                  for s in SPLIT_ORDER if s in splits.values()}
    note = (_physics_note(model, ev, train, init_map, consts, probes)
            if probes and res.loss > res.init_loss else None)
    return FitOutcome(program, path, version, res, polish, metrics, scoring, names, splits,
                      fitted, split_loss, note)


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
