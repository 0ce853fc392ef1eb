# ruff: noqa: F821  (a program in the evolve language: its calls are the language's own)
"""Measured kernels plus the overheads a step adds to them, each tied to the count it scales with.

Why: a model nobody measured has no constants of its own; it gets one global set, so every
constant has to mean the same thing on every server. The `kernels` seed prices a step as
measured kernel time plus one per-step constant, but that constant is what differs most
between servers: a decode step's period minus its kernel time is about 2 ms on the TP 1
Llama-2-7B server and 3-6 ms on the TP 2 and TP 4 ones (steps/enriched_steps.parquet, the
runs' decode intervals). Here the overhead is split by what it scales with, a count the
model's config.json gives: every layer runs small kernels that the GEMM and attention
tables do not hold (norms, rotary, activation, KV write) and launch gaps between them; an
MoE layer adds routing, expert alignment and the fused-MoE kernels' lower efficiency; with
tensor parallelism each layer adds two all-reduces whose latency does not shrink with the
message (`tp_allreduce` prices only their bandwidth). A microsecond-scale cost per layer
or per all-reduce carries from one model to the next; a per-server sum does not.

Weights: a decode GEMM streams its weights from HBM, so the step's GEMM time is at least
`weight_read` (the weights at the 3.35 TB/s peak). The GEMM microbenchmarks at small m
report up to 4.3 TB/s (faster than HBM; the benchmark's repeated calls find the weights
in L2), so `k_gemm` alone undercuts decode steps, most for Mixtral's experts.

Declared values are priors from outside these runs: BLIS's published trained-physics
per-layer (beta5), per-request (beta6) and per-step (beta7) costs and its alpha
coefficients; an MoE layer's extra cost starts equal to a dense layer's; 15 us per
small-message NVLink all-reduce.
"""

CONSTANTS = {
    "kernel_eff": (1.0, 0.7, 1.6),
    "comm": (1.0, 0.001, 10.0),
    "allreduce_us": (15.0, 0.5, 200.0),
    "per_layer_us": (32.09546717, 0.0, 400.0),
    "moe_layer_us": (32.09546717, 0.0, 400.0),
    "per_req_us": (4.41684444, 0.0, 500.0),
    "per_step_us": (126.024825, 10.0, 30000.0),
    "queue_us": (15563.2, 0.0, 100000.0),
    "post_decode_us": (777.3, 0.0, 50000.0),
    "output_token_us": (45.9, 0.0, 2000.0),
}


def step_time(f, c):
    sharded = minimum(f.tp - 1.0, 1.0)
    layer_us = c.per_layer_us + c.moe_layer_us * f.is_moe + 2.0 * c.allreduce_us * sharded
    kernels = maximum(f.k_gemm, f.weight_read) + f.k_dc_attn + f.k_pf_attn
    return c.kernel_eff * kernels + c.comm * f.tp_allreduce + c.per_req_us * f.batch_size \
        + f.layers * layer_us + c.per_step_us


def queueing_time(r, c):
    return c.queue_us
