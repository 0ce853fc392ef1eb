# ruff: noqa: F821  (a program in the evolve language: its calls are the language's own)
"""Phase max: prefill and decode work overlap within a step, so the slower phase sets it.

Prefill is priced by its compute (GEMMs + causal attention), decode by the memory it must
stream (weights + KV cache) plus its small compute; the step takes the larger of the two,
then TP communication and a fixed overhead are added.
"""

CONSTANTS = {
    "prefill_eff": (1.5, 0.1, 20.0),
    "decode_mem_eff": (1.3, 0.1, 20.0),
    "decode_cmp_eff": (1.0, 0.001, 20.0),
    "comm": (1.0, 0.001, 20.0),
    "overhead_us": (3000.0, 10.0, 50000.0),
}


def step_time(f, c):
    prefill = c.prefill_eff * (f.pf_gemm + f.pf_attn)
    decode = c.decode_mem_eff * (f.weight_read + f.kv_read) + c.decode_cmp_eff * (
        f.dc_gemm + f.dc_attn)
    return maximum(prefill, decode) + c.comm * f.tp_allreduce + c.overhead_us
