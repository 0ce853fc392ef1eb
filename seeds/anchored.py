# ruff: noqa: F821  (a program in the evolve language: its calls are the language's own)
"""Physics-anchored: roofline parts with efficiencies held to plausible ranges, plus overheads.

Why: the training runs have short contexts (under ~850 tokens), so a free coefficient on KV
traffic is barely determined by them and drifts to zero; long-context runs (the reasoning
workload, 1,448 output tokens) then run far too fast. Here memory traffic (weights + KV
reads/writes) runs at 25-100 % of peak bandwidth and GEMMs at 10-100 % of peak FLOP/s, so
the KV term keeps its physical weight. A step is bound by the slower of memory and compute
(they overlap on the GPU; summing them at peak rates already overshoots the measured
steps); per-request and per-step overheads, the TP all-reduce, and the API's queueing and
per-token streaming costs are fitted freely.
"""

CONSTANTS = {
    "mem_eff": (1.5, 1.0, 4.0),
    "gemm_eff": (2.0, 1.0, 10.0),
    "comm": (1.0, 0.001, 10.0),
    "per_req_us": (20.0, 0.0, 500.0),
    "per_step_us": (3000.0, 10.0, 30000.0),
    "queue_us": (15000.0, 0.0, 100000.0),
    "post_decode_us": (800.0, 0.0, 50000.0),
    "output_token_us": (40.0, 0.0, 2000.0),
}


def step_time(f, c):
    memory = c.mem_eff * (f.weight_read + f.kv_read + f.kv_write)
    compute = c.gemm_eff * (f.pf_gemm + f.pf_attn + f.dc_gemm + f.dc_attn)
    return maximum(memory, compute) + c.comm * f.tp_allreduce + c.per_req_us * f.batch_size \
        + c.per_step_us


def queueing_time(r, c):
    return c.queue_us
