"""Smooth max: prefill and decode costs combine as a p-norm, between a sum and a max.

p = 1 means the phases serialise (sum), large p means they overlap fully (max); the fit
chooses. (pf**p + dc**p)**(1/p) is smooth, which suits CMA-ES better than a hard max.
"""

CONSTANTS = {
    "p": (2.0, 1.0, 4.0),
    "prefill_eff": (1.5, 0.1, 20.0),
    "decode_mem_eff": (1.3, 0.1, 20.0),
    "decode_cmp_eff": (1.0, 0.001, 20.0),
    "comm": (1.0, 0.001, 20.0),
    "overhead_us": (3000.0, 10.0, 50000.0),
}


def step_time(f, c):
    pf = c.prefill_eff * (f.pf_gemm + f.pf_attn)
    dc = c.decode_mem_eff * (f.weight_read + f.kv_read) + c.decode_cmp_eff * (
        f.dc_gemm + f.dc_attn)
    return (pf ** c.p + dc ** c.p) ** (1.0 / c.p) + c.comm * f.tp_allreduce + c.overhead_us
