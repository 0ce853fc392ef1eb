"""Everything a run needs before its first generation: scenarios, seeds, the operator.

Shared by ``evolve run`` (through the loop) and ``evolve replay``, which must rebuild the
evaluator exactly as the run had it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from evaluator.api import Evaluator, data_dir, experiment_dirs
from evolve.assets import asset_dir
from evolve.config.llm import LLMConfig
from evolve.config.schema import Config
from evolve.errors import ArchiveError, ProgramError, UserError
from evolve.operators.base import Operator
from evolve.program.language import Program, parse_program

PROJECT_SEEDS = asset_dir("seeds")


def require_scenarios(evaluator: Evaluator, splits: Mapping[str, str], run_id: int) -> None:
    """A stored run's scenarios must all be in the data it is resumed or replayed on."""
    missing = sorted(set(splits) - set(evaluator.by_name))
    if missing:
        raise ArchiveError(f"run {run_id} used scenario {missing[0]!r}, not in the data "
                           f"({len(missing)} of {len(splits)} missing; pass --data DIR)")


def load_evaluator(cfg: Config) -> Evaluator:
    """The run's scenarios (optionally cut to their first ``head_seconds``); a name in
    ``run.scenarios`` that the data lacks is named with its key (it may come from a file)."""
    if cfg.run.scenarios:
        root = data_dir(cfg.run.data or None)
        known = {p.name for p in experiment_dirs(root)}
        missing = [n for n in cfg.run.scenarios if n not in known]
        if missing:
            raise UserError(f"run.scenarios: no experiment named {missing[0]!r} in "
                            f"{root / 'experiments'}")
    ev = Evaluator.from_data(cfg.run.data or None, list(cfg.run.scenarios) or None,
                             prompt_cache=cfg.run.prompt_cache,
                             async_scheduling=cfg.run.async_scheduling, loop=cfg.run.loop,
                             step_noise=cfg.run.step_noise,
                             loss_weights=cfg.loss.weights())
    if cfg.run.head_seconds > 0:
        ev = Evaluator([s.head(cfg.run.head_seconds) for s in ev.scenarios])
    return ev


def load_seeds(cfg: Config) -> list[tuple[str, Program]]:
    """(file stem, program) of every seed, sorted by file name; a bad seed is a user error."""
    folder = Path(cfg.run.seeds_dir) if cfg.run.seeds_dir else PROJECT_SEEDS
    if not folder.is_dir():
        raise UserError(f"{folder}: not a directory (run.seeds_dir: the seed programs' folder)")
    files = sorted(folder.glob("*.py"))
    if not files:
        raise UserError(f"{folder}: no seed programs (*.py)")
    out = []
    for path in files:
        try:
            out.append((path.stem, parse_program(path.read_text(encoding="utf-8"))))
        except ProgramError as exc:
            raise UserError(f"{path}: seed does not parse: {exc}") from None
    return out


def build_operator(cfg: Config, splits: dict[str, str], llm: LLMConfig | None = None
                   ) -> Operator:
    """The configured operator; the LLM one is told the held-out runs it must never show.
    ``llm`` overrides ``cfg.llm`` for the operator only (``--llm local`` points it at the
    server it started, without changing the stored configuration)."""
    if cfg.operator.kind == "llm":
        if not cfg.llm.model:
            raise UserError("operator.kind = llm needs llm.model (--llm MODEL)")
        from evolve.operators.llm.mixed import build_mixed_operator
        from evolve.operators.llm.operator import LLMOperator

        heldout = sorted(n for n, s in splits.items() if s != "train")
        model = LLMOperator(llm or cfg.llm, heldout, fallback=lambda: offline_operator(cfg))
        return build_mixed_operator(model, offline_operator(cfg), cfg.operator.llm_share,
                                    cfg.operator.overlap)
    return offline_operator(cfg)


def offline_operator(cfg: Config) -> Operator:
    """The offline operator with the run's complexity cap: also the LLM operator's fallback,
    so a run that falls back keeps the limits it was configured with."""
    from evolve.operators.offline.operator import OfflineOperator

    return OfflineOperator(max_complexity=min(cfg.search.complexity_cap, 30))
