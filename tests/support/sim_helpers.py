"""What the simulator tests share: a constant step-time model and hand-made scenarios."""

from __future__ import annotations

import numba as nb
import numpy as np

from evaluator.api import StepModel
from evaluator.data.scenarios import make_scenario
from evaluator.sim.simulator import _STEP_SIG


@nb.njit(_STEP_SIG)
def _const_scalar(f, c):
    return c[0]


CONST = StepModel("const", lambda F, c: np.full(F.shape[1], c[0]), _const_scalar)


def hand_scenario(data_path, arrivals, inputs, outputs, **kw):
    """A scenario of the given requests on Llama-2-7B and the H100 of the bundled data."""
    return make_scenario("hand", arrivals, inputs, outputs,
                         model_dir=data_path / "models" / "Llama-2-7b-hf",
                         hardware=data_path / "hardware" / "h100-sxm.json", **kw)
