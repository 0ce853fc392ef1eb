"""Runs of a model nobody measured: the measured runs' workloads, served by another model.

Why: to predict a model without measurements (``evolve calibrate``) the simulator needs
what it would be asked to serve: arrivals, prompt and output lengths, the prompts it
repeats, the load stages. Those are properties of the workload, not of the server that
answered it (the bundled workloads are identical across the four models; data README), so
a measured run's workload is re-served by the new model: its architecture from its
``config.json``, its tensor parallelism and KV pool from the user, the measured-kernel
curves of its shapes (:func:`evaluator.data.kernel_tables.kernel_block`: the closest measured
shape,
scaled, where the tables lack it). Every measurement is dropped: the scenarios carry no
latencies, no failures and an empty summary, so nothing downstream can score against the
other model's results by mistake.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from evaluator.data.kernel_tables import KernelTables, kernel_block
from evaluator.data.scenarios import DataError, Measured, ModelArch, Scenario
from evaluator.ingest.common import read_model_config


def read_unseen_model(model_config: str | Path) -> tuple[dict[str, Any], Path]:
    """The new model's ``config.json`` (or its directory), checked as ``evolve ingest``
    checks it; a missing one is named as the model's config, not as an unreadable file."""
    if not Path(model_config).exists():
        raise DataError(f"{model_config}: not found (the model's config.json, or the "
                        "directory holding it)")
    return read_model_config(model_config)


def unseen_scenarios(sources: Sequence[Scenario], model_config: str | Path, *, tp: int,
                     kv_blocks: int, name: str, data: Path) -> list[Scenario]:
    """One scenario per distinct workload of ``sources`` (the first source of each, by
    name), served by the model of ``model_config`` (a ``config.json`` or its directory)
    at tensor parallelism ``tp`` with ``kv_blocks`` KV blocks; named ``<name>-<workload>``,
    model ``name``, split ``unseen``. The other server limits (batch, token budget, block
    size) are the source run's. Bad input raises :class:`DataError` naming the field."""
    _doc, path = read_unseen_model(model_config)
    arch = replace(ModelArch.load(path), name=name)
    if tp < 1:
        raise DataError(f"--tp {tp}: must be a positive number of GPUs")
    if arch.heads % tp or (arch.kv_heads % tp and tp % arch.kv_heads):
        raise DataError(f"{path}: field 'num_attention_heads': {arch.heads} heads "
                        f"({arch.kv_heads} KV heads) do not split over --tp {tp}")
    tables = KernelTables.load(data)
    out: list[Scenario] = []
    seen: set[str] = set()
    for src in sorted(sources, key=lambda s: s.name):
        if src.workload in seen:
            continue
        seen.add(src.workload)
        server = replace(src.server, tp=tp, kv_blocks=kv_blocks)
        why = ("must be a positive number of blocks" if kv_blocks < 1 else
               server.too_small())
        if why:
            raise DataError(f"--kv-blocks {kv_blocks}: {why}")
        n = src.n_requests
        nan = np.full(n, np.nan)
        out.append(replace(
            src, name=f"{name}-{src.workload}", model=name, split="unseen", arch=arch,
            server=server, kernels=kernel_block(tables, arch, tp, src.hardware),
            measured=Measured(e2e_s=nan, ttft_s=nan.copy(), failed=np.zeros(n, bool),
                              summary={}),
            meta={"workload_of": src.name, "model_config": str(path)}))
    return out
