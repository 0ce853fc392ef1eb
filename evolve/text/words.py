"""The domain's words: its codes as ``StrEnum``s, and what users read for them.

Why a leaf module: the config, the fit, the search, the archive, the validation tables,
the report and the commands all use these words, and each must spell and say them the
same way; none of them should import the command line to do so. Each enum's values are
the strings stored in archives and config files (a ``StrEnum`` equals its value), so old
archives and TOML files read unchanged.
"""

from __future__ import annotations

from enum import StrEnum


class Split(StrEnum):
    """Which part of the data a run belongs to: fitted on, chosen on, or only reported."""

    TRAIN = "train"
    VALIDATE = "validate"
    TEST = "test"


class Scope(StrEnum):
    """Which runs share one constant vector: all, per model (pooled: per model with a shared
    prior), or per run."""

    GLOBAL = "global"
    PER_MODEL = "per_model"
    PER_SCENARIO = "per_scenario"
    POOLED = "pooled"


class FitStatus(StrEnum):
    """How a constant fit ended (``FitResult.status``)."""

    OK = "ok"
    NO_IMPROVEMENT = "no_improvement"
    INVALID = "invalid"
    NO_CONSTANTS = "no_constants"


class EvalStatus(StrEnum):
    """Whether an evaluated child entered the archive's population."""

    ACCEPTED = "accepted"
    REJECTED = "rejected"


class ScoreMode(StrEnum):
    """How a run's stored figures were computed (the kind of evaluation)."""

    CLOSED_LOOP_SLICE = "closed_loop_slice"
    CLOSED_LOOP = "closed_loop"
    TEACHER_FORCED = "teacher_forced"
    LOMO_TEACHER_FORCED = "lomo_teacher_forced"


class Loop(StrEnum):
    """The engine loop constants are fitted in (docs/blis.md)."""

    VLLM = "vllm"
    BLIS = "blis"


LOOP_NAMES: dict[str, str] = {Loop.VLLM: "vLLM's engine loop", Loop.BLIS: "BLIS's engine loop"}

MODE_WORDS: dict[str, str] = {ScoreMode.CLOSED_LOOP_SLICE: "closed loop on stage slices",
              ScoreMode.CLOSED_LOOP: "closed loop on the whole run",
              ScoreMode.TEACHER_FORCED: "teacher forced on the run's corpora",
              ScoreMode.LOMO_TEACHER_FORCED: "teacher forced, its model held out"}


def run_label(name: str) -> str:
    """A run's name without its timestamp prefix (``20260217-155451-``), as tables show it."""
    return name[16:] if name[:8].isdigit() else name
