"""Which runs train, validate and test: the ``split.mode`` of a run, applied to its runs.

Why a module of its own: the search, the reports and the tests share the rule, and it
depends only on scenario names, models, workloads and the data's own split field.
"""

from __future__ import annotations

import typing
from typing import Any

from evolve.errors import ConfigError
from evolve.text.words import Split

SPLITS: tuple[str, ...] = tuple(Split)


def assign_splits(scenarios: typing.Sequence[Any], mode: str) -> dict[str, str]:
    """Scenario name -> train / validate / test under the configured split.

    ``data`` keeps each experiment's own split. ``lomo:<model>`` / ``lowo:<workload>`` hold
    out every run of that model / workload as ``test``; of the others, the data's train
    runs train and the rest validate, so validation stays out of fitting in every mode.
    """
    out: dict[str, str]
    if mode == "data":
        out = {s.name: Split(s.split) for s in scenarios}
    else:
        kind, _, value = mode.partition(":")
        attr = "model" if kind == "lomo" else "workload"
        known = sorted({getattr(s, attr) for s in scenarios})
        if value not in known:
            raise ConfigError(f"split.mode {mode!r}: no run has {attr} {value!r} "
                              f"(known: {', '.join(known)})")
        out = {s.name: Split.TEST if getattr(s, attr) == value else
               (Split.TRAIN if s.split == Split.TRAIN else Split.VALIDATE) for s in scenarios}
    if Split.TRAIN not in out.values():
        raise ConfigError(f"split.mode {mode!r}: no training runs among the loaded scenarios")
    return out
