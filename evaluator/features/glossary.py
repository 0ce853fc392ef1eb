"""The one glossary of per-step quantities: raw batch statistics and program features.

Why one place: the language whitelist, the LLM prompts, the Go exporter and the feature
computation all read these tables, so a feature cannot mean one thing in numpy and another
in Go. The *order* of each tuple is an ABI: the simulator and the compiled programs index
statistic and feature vectors by position (``STAT_INDEX`` / ``FEATURE_INDEX``).

Notation for one step's batch, per request i: ``t_i`` tokens scheduled this step
(``new_tokens``), ``k_i`` tokens already in its KV cache before the step (``kv_len``),
``s_i`` its prompt length; a request is *prefill* while ``k_i < s_i`` (BLIS: ProgressIndex <
InputLen), otherwise *decode* (``t_i == 1``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    """One glossary row: what a quantity is, in what unit, computed how, and from what."""

    name: str
    unit: str
    formula: str
    source: str


# Raw statistics the simulator records for every step (one float64 row each).
STATS: tuple[Entry, ...] = (
    Entry("n_prefill", "requests", "count of prefill requests (k_i < s_i)", "batch"),
    Entry("n_decode", "requests", "count of decode requests (k_i >= s_i)", "batch"),
    Entry("prefill_tokens", "tokens", "sum over prefill requests of t_i", "batch"),
    Entry("decode_tokens", "tokens", "sum over decode requests of t_i (= n_decode)", "batch"),
    Entry("pf_attn_pairs", "query-key pairs",
          "sum over prefill requests of t_i * (k_i + (t_i + 1) / 2): causal attention pairs of"
          " a chunk against its cached context and itself", "batch"),
    Entry("pf_kv_ctx", "tokens", "sum over prefill requests of k_i + t_i: KV positions a"
          " prefill chunk attends over", "batch"),
    Entry("dc_kv_sum", "tokens", "sum over decode requests of k_i (tokens cached, BLIS"
          " ProgressIndex)", "batch"),
    Entry("kv_max", "tokens", "max over the batch of k_i + t_i", "batch"),
    Entry("blis_pf_attn", "query-key pairs", "sum over prefill requests of t_i * (s_i + t_i"
          " / 2): BLIS trained-physics prefill attention basis", "BLIS trained_physics_model.go"),
)
STAT_NAMES: tuple[str, ...] = tuple(e.name for e in STATS)
STAT_INDEX: dict[str, int] = {n: i for i, n in enumerate(STAT_NAMES)}
N_STATS = len(STATS)
# Row of each statistic in ``stats[N_STATS, n]``, named so the numba kernels (which read
# module-level ints as compile-time constants) never index a row by a bare number.
(N_PREFILL, N_DECODE, PREFILL_TOKENS, DECODE_TOKENS, PF_ATTN_PAIRS, PF_KV_CTX, DC_KV_SUM,
 KV_MAX, BLIS_PF_ATTN) = range(N_STATS)
assert STAT_NAMES[KV_MAX] == "kv_max" and STAT_NAMES[BLIS_PF_ATTN] == "blis_pf_attn"

_PEAK = "H100 dense bf16 989.5 TFLOP/s"
_HBM = "H100 HBM 3.35 TB/s"
_KERNELS = ("H100 microbenchmarks (data kernels/bench_data), interpolated as docs/kernels.md"
            " says; roofline max(flops/peak, bytes/bw) where a data directory has none")

# Features a program may read as ``f.<name>``. Times are microseconds on one GPU of the TP
# group (work divided by tp).
FEATURES: tuple[Entry, ...] = (
    Entry("pf_gemm", "us", "2 * prefill_tokens * linear_params_per_token / tp / peak_flops"
          " (q,k,v,o projections + MLP; MoE: top-k experts)", _PEAK),
    Entry("pf_attn", "us", "4 * layers * heads/tp * head_dim * pf_attn_pairs / peak_flops",
          _PEAK),
    Entry("dc_gemm", "us", "2 * decode_tokens * linear_params_per_token / tp / peak_flops",
          _PEAK),
    Entry("dc_attn", "us", "4 * layers * heads/tp * head_dim * (dc_kv_sum + n_decode) /"
          " peak_flops", _PEAK),
    Entry("weight_read", "us", "bytes of weights touched this step / tp / hbm_bw (MoE: expected"
          " distinct experts hit, E * (1 - (1 - topk/E)^tokens))", _HBM),
    Entry("kv_read", "us", "kv_bytes_per_token/tp * (dc_kv_sum + n_decode + pf_kv_ctx) /"
          " hbm_bw", _HBM),
    Entry("kv_write", "us", "kv_bytes_per_token/tp * (prefill_tokens + decode_tokens) /"
          " hbm_bw", _HBM),
    Entry("tp_allreduce", "us", "2 * layers * tokens * hidden * 2 bytes * 2 (tp-1)/tp /"
          " nvlink_bw; 0 at tp=1", "H100 NVLink 900 GB/s"),
    Entry("moe_gemm", "us", "expert part of pf_gemm + dc_gemm: 2 * tokens * layers * topk * 3 *"
          " hidden * expert_ffn / tp / peak_flops; 0 for dense models", _PEAK),
    Entry("n_prefill", "requests", "prefill requests in the step", "batch"),
    Entry("n_decode", "requests", "decode requests in the step", "batch"),
    Entry("batch_size", "requests", "n_prefill + n_decode", "batch"),
    Entry("prefill_tokens", "tokens", "prefill tokens scheduled", "batch"),
    Entry("decode_tokens", "tokens", "decode tokens scheduled", "batch"),
    Entry("kv_sum", "tokens", "sum of cached tokens over decode requests", "batch"),
    Entry("kv_max", "tokens", "longest context in the step (k_i + t_i)", "batch"),
    Entry("layers", "layers", "transformer layers (config.json num_hidden_layers)", "config"),
    Entry("tp", "GPUs", "tensor-parallel degree", "server config"),
    Entry("is_moe", "0/1", "1 for mixture-of-experts models", "config"),
    Entry("blis_pf_attn", "us", "4 * layers * heads/tp * head_dim * blis_pf_attn / peak_flops"
          " (BLIS trained-physics prefill attention basis)", "BLIS trained_physics_model.go"),
    Entry("k_gemm", "us", "measured GEMM latency of the step: the model's fused qkv, o,"
          " gate_up and down projections at prefill_tokens + decode_tokens rows (MoE: expected"
          " experts hit, each at its share of the tokens) and lm_head at batch_size rows",
          _KERNELS),
    Entry("k_dc_attn", "us", "measured decode attention: layers * table(n_decode, mean k_i + 1"
          " over decode requests)", _KERNELS),
    Entry("k_pf_attn", "us", "measured prefill attention: layers * table(sqrt(2 *"
          " pf_attn_pairs)) / tp (one sequence of the same causal work)", _KERNELS),
    Entry("k_step", "us", "k_gemm + k_dc_attn + k_pf_attn: the step's measured kernel time,"
          " a floor the real step (plus launch gaps, sampling, all-reduce) stays above",
          _KERNELS),
)
FEATURE_NAMES: tuple[str, ...] = tuple(e.name for e in FEATURES)
FEATURE_INDEX: dict[str, int] = {n: i for i, n in enumerate(FEATURE_NAMES)}
# The features interpolated from the measured kernel tables (the rest are closed forms).
KERNEL_FEATURES: frozenset[str] = frozenset(("k_gemm", "k_dc_attn", "k_pf_attn", "k_step"))
N_FEATURES = len(FEATURES)

# What ``queueing_time(r, c)`` may read as ``r.<name>``: the request, and the server it
# arrives at. Why the server: a queueing delay that stands for engine steps (BLIS's loop
# has no async scheduling, so measured TTFT holds about 1.75 decode steps more than BLIS
# simulates; docs/blis.md) must scale with the step of the model it runs on, or one
# global constant misses a model nobody measured by a third (docs/selection.md).
REQUEST_FIELDS: tuple[Entry, ...] = (
    Entry("input_tokens", "tokens", "prompt length (BLIS InputLen())", "request"),
    Entry("output_tokens", "tokens", "output length (BLIS len(OutputTokens))", "request"),
    Entry("weight_us", "us", "every weight once (all experts) * bytes_per_param / tp / hbm_bw:"
          " the weight stream of a step on one GPU of the TP group", _HBM),
    Entry("layers", "layers", "transformer layers (config.json num_hidden_layers)", "config"),
    Entry("tp", "GPUs", "tensor-parallel degree", "server config"),
    Entry("is_moe", "0/1", "1 for mixture-of-experts models", "config"),
)
REQUEST_FIELD_NAMES: tuple[str, ...] = tuple(e.name for e in REQUEST_FIELDS)
N_REQUEST_FIELDS = len(REQUEST_FIELDS)

# Hardware constants (H100 SXM, dense). The datasheet's 1979 TFLOP/s bf16 is the sparse
# figure (data README trap 6); dense is half.
PEAK_FLOPS = 989.5e12
HBM_BW = 3.35e12
NVLINK_BW = 900e9
BYTES_PER_PARAM = 2.0
