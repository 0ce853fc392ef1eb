"""How strongly a run's simulated latency answers to the step time: where its knee is.

Why: near capacity a few percent of step time decide whether a queue forms (slower steps
-> more requests in flight -> bigger, slower steps), so one step-time error costs 1 % of
mean E2E on one run and 30 % on another. A held-out miss on a run at its knee says less
about a program than the same miss elsewhere, and someone asking "what if" at a load near
the knee should know that the answer is fragile. Measured by simulating the run again with
every step time scaled by ``1 - delta`` and ``1 + delta`` (the queueing delay and the
E2E-only constants untouched) and reporting the relative change of simulated mean E2E.

On an overloaded run (client timeouts) the mean E2E of the completed requests is capped by
the timeout and can move either way (faster steps let requests that waited longer
complete); there the simulated failure counts, reported beside it, carry the response.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numba as nb
import numpy as np

from evaluator.model import STEP_SIG as _STEP_SIG
from evaluator.model import ConstMap, StepModel
from evaluator.sim.simulator import SimResult

DELTA = 0.03  # the step-time change probed, each way


def scaled(model: StepModel, factor: float) -> StepModel:
    """``model`` with every step time multiplied by ``factor`` (both compiled forms)."""
    inner, vec, f = model.scalar_fn, model.vector_fn, float(factor)

    def raw(x: np.ndarray, c: np.ndarray) -> float:
        return inner(x, c) * f  # type: ignore[operator]

    def vector(F: np.ndarray, c: np.ndarray) -> np.ndarray:
        return np.asarray(vec(F, c), dtype=np.float64) * f

    return replace(model, name=f"{model.name}*{f:g}", vector_fn=vector,
                   scalar_fn=nb.njit(_STEP_SIG, error_model="numpy")(raw))


def e2e_response(simulate: Callable[..., Mapping[str, Any]], model: StepModel,
                 consts: ConstMap, sims: Mapping[str, SimResult],
                 delta: float = DELTA) -> dict[str, dict[str, float]]:
    """Per run of ``sims`` (the unscaled simulations): the relative change of simulated
    mean E2E with step times at ``1 - delta`` (``"minus"``) and ``1 + delta``
    (``"plus"``), and the simulated failures at each (``"failed_minus"``,
    ``"failed_plus"``). ``simulate(model, consts, names)`` is ``Evaluator.simulate``. A
    run whose scaled simulation has no finite mean E2E (or whose base has none) is left
    out.
    """
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta {delta}: must be in (0, 1)")
    base = {n: r.metrics.pred.get("e2e_mean", np.nan) for n, r in sims.items()}
    moved: dict[str, dict[str, float]] = {}
    for key, factor in (("minus", 1.0 - delta), ("plus", 1.0 + delta)):
        for name, res in simulate(scaled(model, factor), consts, names=list(sims)).items():
            e2e, ref = res.metrics.pred.get("e2e_mean", np.nan), base[name]
            if np.isfinite(e2e) and np.isfinite(ref) and ref > 0:
                row = moved.setdefault(name, {})
                row[key] = float(e2e / ref - 1.0)
                row[f"failed_{key}"] = float(res.metrics.pred.get("failures", 0.0))
    return {n: v for n, v in moved.items() if "minus" in v and "plus" in v}
