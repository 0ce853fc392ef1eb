"""Teacher-forced scoring: step times -> per-request latencies -> per-run errors. Pure numpy.

A request is in every engine step from its admission to its last token (the engine is
never idle while it runs), so its in-engine lifetime is a difference of prefix sums of
the step times: ``S[last] - S[admit - 1]``. Its time before admission (queueing delay +
wait for a batch slot) is held at the closed-loop corpus value: a queueing effect that
fixed batches cannot re-price, which is why the corpora are refreshed by closed-loop
simulation of the champion. So, per request::

    TTFT = queue + wait + S[first] - S[admit - 1]       (+ output_token_us in BLIS's loop)
    E2E  = queue + wait + S[last]  - S[admit - 1] + post_decode_us + output_token_us * n_out

With the program that produced the corpus this reproduces the closed loop exactly (up to
float rounding). The decode interval (``itl_mean``) is (E2E - TTFT) / (n_out - 1) per
request, the real per-token interval, about twice inference-perf's ITL (data README
trap 3). It prices the lifetime rather than replaying absolute step end times (a
departure from the first design), because with fixed batches a slower candidate drifts
every later step and the error compounds across a window, which made fitting landscapes
cliff-like.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from evaluator.features.components import request_inputs
from evaluator.model import step_time_problem

METRIC_KEYS = ("e2e_mean", "ttft_mean", "itl_mean", "e2e_p50", "e2e_p90", "e2e_p99",
               "ttft_p50", "ttft_p90", "ttft_p99", "failures",
               "ttft_p90_steady", "ttft_p99_steady", "e2e_p99_steady")

# Percentiles over the requests arriving after the measured server's cold start ("steady"),
# both sides alike. Why: the measured runs' first 10-30 s are slow (kernels compiled on first
# use, allocator warm-up: 0.1-2 s TTFT on Mixtral) and hold 70-97 % of the top 1 % of TTFT on
# 7 of 12 normal runs; the simulator starts warm (docs/concepts/simulator.md,
# docs/notes/2026-12-06-tails-and-overload.md). The all-request keys keep their meaning.
STEADY_WARMUP_S = 30.0
STEADY_KEYS = {"ttft_p90_steady": ("ttft", 90), "ttft_p99_steady": ("ttft", 99),
               "e2e_p99_steady": ("e2e", 99)}
MEAN_KEYS = ("e2e_mean", "ttft_mean")
# Loss weights of the steady percentiles (the means weigh 1 each) and the cap of each
# percentile's APE inside the loss; ``[loss]`` in the run config sets them (evolve/config).
# Why these: p99 TTFT is the noisiest statistic (bootstrap s.e. up to 10 % at a knee), p90
# TTFT and p99 E2E nearly as stable as a mean; the cap keeps a knee's +100 % p99 from
# drowning the means (phase 1 of issue 58, docs/notes/2026-12-06-tails-and-overload.md).
DEFAULT_LOSS_WEIGHTS: dict[str, float] = {"ttft_p90_steady": 0.5, "ttft_p99_steady": 0.25,
                                          "e2e_p99_steady": 0.5, "cap": 1.0}


@dataclass
class RunMetrics:
    """Predicted vs measured aggregates of one run (seconds; APE as a fraction)."""

    name: str
    split: str
    model: str
    workload: str
    n_ok: int = 0
    n_failed: int = 0
    pred: dict[str, float] = field(default_factory=dict)
    meas: dict[str, float] = field(default_factory=dict)
    ape: dict[str, float] = field(default_factory=dict)
    valid: bool = True
    reason: str = ""
    # the loss weights of this run's percentile terms (DEFAULT_LOSS_WEIGHTS' keys)
    loss_weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_LOSS_WEIGHTS))

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("name", "split", "model", "workload", "n_ok",
                                              "n_failed", "pred", "meas", "ape", "valid",
                                              "reason", "loss_weights")}


def wait_limit_us(meas_ttft_s: np.ndarray) -> np.ndarray:
    """Largest corpus wait (queue entry -> admission) a teacher-forced request may carry.

    A request that waited much longer in the corpus than its whole measured TTFT was
    queued behind an overload of the corpus's model; teacher forcing holds that wait
    fixed, so it would add a constant error no constant can fix and distort the fit.
    Such requests are left out of fitting (they still count closed loop).
    """
    return np.maximum(2.0 * np.nan_to_num(meas_ttft_s, nan=0.0) * 1e6, 1e5)


def blis_loop(scenario) -> bool:
    """Whether ``scenario`` is simulated in BLIS's engine loop (``Scenario.loop``), whose
    clock counts whole µs and whose TTFT includes ``OutputTokenProcessingTime``."""
    return getattr(scenario, "loop", "vllm") == "blis"


def queue_delay(scenario, model, consts: np.ndarray) -> np.ndarray:
    """Per-request queueing delay (µs) from the model's ``queue_fn``; zeros if none
    (truncated to whole µs in BLIS's loop, as BLIS's ``QueueingTime`` is)."""
    if model.queue_fn is None:
        return np.zeros(scenario.n_requests)
    r = request_inputs(scenario.input_tokens, scenario.output_tokens, scenario.arch_vector)
    with np.errstate(all="ignore"):
        d = np.broadcast_to(np.asarray(model.queue_fn(r, consts), dtype=np.float64),
                            (scenario.n_requests,)).copy()
    if not np.all(np.isfinite(d)) or np.any(d < 0):
        raise ValueError("queueing_time is not finite and non-negative for every request")
    return np.floor(d) if blis_loop(scenario) else d


def _us(value: float, blis: bool) -> float:
    """A constant in µs as the loop counts it: BLIS truncates to whole µs."""
    return float(np.floor(value)) if blis else float(value)


def _extra_us(model, consts: np.ndarray, out_tokens: np.ndarray,
              blis: bool = False) -> np.ndarray | float:
    """E2E's time past the last step: ``post_decode_us`` + ``output_token_us`` per token."""
    extra: np.ndarray | float = 0.0
    if model.post_decode_index is not None:
        extra = extra + _us(consts[model.post_decode_index], blis)
    if model.output_token_index is not None:
        extra = extra + _us(consts[model.output_token_index], blis) * out_tokens
    return extra


