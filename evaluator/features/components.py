"""Fixed analytical component times per step, from the batch statistics and the model.

One numba kernel, :func:`features_into`, computes every feature of ``glossary.FEATURES``
for a block of steps. The closed-loop simulator calls it on one step at a time and the
teacher-forced scorer on a whole corpus, so both paths share one implementation (the Go
exporter mirrors it and is checked for parity). Formulas are in the glossary; the
architecture arrives as a flat float vector (``ARCH_FIELDS``) so numba can take it.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from evaluator.data.scenarios import ARCH_FIELDS
from evaluator.features import glossary as G
from evaluator.features.glossary import FEATURE_INDEX, N_FEATURES, STAT_INDEX
from evaluator.features.kernel_interp import kernel_times

A = {n: i for i, n in enumerate(ARCH_FIELDS)}
S = STAT_INDEX
F = FEATURE_INDEX

_US = 1e6  # seconds -> microseconds


@nb.njit(cache=True, fastmath=False)
def features_into(out: np.ndarray, stats: np.ndarray, arch: np.ndarray) -> None:
    """Fill ``out[N_FEATURES, n]`` from ``stats[N_STATS, n]`` for one model/GPU ``arch``
    (``ARCH_FIELDS``, then the packed kernel block of :mod:`evaluator.data.kernel_tables`, if
    any)."""
    layers = arch[0]
    hidden = arch[1]
    heads = arch[2]
    kv_heads = arch[3]
    head_dim = arch[4]
    inter = arch[5]
    n_exp = arch[6]
    topk = arch[7]
    vocab = arch[8]
    tp = arch[9]
    peak = arch[10] / _US  # FLOP per us
    bw = arch[11] / _US  # bytes per us
    nvl = arch[12] / _US
    bpp = arch[13]

    attn_proj = hidden * (hidden + 2.0 * kv_heads * head_dim) + hidden * hidden
    mlp = 3.0 * hidden * inter
    is_moe = 1.0 if n_exp > 1.0 else 0.0
    active_mlp = mlp * topk if is_moe > 0.0 else mlp
    lin_params = layers * (attn_proj + active_mlp)
    attn_scale = 4.0 * layers * (heads / tp) * head_dim
    kv_bytes_tok = 2.0 * layers * kv_heads * head_dim * bpp / tp
    ar_factor = 2.0 * (tp - 1.0) / tp if tp > 1.0 else 0.0
    n_arch = len(ARCH_FIELDS)
    measured = arch.shape[0] > n_arch and arch[n_arch] > 0.0
    kb = arch[n_arch:]

    for j in range(out.shape[1]):
        n_pf = stats[G.N_PREFILL, j]
        n_dc = stats[G.N_DECODE, j]
        pf_tok = stats[G.PREFILL_TOKENS, j]
        dc_tok = stats[G.DECODE_TOKENS, j]
        pf_pairs = stats[G.PF_ATTN_PAIRS, j]
        pf_ctx = stats[G.PF_KV_CTX, j]
        dc_kv = stats[G.DC_KV_SUM, j]
        kv_max = stats[G.KV_MAX, j]
        blis_pf = stats[G.BLIS_PF_ATTN, j]
        bs = n_pf + n_dc
        tokens = pf_tok + dc_tok
        # lm_head runs once per request in the batch (logits only at sampled positions).
        lm_head = 2.0 * hidden * vocab
        out[0, j] = (2.0 * pf_tok * lin_params + lm_head * n_pf) / tp / peak
        out[1, j] = attn_scale * pf_pairs / peak
        out[2, j] = (2.0 * dc_tok * lin_params + lm_head * n_dc) / tp / peak
        out[3, j] = attn_scale * (dc_kv + n_dc) / peak
        if is_moe > 0.0:
            touched = n_exp * (1.0 - (1.0 - topk / n_exp) ** tokens) if tokens > 0 else 0.0
            wbytes = layers * (attn_proj + touched * mlp) + hidden * vocab
        else:
            wbytes = layers * (attn_proj + mlp) + hidden * vocab
        out[4, j] = wbytes * bpp / tp / bw if bs > 0 else 0.0
        out[5, j] = kv_bytes_tok * (dc_kv + n_dc + pf_ctx) / bw
        out[6, j] = kv_bytes_tok * tokens / bw
        out[7, j] = 2.0 * layers * tokens * hidden * bpp * ar_factor / nvl
        out[8, j] = 2.0 * tokens * layers * topk * mlp / tp / peak if is_moe > 0.0 else 0.0
        out[9, j] = n_pf
        out[10, j] = n_dc
        out[11, j] = bs
        out[12, j] = pf_tok
        out[13, j] = dc_tok
        out[14, j] = dc_kv
        out[15, j] = kv_max
        out[16, j] = layers
        out[17, j] = tp
        out[18, j] = is_moe
        out[19, j] = attn_scale * blis_pf / peak
        if measured:
            kg, kd, kp = kernel_times(kb, tokens, bs, n_dc, dc_kv + n_dc, pf_pairs, layers,
                                      n_exp, topk)
        else:  # roofline: the slower of compute and memory traffic
            kg = max(out[0, j] + out[2, j], out[4, j])
            kd = max(out[3, j], kv_bytes_tok * (dc_kv + n_dc) / bw)
            kp = max(out[1, j], kv_bytes_tok * pf_ctx / bw)
        out[20, j] = kg
        out[21, j] = kd
        out[22, j] = kp
        out[23, j] = kg + kd + kp


def compute_features(stats: np.ndarray, arch: np.ndarray) -> np.ndarray:
    """Vectorised entry point: ``stats[N_STATS, n] -> features[N_FEATURES, n]`` (C order)."""
    stats = np.ascontiguousarray(stats, dtype=np.float64)
    out = np.empty((N_FEATURES, stats.shape[1]), dtype=np.float64)
    features_into(out, stats, np.ascontiguousarray(arch, dtype=np.float64))
    return out


def request_inputs(input_tokens: np.ndarray, output_tokens: np.ndarray,
                   arch: np.ndarray) -> np.ndarray:
    """``float64[N_REQUEST_FIELDS, n]``: what ``queueing_time`` reads of each request
    (``glossary.REQUEST_FIELDS``), the server's rows repeated from ``arch`` (ARCH_FIELDS)."""
    a = np.asarray(arch, dtype=np.float64)
    layers, hidden, kv_heads, head_dim, inter, n_exp = (a[A[k]] for k in (
        "layers", "hidden", "kv_heads", "head_dim", "intermediate", "n_experts"))
    attn_proj = hidden * (hidden + 2.0 * kv_heads * head_dim) + hidden * hidden
    experts = n_exp if n_exp > 1.0 else 1.0
    wbytes = layers * (attn_proj + experts * 3.0 * hidden * inter) + hidden * a[A["vocab"]]
    weight_us = wbytes * a[A["bytes_per_param"]] / a[A["tp"]] / (a[A["hbm_bw"]] / _US)
    n = np.shape(input_tokens)[0]
    out = np.empty((G.N_REQUEST_FIELDS, n), dtype=np.float64)
    out[0] = input_tokens
    out[1] = output_tokens
    out[2] = weight_us
    out[3] = layers
    out[4] = a[A["tp"]]
    out[5] = 1.0 if n_exp > 1.0 else 0.0
    return out


# Guard the positional ABI: if the glossary order changes, this fails at import.
assert [S[n] for n in ("n_prefill", "n_decode", "prefill_tokens", "decode_tokens",
                       "pf_attn_pairs", "pf_kv_ctx", "dc_kv_sum", "kv_max",
                       "blis_pf_attn")] == list(range(9))
assert [F[n] for n in ("pf_gemm", "pf_attn", "dc_gemm", "dc_attn", "weight_read", "kv_read",
                       "kv_write", "tp_allreduce", "moe_gemm", "n_prefill", "n_decode",
                       "batch_size", "prefill_tokens", "decode_tokens", "kv_sum", "kv_max",
                       "layers", "tp", "is_moe", "blis_pf_attn", "k_gemm", "k_dc_attn",
                       "k_pf_attn", "k_step")] == list(range(N_FEATURES))
assert G.REQUEST_FIELD_NAMES == ("input_tokens", "output_tokens", "weight_us", "layers", "tp",
                                 "is_moe")
