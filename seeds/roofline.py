# ruff: noqa: F821  (a program in the evolve language: its calls are the language's own)
"""Roofline: a step costs the larger of its compute time and its memory time.

Compute (all GEMMs and attention) and memory traffic (weights, KV reads and writes) each
get a fitted efficiency; tensor-parallel communication does not overlap and is added, as
is a fixed per-step overhead (launches, scheduling, sampling). Fit it global: the
efficiencies should transfer across models.
"""

CONSTANTS = {
    "compute_eff": (1.5, 0.2, 20.0),
    "memory_eff": (1.2, 0.2, 20.0),
    "comm": (1.0, 0.001, 20.0),
    "overhead_us": (3000.0, 10.0, 50000.0),
}


def step_time(f, c):
    compute = f.pf_gemm + f.pf_attn + f.dc_gemm + f.dc_attn
    memory = f.weight_read + f.kv_read + f.kv_write
    return maximum(c.compute_eff * compute, c.memory_eff * memory) + c.comm * f.tp_allreduce \
        + c.overhead_us
