"""The KV pool vLLM would give a model: its memory budget, as the server computes it.

Why: a model nobody measured has no vLLM log to read its KV-block count from, and the
pool decides when a server preempts and how many requests it can hold, so ``evolve
calibrate`` needs it. vLLM v0.15.1 sizes the pool at start-up (``gpu_worker.py``,
``determine_available_memory``): it asks for ``gpu_memory_utilization`` (default 0.9) of
the GPU's memory, subtracts what a profiling run used besides the KV cache (the weights,
the peak activations of a ``max_num_batched_tokens`` forward pass, CUDA graphs, NCCL and
the CUDA context), and divides the rest by the bytes of one block on one GPU. The blocks
are per GPU: with tensor parallelism every worker holds its shard of each block.

The rule here: ``blocks = floor((utilization x capacity - weights / tp - runtime) /
block_bytes)``, where capacity is the datasheet's memory read as GiB, the weights are
counted from the config (embeddings, the LM head unless tied, attention, every expert and
its router, norms; 2 bytes each, as vLLM serves 16- and 32-bit checkpoints), and
``runtime`` is everything else the profiling run holds. ``runtime`` is not derivable from
the config; it is taken from the four measured H100 servers of the bundled data
(:data:`RUNTIME_GIB`: 1.15 GiB at TP 1, 1.61 GiB at TP 2 and 4, where NCCL's buffers
join; the three TP > 1 servers need 1.604-1.639), with which the rule reproduces their
pools to 0.2 % (tests/evaluator/ingest/test_kv_pool.py, which also holds each TP > 1 server out
of the figure; the one TP 1 server cannot be). Simplifications: the
activation peak is taken as constant (it grows with ``max_num_batched_tokens`` and the
hidden size, tens of MiB at the data's 2048 tokens), and on a GPU other than the H100 the
share of memory CUDA keeps for itself differs, so there the estimate is approximate:
vLLM's log line ``# GPU blocks: N`` is exact and ``--kv-blocks`` takes it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from evaluator.data.run_files import _get, _read_json
from evaluator.data.scenarios import DATA_GPU, DataError, ModelArch
from evaluator.ingest.unseen import read_unseen_model

GIB = float(2**30)
BYTES_PER_PARAM = 2.0  # bf16 / fp16: vLLM serves fp32 checkpoints in 16 bits too
UTILIZATION = 0.9  # vLLM's default gpu_memory_utilization
# Non-KV, non-weight memory of vLLM's profiling run on an H100 SXM (GiB), from the
# bundled data's measured pools (module docstring): TP 1, and TP > 1 (NCCL buffers).
RUNTIME_GIB = {1: 1.15, 2: 1.61}


@dataclass(frozen=True)
class KVBudget:
    """One GPU's memory, as vLLM splits it (bytes), and the block count that follows."""

    capacity: float
    utilization: float
    weights: float
    runtime: float
    block_bytes: float

    @property
    def kv_bytes(self) -> float:
        return self.utilization * self.capacity - self.weights - self.runtime

    @property
    def blocks(self) -> int:
        return max(0, math.floor(self.kv_bytes / self.block_bytes))

    def as_dict(self) -> dict[str, float]:
        """The split in GiB, and the blocks (``calibration.json``)."""
        return {"capacity_gib": self.capacity / GIB, "utilization": self.utilization,
                "weights_gib": self.weights / GIB, "runtime_gib": self.runtime / GIB,
                "kv_gib": self.kv_bytes / GIB, "block_mib": self.block_bytes / 2**20,
                "blocks": self.blocks}

    def describe(self) -> str:
        g = lambda b: f"{b / GIB:.2f} GiB"  # noqa: E731
        return (f"{self.utilization:g} x {g(self.capacity)} - weights {g(self.weights)} - "
                f"runtime {g(self.runtime)} = KV {g(self.kv_bytes)} / "
                f"{self.block_bytes / 2**20:g} MiB per block")


def parameter_count(doc: dict[str, Any], arch: ModelArch) -> float:
    """Parameters of a dense or Mixtral-style decoder from its ``config.json``: token
    embeddings, the LM head unless ``tie_word_embeddings``, per layer the attention
    projections, the MLP of every expert (gate, up, down) and the router, two norms; the
    final norm. (Llama-2-7B: 6.74 B; Mixtral-8x7B: 46.70 B, as their model cards.)"""
    h, hd = arch.hidden, arch.head_dim
    attn = h * arch.heads * hd * 2 + 2 * h * arch.kv_heads * hd
    experts = max(arch.n_experts, 1)
    mlp = 3 * h * arch.intermediate * experts + (h * arch.n_experts if arch.is_moe else 0)
    embeddings = arch.vocab * h * (1 if doc.get("tie_word_embeddings") else 2)
    return float(arch.layers * (attn + mlp + 2 * h) + embeddings + h)


