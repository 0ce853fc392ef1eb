"""Constants that no batch of a fit can feel keep their starting value.

Why: a constant gated by the architecture, e.g. ``c.moe_layer_us * f.is_moe`` on a model
without experts, or an all-reduce latency times ``minimum(f.tp - 1, 1)`` on a TP 1
server, does not change one step time of the group being fitted. CMA-ES then leaves it
wherever its random walk ends (under a prior only a weak pull acts on it, and the other
coordinates set the step size), and that value is exported, inherited by a held-out model
and compared across fitting seeds as if the data had chosen it. Measured: fitted without
Mixtral (leave-one-model-out), the `layered` seed's MoE-layer cost ended at 51-98 us over
three fitting seeds from a declared 32 us, and Mixtral's held-out runs crossed the 10 %
line with the fitting seed. Frozen, such a constant keeps its starting value (the
declared prior, the pooled ``"global"`` value, or the constants being polished), the
answer is the prior's by construction, and CMA-ES searches fewer dimensions.

Rule: a constant is *inert* for a group when it is not one of the E2E-only constants
(``post_decode_us``, ``output_token_us``), and the step times over every feature column the
fit can see (its fitting windows and the physics probes of its models) and the queueing
delays of the group's requests are bitwise identical with the constant at the low end, the
middle and the high end of its box, the others held at each of three base points: the
start, and every other constant a quarter and three quarters into its box. Bitwise,
because a constant that moves one step time by one ulp is felt. With no columns at all
nothing is frozen; a constant ``queueing_time`` reads is never frozen unless the group's
requests are given (``queueing_time`` reads the server too, so ``c.moe_layer_us *
r.is_moe`` is as silent on a dense model as in ``step_time``).

Why more than the start: a constant can be silent at the start only because another one
sits at a neutral value there. The offline ``wrap_where`` edit writes ``where(f.x > c.t,
e, c.s * e)`` with ``c.s`` starting at 1, where both branches agree and the threshold
``c.t`` moves nothing; judged at the start alone, every such threshold was frozen and never
fitted (found in review). A constant gated by the architecture is silent at every base.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

import numpy as np

from evaluator.api import StepModel
from evolve.assess.physics import population_step_times
from evolve.fitting.bounds import Box
from evolve.program.language import Program

_PROBE_UNITS = (0.0, 0.5, 1.0)  # where in its box each constant is tried
_BASE_UNITS = (0.25, 0.75)  # the other constants, besides at the start (module docstring)


def _read_outside_step(program: Program, judged_queue: bool) -> set[str]:
    """Constants that act on a fit other than through what is judged: the E2E-only ones,
    and those ``queueing_time`` reads unless its delays are judged too."""
    names = {n for n in program.const_names if n in ("post_decode_us", "output_token_us")}
    tree = program.queue_tree
    if tree is not None and not judged_queue:
        names |= {node.attr for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                  and node.value.id == "c"}
    return names


def inert_constants(program: Program, model: StepModel, blocks: Sequence[np.ndarray],
                    start: np.ndarray, box: Box,
                    requests: np.ndarray | None = None) -> np.ndarray:
    """Bool per constant: True where no step time in ``blocks`` (feature arrays
    ``[N_FEATURES, m]``) and no queueing delay of ``requests`` (``[N_REQUEST_FIELDS, r]``,
    the group's) depends on it, around ``start`` (the module docstring's rule)."""
    n = program.n_constants
    mask = np.zeros(n, dtype=bool)
    cols = [b for b in blocks if b.size]
    if n == 0 or not cols:
        return mask
    F = np.ascontiguousarray(np.concatenate(cols, axis=1))
    queue = model.queue_fn if requests is not None and requests.size else None
    outside = _read_outside_step(program, queue is not None)
    start = np.asarray(start, dtype=np.float64)
    candidates = [k for k, name in enumerate(program.const_names) if name not in outside]
    if not candidates:
        return mask
    ends = box.from_unit(np.repeat(np.asarray(_PROBE_UNITS)[:, None], n, axis=1))
    bases = [start, *box.from_unit(np.repeat(np.asarray(_BASE_UNITS)[:, None], n, axis=1))]
    mask[candidates] = True
    for base_x in bases:
        # a constant felt at one base is not inert: only the others are tried at the next
        # (most constants are felt at the start, so the later bases price few or none)
        left = [k for k in candidates if mask[k]]
        if not left:
            break
        X = np.repeat(np.asarray(base_x, dtype=np.float64)[None, :],
                      1 + len(left) * len(_PROBE_UNITS), axis=0)
        row = 1
        for k in left:  # only constant k moves; the others stay at the base
            for i in range(len(_PROBE_UNITS)):
                X[row, k] = ends[i, k]
                row += 1
        T = population_step_times(model.vector_fn, F, X)
        if queue is not None and requests is not None:
            with np.errstate(all="ignore"):
                Q = queue(requests, np.ascontiguousarray(X.T)[:, :, None])
                Q = np.broadcast_to(np.asarray(Q, np.float64), (X.shape[0], requests.shape[1]))
            T = np.concatenate([T, Q], axis=1)
        row = 1
        for k in left:
            rows = T[row:row + len(_PROBE_UNITS)]
            mask[k] = all(np.array_equal(r, T[0], equal_nan=True) for r in rows)
            row += len(_PROBE_UNITS)
    return mask


def names_of(program: Program, mask: np.ndarray) -> tuple[str, ...]:
    """The constants a mask marks, in the program's order."""
    return tuple(k for k, z in zip(program.const_names, mask, strict=True) if z)