def _ttft_extra_us(model, consts: np.ndarray, blis: bool) -> float:
    """TTFT's time past the prefill step: BLIS adds ``OutputTokenProcessingTime`` to the
    first token as to every later one (``sim/simulator.go``); vLLM's loop adds nothing."""
    if not blis or model.output_token_index is None:
        return 0.0
    return _us(consts[model.output_token_index], blis)


def steady_mask(scenario, warmup_s: float = STEADY_WARMUP_S) -> np.ndarray:
    """Per request, whether it arrived ``warmup_s`` or more after the measured run began
    (a window's requests counted in the whole run's time: ``meta['offset_s']``)."""
    offset_us = float(scenario.meta.get("offset_s", 0.0)) * 1e6
    return scenario.arrival_us + offset_us >= warmup_s * 1e6


def _steady(ttft_s: np.ndarray, e2e_s: np.ndarray) -> dict[str, float]:
    """The steady percentiles of the given (steady, completed) requests' latencies."""
    out: dict[str, float] = {}
    if ttft_s.size:
        for key, (which, q) in STEADY_KEYS.items():
            out[key] = float(np.percentile(ttft_s if which == "ttft" else e2e_s, q))
    return out


def _measured(scenario) -> dict[str, float]:
    m = scenario.measured
    meas = {k: float(v) for k, v in m.summary.items() if k in METRIC_KEYS}
    ok = ~m.failed & np.isfinite(m.e2e_s) & np.isfinite(m.ttft_s)
    failed = m.failed
    if scenario.scored is not None:
        ok &= scenario.scored
        failed = failed & scenario.scored
    n = scenario.output_tokens[ok]
    if ok.any():
        meas["itl_mean"] = float(np.mean((m.e2e_s[ok] - m.ttft_s[ok]) / np.maximum(n - 1, 1)))
    st = ok & steady_mask(scenario)
    meas.update(_steady(m.ttft_s[st], m.e2e_s[st]))
    meas["failures"] = float(failed.sum())
    return meas


def _aggregate(ttft_s: np.ndarray, e2e_s: np.ndarray, out: np.ndarray,
               steady: np.ndarray | None = None) -> dict[str, float]:
    """Means and percentiles of the completed requests; ``steady``: which of them arrived
    after the warm-up (:func:`steady_mask`), for the steady percentiles."""
    if ttft_s.size == 0:
        return {}
    pred = {"e2e_mean": float(e2e_s.mean()), "ttft_mean": float(ttft_s.mean()),
            "itl_mean": float(np.mean((e2e_s - ttft_s) / np.maximum(out - 1, 1)))}
    for q in (50, 90, 99):
        pred[f"e2e_p{q}"] = float(np.percentile(e2e_s, q))
        pred[f"ttft_p{q}"] = float(np.percentile(ttft_s, q))
    if steady is not None:
        pred.update(_steady(ttft_s[steady], e2e_s[steady]))
    return pred


def _finish(rm: RunMetrics) -> RunMetrics:
    for k in METRIC_KEYS:
        if k in rm.pred and k in rm.meas:
            denom = max(rm.meas[k], 1.0) if k == "failures" else rm.meas[k]
            rm.ape[k] = abs(rm.pred[k] - rm.meas[k]) / denom if denom > 0 else float("inf")
    if rm.valid and ("e2e_mean" not in rm.ape or "ttft_mean" not in rm.ape):
        rm.valid, rm.reason = False, rm.reason or "no request completed"
    if rm.valid and not all(np.isfinite(v) for v in rm.ape.values()):
        rm.valid, rm.reason = False, "non-finite error"
    return rm


