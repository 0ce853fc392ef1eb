"""End of a run: the final hall of fame simulated closed loop on every whole test run.

Why: during the search the test runs are scored teacher forced on the run's corpora
(cheap, read by nothing), which on a queueing run gives every program the corpora's queue:
``evolve frontier`` once read the same test TTFT for all 19 programs of a run. The figures
users read should be the ones that matter, so once a run ends each member of its last
hall of fame is simulated closed loop on each whole test run (about 0.3 s a run), and the
figures are stored (:mod:`evolve.archive.final_scores`) for ``evolve frontier`` and
``evolve report``. Display-only: computed after the last generation is committed, outside
the determinism digest, never read by selection, the pick or a resume. A resumed run that
ends again recomputes them for its new hall of fame; one whose figures are current skips.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from evolve.archive import Archive
from evolve.archive import final_scores as store
from evolve.archive.store import utc_now
from evolve.config.schema import cpu_count
from evolve.fitting import const_map
from evolve.program.codegen import step_model
from evolve.program.language import parse_program
from evolve.search.context import RunContext

SPLIT = "test"


def test_figures(ctx: RunContext, source: str, groups: dict[str, dict[str, float]],
                 threads: int = 1) -> dict[str, dict[str, Any]]:
    """Closed-loop metrics of one program at ``groups`` on every whole test run of ``ctx``
    (stored form: ``RunMetrics.to_dict()`` with its split and ``mode``)."""
    ev = ctx.evaluator
    names = sorted(n for n in ctx.names if ctx.splits[n] == SPLIT)
    if not names:
        return {}
    program = parse_program(source)
    model = step_model(program)
    consts = const_map(program, groups, ev.scenarios, ctx.scope)
    out = {}
    for name, res in ev.simulate(model, consts, names=names, threads=threads).items():
        res.metrics.split = SPLIT
        out[name] = res.metrics.to_dict() | {"mode": store.MODE}
    return out


def record(archive: Archive, run_id: int, ctx: RunContext, workers: int,
           log: Callable[[str], None]) -> None:
    """Compute and store the closed-loop test figures of the run's last hall of fame
    (skipped when stored ones are current). A failure is said, never raised: the run's
    record is complete without them. A stop signal is not caught (the run is ended and
    unlocked already; ``--resume`` computes them)."""
    try:
        _record(archive, run_id, ctx, max(1, min(workers, cpu_count())), log)
    except Exception as exc:  # display figures must never fail a finished run
        log(f"run {run_id}: closed-loop test figures not computed "
            f"({type(exc).__name__}: {exc})")


def _record(archive: Archive, run_id: int, ctx: RunContext, threads: int,
            log: Callable[[str], None]) -> None:
    tests = [n for n in ctx.names if ctx.splits[n] == SPLIT]
    rows = archive.frontier(run_id)
    if not rows or not tests:
        return
    latest = archive.latest_accepted(run_id)
    members = [(r.program_id, latest[r.program_id]) for r in rows if r.program_id in latest]
    have = store.read(archive, run_id)
    if all(store.current(have, pid, (ev.generation, ev.seq)) is not None
           for pid, ev in members):
        return
    log(f"run {run_id}: simulating the {len(members)} hall-of-fame programs closed loop on "
        f"{'the whole test run' if len(tests) == 1 else f'the {len(tests)} whole test runs'} "
        "(figures for `evolve frontier` and `evolve report`, read by no decision)")
    finals = []
    for pid, ev in members:
        source = archive.program(pid, run_id)[0].source
        finals.append(store.Final(pid, rows[0].generation, (ev.generation, ev.seq),
                                  test_figures(ctx, source, ev.constants or {}, threads)))
    store.write(archive, run_id, finals, utc_now())
