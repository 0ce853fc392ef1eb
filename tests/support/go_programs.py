"""Programs and models the Go-export tests share: the four measured architectures with the
names BLIS passes for them, and hand-written programs that between them use every operator,
call and special constant the translator must handle."""

# (group = Scenario.model, model dir, TP, the name BLIS passes as hw.Model)
MODELS = (
    ("llama-2-7b", "Llama-2-7b-hf", 1, "meta-llama/Llama-2-7b-hf"),
    ("llama-2-70b", "Llama-2-70b-hf", 4, "llama-2-70b"),
    ("mixtral-8x7b", "Mixtral-8x7B-v0.1", 2, "mistralai/mixtral-8x7b-v0.1"),
    ("codellama-34b", "CodeLlama-34b-Instruct-hf", 2, "CodeLlama-34b-Instruct-hf"),
)
MODEL_IDS = {"llama-2-7b": "meta-llama/Llama-2-7b-hf", "llama-2-70b": "meta-llama/Llama-2-70b-hf",
             "mixtral-8x7b": "mistralai/Mixtral-8x7B-v0.1",
             "codellama-34b": "codellama/CodeLlama-34b-Instruct-hf"}

# Programs that between them use every operator, call, where, clip, **, queueing_time and the
# special constants; the seeds add realistic shapes.
OWN_PROGRAMS = {
    "all_calls": '''"""Every call, where, unary minus, queueing_time, special constants."""
CONSTANTS = {"a": (1.0, 0.5, 2.0), "b": (100.0, 1.0, 1000.0), "knee": (600.0, 1.0, 4096.0),
             "post_decode_us": (700.0, 0.0, 5000.0), "output_token_us": (30.5, 0.0, 200.0)}

def step_time(f, c):
    compute = c.a * (f.pf_gemm + f.dc_gemm + f.moe_gemm)
    memory = f.weight_read + f.kv_read
    over = where(f.kv_max > c.knee, sqrt(f.kv_sum + 1.0), -log1p(f.n_decode))
    tail = clip(exp(-f.batch_size / 64.0), 0.05, 0.9) * abs(f.n_prefill - f.n_decode)
    return maximum(compute, memory) + minimum(f.tp_allreduce, 50.0) + over + tail - -c.b

def queueing_time(r, c):
    return c.b * 2.0 + 0.25 * r.input_tokens - 0.125 * r.output_tokens / c.a
''',
    "powers": '''"""Powers: x*x for ** 2 on an atom, math.Pow otherwise; log."""
CONSTANTS = {"p": (1.5, 1.1, 2.5)}

def step_time(f, c):
    x = f.pf_attn + f.dc_attn + f.kv_write
    return 500.0 + x + log(f.layers) * f.tp ** 2 + (f.blis_pf_attn + 1.0) ** c.p / 1e3
''',
    "nested_where": '''"""Nested where, literal folding, precedence and reassignment."""
CONSTANTS = {"k1": (100.0, 1.0, 300.0), "k2": (50.0, 1.0, 100.0), "s": (2.0, 0.5, 4.0)}

def step_time(f, c):
    t = f.prefill_tokens + f.decode_tokens
    t = t * (1.0 - 0.5 * 0.5) + 2.0 * 3.0
    a = where(t < c.k1, where(f.n_prefill >= 1.0, t / c.s, t * c.s), c.k2 - (t - c.k1) / 7.0)
    b = where(f.is_moe <= 0.5, f.kv_max ** 0.5, f.kv_max ** -1.5 * 1e6)
    return 1000.0 + a * (b - (f.kv_sum - f.kv_max)) / (1.0 + f.batch_size) + f.kv_sum ** 3.0 / 1e9
''',
    "negative_zero": '''"""-0.0 survives: Go folds the constant -0.0 to +0 (1/z is then +Inf)."""
CONSTANTS = {"z": (-0.0, -1.0, 1.0)}

def step_time(f, c):
    z = f.n_prefill * -0.0
    return 100.0 + f.decode_tokens + exp(minimum(1.0 / z, 1.0)) + exp(minimum(1.0 / c.z, 2.0))
''',
    "go_names": '''"""Locals that are Go keywords, builtins, packages or temporaries."""
CONSTANTS = {}

def step_time(f, c):
    range = f.kv_max + 1.0
    math = sqrt(range)
    where1 = where(f.tp > 1.0, math, range)
    where1 = where(where1 > 30.0, where1 / 2.0, where1 + range)
    max = where(f.kv_sum < 10.0, where1, 2.0)
    return max + where1 + 100.0
''',
    "kernels": '''"""Each measured-kernel feature on its own."""
CONSTANTS = {"g": (1.0, 0.5, 2.0), "a": (1.5, 0.5, 3.0)}

def step_time(f, c):
    return c.g * f.k_gemm + c.a * (f.k_dc_attn + f.k_pf_attn) + 0.01 * f.k_step + 50.0
''',
    "server_queue": '''"""A queueing delay that reads the server (layered's form)."""
CONSTANTS = {"step": (5000.0, 10.0, 1e5), "steps": (1.75, 0.0, 6.0)}

def step_time(f, c):
    return c.step + f.weight_read

def queueing_time(r, c):
    return c.steps * (r.weight_us + 75.0 * r.layers * (1.0 + 0.5 * r.is_moe)) / r.tp
''',
    "constant_only": '''"""No features at all."""
CONSTANTS = {"step": (5000.0, 10.0, 1e5)}

def step_time(f, c):
    return c.step
''',
}
