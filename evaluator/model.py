"""What a step-time model is, to the evaluator: the one type both packages build on.

Why a module of its own: the evaluator's baselines and evolve's compiler both produce
``StepModel`` objects, and the evaluator's public surface (``evaluator.api``) re-exports
it; keeping it here lets every evaluator module use it without importing the API module
that is built on top of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numba as nb
import numpy as np

# The numba signature of a compiled step function: (features, constants) -> step time in us.
STEP_SIG = nb.float64(nb.float64[::1], nb.float64[::1])
VectorFn = Callable[[np.ndarray, np.ndarray], np.ndarray]
QueueFn = Callable[[np.ndarray, np.ndarray], np.ndarray]
ConstMap = Mapping[str, np.ndarray]

# A usable step time is finite, positive and below this (11.6 days): the simulated clock
# must not overflow, and a step that long is a program gone wrong, not a prediction. One
# rule for every place that runs a program: closed loop, teacher forced, physics probes.
MAX_STEP_US = 1e12


def usable_steps(t: np.ndarray) -> np.ndarray:
    """Bool, elementwise: finite, positive and below :data:`MAX_STEP_US` (NaN fails)."""
    return (t > 0.0) & (t < MAX_STEP_US)


def step_time_problem(t: np.ndarray) -> str | None:
    """Why step times ``t`` (µs) are unusable, naming the first bad one, or None."""
    flat = np.asarray(t, dtype=np.float64).reshape(-1)
    bad = np.flatnonzero(~usable_steps(flat))
    if bad.size == 0:
        return None
    j = int(bad[0])
    return (f"step time {float(flat[j])!r} us at step {j} is not finite, positive and below "
            f"{MAX_STEP_US:g} us ({bad.size} of {flat.size} steps)")


@dataclass(frozen=True)
class StepModel:
    """A step-time model in the two forms the evaluator runs.

    ``vector_fn(F, c)``: ``F`` is ``float64[N_FEATURES, n_steps]`` (row i = feature i of
    ``FEATURE_NAMES``), ``c`` the constant vector; returns ``float64[n_steps]`` in µs.
    ``scalar_fn``: a numba-compiled ``float64(float64[::1], float64[::1])`` taking one
    step's feature vector and ``c``; must equal ``vector_fn`` step for step.
    ``queue_fn(R, c)``: ``R`` is ``float64[N_REQUEST_FIELDS, n_requests]`` (glossary
    ``REQUEST_FIELDS``: input_tokens, output_tokens, then the server's weight_us, layers,
    tp, is_moe, built by ``features.components.request_inputs``); returns the µs by
    which each request's entry to the queue is delayed (BLIS QueueingTime).
    ``post_decode_index`` / ``output_token_index``: positions in ``c`` of the constants
    ``post_decode_us`` and ``output_token_us`` (added to reported E2E only), or None.
    ``reads_kernels``: False when the model reads none of the measured-kernel features
    (``KERNEL_FEATURES``); the closed-loop simulator then skips their interpolation (155
    of the features' 186 ns per step), which cannot change such a model's step times.
    """

    name: str
    vector_fn: VectorFn
    scalar_fn: object
    queue_fn: QueueFn | None = None
    post_decode_index: int | None = None
    output_token_index: int | None = None
    reads_kernels: bool = True
