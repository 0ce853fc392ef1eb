"""Measured kernels: the step's kernel time from the H100 microbenchmarks, plus overheads.

Why: ``k_gemm``, ``k_dc_attn`` and ``k_pf_attn`` are the measured latencies of exactly this
model's kernels at this batch (docs/kernels.md), so how a step's cost grows with context
length and batch size comes from the GPU, not from the training runs (whose contexts stay
under ~850 tokens). The fit only scales them (an efficiency held near 1) and prices what
the kernels do not contain: the TP all-reduce, per-request work (sampling, block tables)
and a per-step cost (scheduling, launch gaps).
"""

CONSTANTS = {
    "kernel_eff": (1.0, 0.7, 1.6),
    "comm": (1.0, 0.001, 10.0),
    "per_req_us": (20.0, 0.0, 500.0),
    "per_step_us": (3000.0, 10.0, 30000.0),
    "queue_us": (15000.0, 0.0, 100000.0),
    "post_decode_us": (800.0, 0.0, 50000.0),
    "output_token_us": (40.0, 0.0, 2000.0),
}


def step_time(f, c):
    return c.kernel_eff * f.k_step + c.comm * f.tp_allreduce + c.per_req_us * f.batch_size \
        + c.per_step_us


def queueing_time(r, c):
    return c.queue_us
