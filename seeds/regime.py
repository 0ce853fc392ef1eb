# ruff: noqa: F821  (a program in the evolve language: its calls are the language's own)
"""Two regimes: small batches are memory bound, large ones compute bound.

Below a fitted token count (`knee`) a step streams the weights and KV cache and its
compute hides underneath (charged at a small fraction); above it the GEMMs dominate and
the memory traffic is the part that only partly overlaps. `where` switches between the two
linear models, each with its own efficiencies.
"""

CONSTANTS = {
    "knee": (256.0, 8.0, 2048.0),
    "mem_eff": (1.3, 0.1, 20.0),
    "cmp_eff": (1.5, 0.1, 20.0),
    "hidden_cmp": (0.2, 0.0, 2.0),
    "hidden_mem": (0.2, 0.0, 2.0),
    "comm": (1.0, 0.001, 20.0),
    "overhead_us": (3000.0, 10.0, 50000.0),
}


def step_time(f, c):
    tokens = f.prefill_tokens + f.decode_tokens
    memory = f.weight_read + f.kv_read + f.kv_write
    compute = f.pf_gemm + f.pf_attn + f.dc_gemm + f.dc_attn
    small = c.mem_eff * memory + c.hidden_cmp * compute
    large = c.cmp_eff * compute + c.hidden_mem * memory
    return where(tokens < c.knee, small, large) + c.comm * f.tp_allreduce + c.overhead_us
