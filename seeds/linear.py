"""Linear black box: a fixed cost per step plus a cost per prefill and per decode token.

The published per-model baseline: no physics, three numbers per model. Fit it with
`--scope per_model`; as a global fit it cannot tell a 7B step from a 70B one.
"""

CONSTANTS = {
    "b0_us": (8000.0, 10.0, 100000.0),
    "prefill_us": (20.0, 0.01, 2000.0),
    "decode_us": (50.0, 0.01, 5000.0),
}


def step_time(f, c):
    return c.b0_us + c.prefill_us * f.prefill_tokens + c.decode_us * f.decode_tokens
