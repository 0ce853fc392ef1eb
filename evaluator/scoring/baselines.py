"""The published step-time models, as ``StepModel`` objects the simulator can run.

* ``trained_physics``: BLIS ``trained-physics`` (sim/latency/trained_physics_model.go) with
  its published coefficients: its roofline bases, corrected by 11 betas, plus alpha
  (QueueingTime, PostDecodeFixedOverhead, OutputTokenProcessingTime).
* ``roofline``: BLIS ``roofline`` (sim/latency/roofline.go): max(compute at MFU 0.45
  prefill / 0.30 decode, memory traffic at peak bandwidth), summed per request.
* ``linear``: ``b0 + b1*prefill_tokens + b2*decode_tokens`` per model, fitted here to the
  train-split runs of that model (the teacher-forced loss is linear in the coefficients:
  solved exactly by NNLS, re-simulated three times so the batches follow the fit).

Both BLIS models need per-model architecture factors; they travel in the constant vector
(``c``) next to the coefficients, so one compiled function serves every model. Batch sums
the glossary stores only inside a feature (e.g. the prefill attention pairs) are recovered
by dividing the feature by its architecture factor, exact up to float rounding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numba as nb
import numpy as np
from scipy.optimize import nnls

from evaluator.data.scenarios import Scenario
from evaluator.features.glossary import DECODE_TOKENS, PREFILL_TOKENS
from evaluator.features.glossary import FEATURE_INDEX as FI
from evaluator.model import STEP_SIG as _STEP_SIG
from evaluator.model import ConstMap, StepModel
from evaluator.scoring.score import wait_limit_us


class RunSet(Protocol):
    """What fitting the linear baseline needs of an evaluator (``evaluator.api.Evaluator``).

    A protocol, not the class: the API is built on this module, so naming it here would
    close an import cycle.
    """

    @property
    def scenarios(self) -> Sequence[Scenario]: ...

    @property
    def by_name(self) -> Mapping[str, Scenario]: ...

    def names(self, split: str) -> list[str]: ...

    def simulate(self, model: StepModel, consts: ConstMap, names: Sequence[str] | None = ...
                 ) -> Mapping[str, Any]: ...

TP_ALPHA = (15563.2, 777.3, 45.9)
TP_BETA = (0.152128, 0.0, 1.36252915, 0.752037, 32.09546717, 4.41684444, 126.024825,
           481.8613888, 0.0, 1.94710771, 0.752037)
MFU_PREFILL, MFU_DECODE = 0.45, 0.30

_PT, _DT, _BS, _KV = FI["prefill_tokens"], FI["decode_tokens"], FI["batch_size"], FI["kv_sum"]
_BPF, _PFA, _KVR = FI["blis_pf_attn"], FI["pf_attn"], FI["kv_read"]
_NDC = FI["n_decode"]


def _arch(sc: Scenario) -> dict[str, float]:
    a = sc.arch
    d, h, kvh, tp = float(a.hidden), float(a.heads), float(a.kv_heads), float(sc.server.tp)
    dh = d / h
    dkv = kvh * dh
    k_eff = float(max(1, a.topk)) if a.is_moe else 1.0
    return {"L": float(a.layers), "d": d, "h": h, "kvh": kvh, "dh": dh, "dkv": dkv,
            "dff": float(a.intermediate), "k": k_eff, "E": float(a.n_experts), "tp": tp,
            "peak": sc.hardware.peak_flops / 1e6, "bw": sc.hardware.hbm_bw / 1e6,
            "bpp": 2.0, "moe": 1.0 if a.is_moe else 0.0}


# ---- BLIS trained-physics -------------------------------------------------------------
# c = [beta0..beta10, K1 proj+ffn us/token, K2 kv-write us/token, K3 dc-attn us/ctx token,
#      T_weight us, K5 all-reduce us/token, L, queue_us, post_us, out_us]

def trained_physics_consts(sc: Scenario, alpha=TP_ALPHA, beta=TP_BETA) -> np.ndarray:
    g = _arch(sc)
    L, d, dkv, tp, peak, bw, bpp = g["L"], g["d"], g["dkv"], g["tp"], g["peak"], g["bw"], 2.0
    k1 = (L * 2 * d * (2 * d + 2 * dkv) / tp + L * 6 * d * g["dff"] * g["k"] / tp) / peak
    k2 = L * 2 * (dkv / tp) * 2.0 / bw
    k3 = L * 4 * (g["h"] / tp) * g["dh"] / peak
    ffn_w = (L * (g["E"] / tp) * 3 * d * g["dff"] * bpp if g["moe"]
             else L * 3 * d * g["dff"] * bpp / tp)
    t_w = (L * d * (2 * d + 2 * dkv) * bpp / tp + ffn_w) / bw
    k5 = 2 * L * d * bpp * 2.0 * (tp - 1) / tp / bw if tp > 1 else 0.0
    return np.array([*beta, k1, k2, k3, t_w, k5, L, *alpha], dtype=np.float64)


def _tp_formula(f, c):
    """One step (``f`` a feature vector) or many (``f`` a feature matrix): same code."""
    tpf, tdc, b, ctx = f[_PT], f[_DT], f[_BS], f[_KV]
    pf_c = c[11] * tpf + f[_BPF]
    pf_kv = c[12] * tpf
    dc_c = c[11] * tdc + c[13] * ctx
    dc_kv = c[12] * (ctx + tdc)
    return (c[0] * pf_c + c[8] * pf_kv + c[1] * dc_c + c[9] * dc_kv + c[2] * c[14]
            + c[3] * c[15] * (tpf + tdc) + c[4] * c[16] + c[5] * b + c[6])


TRAINED_PHYSICS = StepModel("blis-trained-physics", _tp_formula,
                            nb.njit(_STEP_SIG, cache=True)(_tp_formula),
                            queue_fn=lambda R, c: np.full(R.shape[1], c[17]),
                            post_decode_index=18, output_token_index=19)


# ---- BLIS roofline ----------------------------------------------------------------------
# c = [Kg flops/token, Ka flops/ctx-token, 1/attn_scale (pairs per pf_attn us), kv bytes
#      per token per GPU, activation bytes per token per GPU, attn weight bytes per GPU,
#      mlp weight bytes per expert per GPU, E, k, moe, peak*mfu_pf, peak*mfu_dc, bw,
#      kv_read us -> kv tokens]

def roofline_consts(sc: Scenario) -> np.ndarray:
    g = _arch(sc)
    L, d, dkv, h, dh, tp, bpp = g["L"], g["d"], g["dkv"], g["h"], g["dh"], g["tp"], 2.0
    kg = L * (2 * (d * d + 2 * d * dkv) + 2 * d * d + 2 * d + 2 * 2 * d * g["dff"] * g["k"]) / tp
    ka = L * (4 * h * dh + 5 * h) / tp
    attn_scale = 4.0 * L * (h / tp) * dh / g["peak"]  # glossary pf_attn us per pair
    kvb = 2 * L * g["kvh"] * dh * bpp / tp
    act = L * d * bpp / tp
    w_attn = L * (d * (d + 2 * dkv) + d * d) * bpp / tp
    w_mlp = L * 2 * d * g["dff"] * bpp / tp
    kvr_scale = (2.0 * L * g["kvh"] * dh * bpp / tp) / g["bw"]  # glossary kv_read us/token
    return np.array([kg, ka, 1.0 / attn_scale, kvb, act, w_attn, w_mlp, g["E"], g["k"],
                     g["moe"], g["peak"] * MFU_PREFILL, g["peak"] * MFU_DECODE, g["bw"],
                     1.0 / kvr_scale], dtype=np.float64)


def _rl_formula(f, c):
    """One step or many, like ``_tp_formula``."""
    tpf, tdc, ctx = f[_PT], f[_DT], f[_KV]
    pf_ctx_pairs = f[_PFA] * c[2] - tpf  # sum t*(k + (t-1)/2) over prefill requests
    pf_k = f[_KVR] * c[13] - ctx - f[_NDC] - tpf  # sum k over prefill requests
    comp = (c[0] * tpf + c[1] * pf_ctx_pairs) / c[10] + (c[0] * tdc + c[1] * ctx) / c[11]
    tokens = tpf + tdc
    dyn = c[3] * (tokens + pf_k + ctx) + c[4] * tokens
    n_eff = c[7] * (1.0 - ((c[7] - c[8]) / c[7]) ** tokens) if c[9] > 0.0 else 1.0
    mem = (c[5] + c[6] * n_eff + dyn) / c[12]
    return np.maximum(comp, mem)


ROOFLINE = StepModel("blis-roofline", _rl_formula,
                     nb.njit(_STEP_SIG, cache=True)(_rl_formula))


# ---- per-model linear -------------------------------------------------------------------

def _lin_formula(f, c):
    return c[0] + c[1] * f[_PT] + c[2] * f[_DT]


LINEAR = StepModel("linear-per-model", _lin_formula,
                   nb.njit(_STEP_SIG, cache=True)(_lin_formula))
LINEAR_INIT = np.array([5000.0, 10.0, 50.0])


def _linear_rows(sc: Scenario, corpus, max_rows: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """Rows of the (exactly linear) teacher-forced E2E/TTFT equations of one run.

    With ``t = b0 + b1*prefill_tokens + b2*decode_tokens`` a request's teacher-forced
    latency is its pre-admission wait plus ``b`` dotted with the sums of (1, prefill
    tokens, decode tokens) over its lifetime: linear in ``b``. One row per request (a
    deterministic subsample), relative to its measured E2E and TTFT, so runs and load
    stages with different batch mixes pin down all three coefficients.
    """
    m = sc.measured
    ok = (corpus.last_step >= 0) & (corpus.first_step >= 0) & ~corpus.aborted
    ok &= ~m.failed & np.isfinite(m.e2e_s) & np.isfinite(m.ttft_s)
    ok &= corpus.wait_us <= wait_limit_us(m.ttft_s)
    idx = np.flatnonzero(ok)
    idx = idx[:: max(1, idx.size // max_rows)]
    basis = np.vstack([np.ones(corpus.n_steps), corpus.stats[PREFILL_TOKENS],
                       corpus.stats[DECODE_TOKENS]])
    cs = np.cumsum(basis, axis=1)
    adm = corpus.admit_step[idx]
    before = np.where(adm > 0, cs[:, np.maximum(adm - 1, 0)], 0.0)
    to_first = cs[:, corpus.first_step[idx]] - before
    to_last = cs[:, corpus.last_step[idx]] - before
    wait = corpus.wait_us[idx]
    e2e, ttft = m.e2e_s[idx] * 1e6, m.ttft_s[idx] * 1e6
    a = np.hstack([to_last / e2e, to_first / ttft]).T / np.sqrt(idx.size)
    y = np.concatenate([1.0 - wait / e2e, 1.0 - wait / ttft]) / np.sqrt(idx.size)
    return a, y


def fit_linear(ev: RunSet, rounds: int = 6) -> ConstMap:
    """Fit ``LINEAR`` per model on that model's train runs; return constants per scenario.

    Each round simulates the train runs closed loop with the current constants, then
    solves the linear teacher-forced equations by NNLS; a few rounds let the batches
    follow the fitted model.
    """
    consts = {s.name: LINEAR_INIT.copy() for s in ev.scenarios}
    train = ev.names("train")
    for _ in range(rounds):
        sims = ev.simulate(LINEAR, consts, names=train)
        for m in sorted({s.model for s in ev.scenarios}):
            rows = [_linear_rows(ev.by_name[n], sims[n].corpus)
                    for n in train if ev.by_name[n].model == m]
            if not rows:
                continue
            b, _ = nnls(np.vstack([r[0] for r in rows]), np.concatenate([r[1] for r in rows]))
            b = np.maximum(b, [1.0, 0.0, 0.0])  # keep every step time positive
            for s in ev.scenarios:
                if s.model == m:  # damped: batches and coefficients settle together
                    consts[s.name] = 0.5 * consts[s.name] + 0.5 * b
    return consts


def baseline_models(ev: RunSet, only: Sequence[str] | None = None
                    ) -> dict[str, tuple[StepModel, ConstMap]]:
    """Each baseline with its constants per scenario (the linear one fitted here)."""
    out: dict[str, tuple[StepModel, ConstMap]] = {}
    want = set(only or ("trained-physics", "roofline", "linear"))
    if "trained-physics" in want:
        out["trained-physics"] = (TRAINED_PHYSICS,
                                  {s.name: trained_physics_consts(s) for s in ev.scenarios})
    if "roofline" in want:
        out["roofline"] = (ROOFLINE, {s.name: roofline_consts(s) for s in ev.scenarios})
    if "linear" in want:
        out["linear"] = (LINEAR, fit_linear(ev))
    return out