def kv_budget(doc: dict[str, Any], arch: ModelArch, *, tp: int, block_size: int,
              capacity_gib: float, utilization: float = UTILIZATION,
              runtime_gib: float | None = None) -> KVBudget:
    """vLLM's memory split on one of ``tp`` GPUs of ``capacity_gib`` each (module
    docstring). KV heads are sharded over TP, replicated where TP exceeds them."""
    if tp < 1:
        raise DataError(f"--tp {tp}: must be a positive number of GPUs")
    if not 0.0 < utilization <= 1.0:
        raise DataError(f"--gpu-memory-utilization {utilization}: must be in (0, 1]")
    if not capacity_gib > 0:
        raise DataError(f"GPU memory {capacity_gib} GiB: must be positive")
    runtime = RUNTIME_GIB[1 if tp == 1 else 2] if runtime_gib is None else runtime_gib
    kv_heads = max(1, arch.kv_heads // tp)
    block = 2.0 * arch.layers * kv_heads * arch.head_dim * BYTES_PER_PARAM * block_size
    return KVBudget(capacity=capacity_gib * GIB, utilization=utilization,
                    weights=parameter_count(doc, arch) * BYTES_PER_PARAM / tp,
                    runtime=runtime * GIB, block_bytes=block)


def estimate_kv_blocks(doc: dict[str, Any], arch: ModelArch, *, tp: int, block_size: int,
                       capacity_gib: float, utilization: float = UTILIZATION) -> KVBudget:
    """:func:`kv_budget`, refusing a server whose weights leave no room for a KV cache
    (vLLM refuses to start there too)."""
    budget = kv_budget(doc, arch, tp=tp, block_size=block_size, capacity_gib=capacity_gib,
                       utilization=utilization)
    if budget.blocks < 1:
        raise DataError(f"--tp {tp}: {arch.name}'s weights ({budget.weights / GIB:.1f} GiB "
                        f"per GPU) leave no KV cache in {utilization:g} of "
                        f"{capacity_gib:g} GiB; use more GPUs")
    return budget


def estimate_for(model_config: str | Path, *, tp: int, block_size: int, data: Path,
                 utilization: float = UTILIZATION) -> KVBudget:
    """:func:`estimate_kv_blocks` for the model of ``model_config`` (a ``config.json`` or
    its directory, checked as ``evolve ingest`` checks it) on the data's GPU."""
    doc, path = read_unseen_model(model_config)
    arch = replace(ModelArch.load(path), name=path.parent.name)
    gpu = data / "hardware" / DATA_GPU
    capacity = float(_get(_read_json(gpu), gpu, "memory.capacity_gb", positive=True))
    return estimate_kv_blocks(doc, arch, tp=tp, block_size=block_size, capacity_gib=capacity,
                              utilization=utilization)


POOL_TOLERANCE = 1.25  # a recorded pool this far from the budget, either way, is suspect


def pool_note(doc: dict[str, Any], cfg_path: Path, hardware: dict[str, Any], tp: int,
              block_size: int, kv_blocks: int,
              utilization: float | None = None) -> str | None:
    """A note for ``evolve ingest`` when a run's KV pool is more than
    :data:`POOL_TOLERANCE` times off the one vLLM's memory budget gives (at the recorded
    utilisation, else the default), else None. Why: the pool decides preemption, and the
    likely slip is a count of another convention (BLIS's ``--total-kv-blocks``
    auto-sizing counts every TP GPU's memory, TP times vLLM's per-GPU ``# GPU blocks``).
    ``utilization`` is the
    server's ``gpu_memory_utilization`` where the source records it (a TraceV2 header
    does), else vLLM's default. A GPU file without ``memory.capacity_gb`` gives no note;
    the check warns and never refuses, since a server may run at another
    ``gpu_memory_utilization``."""
    capacity = (hardware.get("memory") or {}).get("capacity_gb")
    if not isinstance(capacity, int | float) or isinstance(capacity, bool) or capacity <= 0:
        return None
    arch = ModelArch.load(cfg_path)
    share = UTILIZATION if utilization is None else utilization
    budget = kv_budget(doc, arch, tp=tp, block_size=block_size, capacity_gib=float(capacity),
                       utilization=share)
    at = ("vLLM's default memory share" if utilization is None
          else f"gpu_memory_utilization {share:g}")
    if budget.blocks < 1:
        return (f"KV pool {kv_blocks} blocks: at TP {tp} the weights ({budget.weights / GIB:.1f}"
                f" GiB per GPU) leave no room for a KV cache at {at}; "
                "check --tp and the model")
    ratio = kv_blocks / budget.blocks
    if 1 / POOL_TOLERANCE <= ratio <= POOL_TOLERANCE:
        return None
    return (f"KV pool {kv_blocks} blocks is {ratio:.2f} times the {budget.blocks} per GPU "
            f"that vLLM's memory budget gives this model at TP {tp} and {at} "
            f"({budget.describe()}); vLLM's '# GPU blocks' is per GPU (BLIS's auto-sized "
            "--total-kv-blocks counts every TP GPU), so check --kv-blocks"
            + (" unless the server ran at another --gpu-memory-utilization"
               if utilization is None else ""))
