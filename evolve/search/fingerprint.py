"""Program fingerprints: hashes of rounded predictions on fixed probe steps.

Why: operators often return algebraic rewrites of a program already judged (``a*(b+c)``
for ``a*b+a*c``). Their ids differ, their predictions do not; fitting them again would
waste the budget. The probe steps are taken once per run (generation 0) and stored with
the run, so a resumed run fingerprints against the same steps.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Sequence

import numpy as np

from evaluator.api import Evaluator
from evolve.program.codegen import numpy_model
from evolve.program.language import Program

# Requests used to probe queueing_time for the fingerprint, rows as REQUEST_FIELDS:
# (input_tokens, output_tokens) and servers as the bundled ones differ (weight_us, layers,
# tp, is_moe: a 7B on one GPU, a 70B on four, an MoE on two).
_PROBE_REQUESTS = np.array([[64.0, 550.0, 900.0, 1500.0, 3000.0],
                            [1.0, 248.0, 251.0, 1000.0, 1448.0],
                            [4023.0, 4023.0, 10290.0, 13934.0, 10290.0],
                            [32.0, 32.0, 80.0, 32.0, 80.0],
                            [1.0, 1.0, 4.0, 2.0, 4.0],
                            [0.0, 0.0, 0.0, 1.0, 0.0]])
PROBE_STEPS_PER_RUN = 48


def build_probe(ev: Evaluator, names: Sequence[str]) -> np.ndarray:
    """Fixed probe steps: evenly spaced steps of each named run's fitting windows."""
    cols = []
    for name in sorted(names):
        feats = ev.fit_sets[name].features
        if feats.size == 0:
            continue
        idx = np.unique(np.linspace(0, feats.shape[1] - 1, PROBE_STEPS_PER_RUN).astype(int))
        cols.append(feats[:, idx])
    return np.ascontiguousarray(np.concatenate(cols, axis=1))


def probe_bytes(probe: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, probe, allow_pickle=False)
    return buf.getvalue()


def probe_from_bytes(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data), allow_pickle=False)


def probe_constants(program: Program) -> np.ndarray:
    """A second evaluation point: each constant at a position in its bounds derived from
    its *name* (sha256), so programs sharing constant names share the point."""
    low, high = program.bounds()
    u = np.array([0.2 + 0.6 * int.from_bytes(hashlib.sha256(n.encode()).digest()[:4],
                                              "little") / 2**32 for n in program.const_names])
    logscale = (low > 0) & (high > 100 * low)
    with np.errstate(all="ignore"):
        geo = np.exp(np.log(np.where(logscale, low, 1.0)) + u * np.log(
            np.where(logscale, high / np.where(low > 0, low, 1.0), 1.0)))
    return np.where(logscale, geo, low + u * (high - low)).astype(np.float64)


def _predictions(program: Program, probe: np.ndarray, c: np.ndarray) -> list[np.ndarray]:
    model = numpy_model(program)  # no numba: the driver prints every child before fitting
    parts: list[np.ndarray] = []
    with np.errstate(all="ignore"):
        parts.append(np.broadcast_to(np.asarray(model.vector_fn(probe, c), np.float64),
                                     (probe.shape[1],)))
        if model.queue_fn is not None:
            parts.append(np.broadcast_to(np.asarray(
                model.queue_fn(_PROBE_REQUESTS, c), np.float64), (_PROBE_REQUESTS.shape[1],)))
    for idx in (model.post_decode_index, model.output_token_index):
        parts.append(np.array([c[idx] if idx is not None else 0.0]))
    return parts


def fingerprint(program: Program, probe: np.ndarray, digits: int) -> str:
    """Hash of the program's rounded predictions on the probe steps.

    Predictions (step times, queueing delays, E2E-only offsets) are taken at the declared
    initial constants *and* at :func:`probe_constants`. Equal prints mean the same function
    at both points, e.g. an algebraic rewrite; fitting the second would waste the budget.
    The second point is needed because mutations start new constants where they are
    neutral (a new term at coefficient 0): such a child equals its parent at the initial
    constants but is a different function.
    """
    try:
        vals = np.concatenate([*_predictions(program, probe, program.init_vector()),
                               *_predictions(program, probe, probe_constants(program))])
    except Exception as exc:  # a program that cannot even run gets a unique print
        return "error:" + hashlib.sha256(f"{program.id}:{exc}".encode()).hexdigest()[:24]
    if not np.all(np.isfinite(vals)):  # NaN hides the function: two such programs may
        # differ wherever their fit takes them, so each gets a print of its own
        return "nonfinite:" + hashlib.sha256(program.id.encode()).hexdigest()[:24]
    text = ",".join(np.format_float_scientific(v, precision=digits - 1, unique=False)
                    for v in vals)
    return hashlib.sha256(text.encode()).hexdigest()[:32]
