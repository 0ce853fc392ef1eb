"""FitPool's workers: beside a local model they run at a lower priority, otherwise at the
driver's; the executor decides which from the run's configuration."""

from __future__ import annotations

import os

import pytest

from evolve.config.schema import Config
from evolve.search.execution.executors import serves_local_model
from evolve.search.execution.pool import BESIDE_LOCAL_MODEL_NICE, FitPool


def niceness(_ctx: object, _i: int) -> int:
    return os.nice(0)


@pytest.mark.parametrize("nice", [0, BESIDE_LOCAL_MODEL_NICE])
def test_workers_run_at_the_asked_niceness(nice):
    base = os.nice(0)
    pool = FitPool(object(), 2, nice=nice)
    try:
        got = pool.apply(niceness, [(i,) for i in range(4)])
    finally:
        pool.reset()
    assert got == [min(base + nice, 19)] * 4
    assert os.nice(0) == base  # the driver keeps its own


def _cfg(kind: str = "llm", model: str = "local", mode: str = "off") -> Config:
    cfg = Config()
    cfg.operator.kind = kind
    cfg.llm.model = model
    cfg.llm.cassette, cfg.llm.cassette_mode = ("c.jsonl", mode) if mode != "off" else (None, mode)
    return cfg


def test_only_a_run_that_asks_its_own_local_model_lowers_its_workers():
    assert serves_local_model(_cfg())
    assert serves_local_model(_cfg(mode="record"))  # recording asks the model
    assert not serves_local_model(_cfg(mode="replay"))  # the cassette answers
    assert not serves_local_model(_cfg(model="gpt-4o"))  # another machine's CPU
    assert not serves_local_model(_cfg(kind="offline", model=""))