def _new(scenario) -> RunMetrics:
    weights = dict(DEFAULT_LOSS_WEIGHTS)
    weights.update(getattr(scenario, "loss_weights", None) or {})
    return RunMetrics(name=scenario.name, split=scenario.split, model=scenario.model,
                      workload=scenario.workload, loss_weights=weights)


def _done(corpus, scored: np.ndarray | None = None) -> np.ndarray:
    ok = (corpus.last_step >= 0) & (corpus.first_step >= 0) & ~corpus.aborted
    return ok if scored is None else ok & scored


def request_latencies(corpus, end_us: np.ndarray, consts: np.ndarray, model,
                      scored: np.ndarray | None = None, blis: bool = False
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Closed-loop (ok mask, TTFT s, E2E s) of the (scored) requests that completed;
    ``blis``: latencies as BLIS's loop reports them (:func:`blis_loop`)."""
    ok = _done(corpus, scored)
    arr = corpus.arrival_us[ok]
    out = corpus.output_tokens[ok]
    ttft = (end_us[corpus.first_step[ok]] - arr + _ttft_extra_us(model, consts, blis)) * 1e-6
    e2e = (end_us[corpus.last_step[ok]] - arr + _extra_us(model, consts, out, blis)) * 1e-6
    return ok, ttft, e2e


def metrics_from_times(scenario, corpus, end_us: np.ndarray, consts: np.ndarray, model,
                       error: str = "") -> RunMetrics:
    """Run metrics from step end times on a corpus (closed loop or teacher forced)."""
    rm = _new(scenario)
    rm.meas = _measured(scenario)
    if error:
        rm.valid, rm.reason = False, error
        return rm
    ok, ttft, e2e = request_latencies(corpus, end_us, consts, model, scenario.scored,
                                      blis_loop(scenario))
    out = corpus.output_tokens[ok]
    aborted = corpus.aborted if scenario.scored is None else corpus.aborted & scenario.scored
    rm.n_ok, rm.n_failed = int(ok.sum()), int(aborted.sum())
    rm.pred = _aggregate(ttft, e2e, out, steady_mask(scenario)[ok])
    rm.pred["failures"] = float(rm.n_failed)
    return _finish(rm)


NOISE_PERIOD = 1 << 16  # noise factors per stream, reused cyclically (runs: ~10^4-10^5 steps)


def noise_seed(name: str) -> int:
    """The noise stream's seed of a run: a digest of its name (never a clock)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little")


def run_step_noise(scenario) -> float:
    """The sigma a run is simulated with: its ``step_noise``, but none in BLIS's loop (BLIS
    calls ``StepTime`` deterministically, and its loop is simulated to match it)."""
    return 0.0 if blis_loop(scenario) else float(getattr(scenario, "step_noise", 0.0))


@lru_cache(maxsize=256)
def step_noise_factors(name: str, sigma: float) -> np.ndarray:
    """The run's step-time multipliers ``exp(sigma z - sigma^2/2)``, ``NOISE_PERIOD`` of them
    (empty when ``sigma`` is 0), cached per (run, sigma): callers must not write to it."""
    if sigma <= 0.0:
        out = np.zeros(0)
    else:
        z = np.random.default_rng(noise_seed(name)).standard_normal(NOISE_PERIOD)
        out = np.exp(sigma * z - 0.5 * sigma * sigma)
    return out


CHUNK_STEPS = 32768  # keeps a program's temporaries in cache: ~2x faster than one pass


def step_times(model, features: np.ndarray, consts: np.ndarray) -> np.ndarray:
    """``model.vector_fn`` over all steps, evaluated in cache-sized chunks."""
    n = features.shape[1]
    out = np.empty(n, dtype=np.float64)
    with np.errstate(all="ignore"):
        for a in range(0, n, CHUNK_STEPS):
            b = min(n, a + CHUNK_STEPS)
            out[a:b] = model.vector_fn(features[:, a:b], consts)
    return out


def _step_times(model, features: np.ndarray, consts: np.ndarray) -> tuple[np.ndarray, str]:
    t = step_times(model, features, consts)
    return t, step_time_problem(t) or ""


def _lifetimes(t: np.ndarray, admit: np.ndarray, first: np.ndarray, last: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    s = np.cumsum(t)
    before = np.where(admit > 0, s[np.maximum(admit - 1, 0)], 0.0)
    return s[first] - before, s[last] - before


def score_corpus(scenario, corpus, model, consts: np.ndarray) -> RunMetrics:
    """Teacher-forced metrics of ``model`` on a whole corpus."""
    from evaluator.features.components import compute_features

    rm = _new(scenario)
    rm.meas = _measured(scenario)
    t, err = _step_times(model, compute_features(corpus.stats, scenario.arch_vector), consts)
    noise = step_noise_factors(scenario.name, run_step_noise(scenario))
    if noise.size and t.size:  # the closed loop's factors, step for step
        t = t * noise[np.arange(t.size) % noise.size]
    try:
        q = queue_delay(scenario, model, consts)
    except ValueError as exc:
        err = err or str(exc)
    if err:
        rm.valid, rm.reason = False, err
        return rm
    ok = _done(corpus, scenario.scored)
    out = corpus.output_tokens[ok]
    to_first, to_last = _lifetimes(t, corpus.admit_step[ok], corpus.first_step[ok],
                                   corpus.last_step[ok])
    pre = q[ok] + corpus.wait_us[ok]
    blis = blis_loop(scenario)
    ttft = (pre + to_first + _ttft_extra_us(model, consts, blis)) * 1e-6
    e2e = (pre + to_last + _extra_us(model, consts, out, blis)) * 1e-6
    aborted = corpus.aborted if scenario.scored is None else corpus.aborted & scenario.scored
    rm.n_ok, rm.n_failed = int(ok.sum()), int(aborted.sum())
    rm.pred = _aggregate(ttft, e2e, out, steady_mask(scenario)[ok])
    rm.pred["failures"] = float(rm.n_failed)
    return _finish(rm)


def score_fit_set(scenario, fit, model, consts: np.ndarray) -> RunMetrics:
    """Teacher-forced means on the fitting windows, against the same requests' truth."""
    rm = _new(scenario)
    rm.meas = fit.meas
    if fit.req_index.size == 0:
        rm.valid, rm.reason = False, "no request inside the fitting windows"
        return rm
    t, err = _step_times(model, fit.features, consts)
    if err:
        rm.valid, rm.reason = False, err
        return rm
    pre = fit.wait_us
    if model.queue_fn is not None:
        try:
            pre = pre + queue_delay(scenario, model, consts)[fit.req_index]
        except ValueError as exc:
            rm.valid, rm.reason = False, str(exc)
            return rm
    out = fit.output_tokens
    to_first, to_last = _lifetimes(t, fit.admit_idx, fit.first_idx, fit.last_idx)
    blis = blis_loop(scenario)
    ttft = (pre + to_first + _ttft_extra_us(model, consts, blis)) * 1e-6
    e2e = (pre + to_last + _extra_us(model, consts, out, blis)) * 1e-6
    rm.pred = {"e2e_mean": float(e2e.mean()), "ttft_mean": float(ttft.mean()),
               "itl_mean": float(np.mean((e2e - ttft) / np.maximum(out - 1, 1)))}
    rm.n_ok = int(fit.req_index.size)
    return _finish(rm)


