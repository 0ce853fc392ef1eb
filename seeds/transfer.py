# ruff: noqa: F821  (a program in the evolve language: its calls are the language's own)
"""Trained physics with the TP all-reduce's latency: model differences carried by features.

Why: a model nobody measured has no constants of its own, so everything that makes one
model's step slower than another's must come from its shape (layers, TP degree, weight and
KV bytes), not from per-model constants. BLIS's trained-physics seed prices the all-reduce
by bandwidth only; at decode batch sizes the messages are small and each of the two
all-reduces per layer pays the ring's latency, about 2 (tp - 1) hops, so a per-layer
(tp - 1) term is what separates TP1, TP2 and TP4 servers. It replaces BLIS's per-request
term (fitted near zero on these runs). Initial values are BLIS's published coefficients
(seeds/trained_physics.py says how they map) and 10 us per layer per extra GPU for the
latency (two all-reduces, ~2.5 us per hop): the prior of `fit.prior_strength` keeps
what short-context runs cannot pin at those values.
"""

CONSTANTS = {
    "pf": (0.152128, 0.01, 10.0),
    "dc_kv": (1.94710771, 0.01, 20.0),
    "weight": (1.36252915, 0.05, 10.0),
    "tp": (0.20204, 0.001, 5.0),
    "ar_lat": (10.0, 0.0, 200.0),
    "per_layer": (32.09546717, 0.01, 500.0),
    "per_step": (126.024825, 1.0, 20000.0),
    "queue_us": (15563.2, 1.0, 200000.0),
    "post_decode_us": (777.3, 0.0, 50000.0),
    "output_token_us": (45.9, 0.0, 2000.0),
}


def step_time(f, c):
    kv_token_us = f.kv_write / maximum(f.prefill_tokens + f.decode_tokens, 1.0)
    decode_kv = kv_token_us * (f.kv_sum + f.n_decode)
    prefill = c.pf * (f.pf_gemm + f.blis_pf_attn)
    memory = c.dc_kv * decode_kv + c.weight * f.weight_read
    overhead = (c.per_layer + c.ar_lat * (f.tp - 1.0)) * f.layers + c.per_step
    return prefill + memory + c.tp * f.tp_allreduce + overhead


def queueing_time(r, c):
    return c.queue_us