def run_loss(ape: Mapping[str, float], weights: Mapping[str, float] | None = None) -> float:
    """One run's term of :func:`loss`: the weighted mean of its squared APEs, mean E2E and
    mean TTFT at weight 1, each steady percentile (``STEADY_KEYS``) at its weight in
    ``weights`` (default :data:`DEFAULT_LOSS_WEIGHTS`), its APE capped at ``weights['cap']``.
    A percentile the run lacks (teacher-forced fitting windows price means only; a run cut
    before the warm-up ends) is left out of the mean, so without any this is the mean-only
    loss ``(e2e^2 + ttft^2) / 2``."""
    w = DEFAULT_LOSS_WEIGHTS if weights is None else {**DEFAULT_LOSS_WEIGHTS, **weights}
    num = float(ape["e2e_mean"]) ** 2 + float(ape["ttft_mean"]) ** 2
    den = 2.0
    cap = float(w["cap"])
    for key in STEADY_KEYS:
        wk = float(w.get(key, 0.0))
        if wk > 0 and key in ape:
            num += wk * min(float(ape[key]), cap) ** 2
            den += wk
    return num / den


def loss(metrics: Mapping[str, RunMetrics], names: Iterable[str] | None = None) -> float:
    """RMS over runs of :func:`run_loss` (mean-E2E and mean-TTFT APEs, plus the steady p90/p99
    TTFT and p99 E2E APEs at each run's ``loss_weights``); ``inf`` if any run is invalid."""
    names = list(names) if names is not None else sorted(metrics)
    if not names:
        return float("inf")
    acc = 0.0
    for n in names:
        rm = metrics[n]
        if not rm.valid:
            return float("inf")
        acc += run_loss(rm.ape, rm.loss_weights)
    return float(np.sqrt(acc / len(names)))
