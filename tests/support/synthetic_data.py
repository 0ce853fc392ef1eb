"""A data directory made by the tests themselves: runs simulated from a known program.

Why: the suite must run where the bundled measured runs (``../shared/data``) are absent,
and the ingest path must be proven on data whose truth is known. So this module writes a
model config of its own, draws synthetic workloads (Poisson arrivals in load stages, a
few prompt/output length mixes, shared system prompts), simulates each with evolve's
closed-loop simulator under ``TRUTH_PROGRAM`` at ``TRUTH`` constants, writes the result as
a BLIS TraceV2 pair, and ingests the pair with ``evolve ingest`` -- the same path a user's
``blis observe`` trace takes. ``evolve fit`` on the result should recover ``TRUTH``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evaluator.data.scenarios import Stage, make_scenario
from evaluator.ingest.to_tracev2 import scenario_trace
from evaluator.ingest.tracev2 import write_tracev2
from evaluator.scoring.score import request_latencies
from evaluator.sim.simulator import simulate
from evolve.cli.main import main
from evolve.program.codegen import step_model
from evolve.program.language import parse_program

HARDWARE = Path(__file__).resolve().parents[2] / "evaluator" / "hardware" / "h100-sxm.json"
MODEL_ID = "synthetic/tiny-llama-1b"
MODEL_CONFIG = {  # a Llama-shaped ~1B model, written by the test (no download)
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
    "intermediate_size": 5632, "num_attention_heads": 32, "num_hidden_layers": 22,
    "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16", "_name_or_path": MODEL_ID,
}
TRUTH_PROGRAM = '''"""Synthetic truth: a cost per step, per prefill token and per decode token."""

CONSTANTS = {
    "step_us": (8000.0, 100.0, 50000.0),
    "prefill_us": (20.0, 0.01, 500.0),
    "decode_us": (50.0, 0.01, 2000.0),
}


def step_time(f, c):
    return c.step_us + c.prefill_us * f.prefill_tokens + c.decode_us * f.decode_tokens
'''
TRUTH = {"step_us": 6000.0, "prefill_us": 9.0, "decode_us": 70.0}


@dataclass(frozen=True)
class Workload:
    """One synthetic run: load stages and (prompt, output) length mixes with weights."""

    name: str
    stages: tuple[Stage, ...]
    mixes: tuple[tuple[int, int, float], ...]  # (mean prompt tokens, output tokens, weight)
    split: str = "train"
    system_prompt_len: int = 64
    n_groups: int = 4


# Three training runs that pin the three constants apart (light load: the per-step cost;
# long prompts: the prefill cost; 14 rps of long outputs: big decode batches), one held out.
WORKLOADS = (
    Workload("chat", (Stage(4.0, 45.0), Stage(10.0, 45.0)), ((300, 96, 0.7), (900, 32, 0.3))),
    Workload("summarise", (Stage(3.0, 60.0),), ((1800, 48, 0.8), (400, 128, 0.2))),
    Workload("generate", (Stage(14.0, 60.0),), ((150, 256, 0.6), (600, 160, 0.4))),
    Workload("mixed", (Stage(8.0, 60.0),), ((700, 120, 1.0),), split="validate"),
)


def draw(w: Workload, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Poisson arrivals (µs) per stage and lengths drawn from the mixes."""
    rng = np.random.default_rng(seed)
    arrivals, t0 = [], 0.0
    for st in w.stages:
        n = rng.poisson(st.rate * st.duration_s)
        arrivals.append(np.sort(t0 + rng.uniform(0.0, st.duration_s, n)))
        t0 += st.duration_s
    arr = np.rint(np.concatenate(arrivals) * 1e6)
    arr -= arr[0]
    weights = np.array([m[2] for m in w.mixes])
    pick = rng.choice(len(w.mixes), size=arr.size, p=weights / weights.sum())
    prompt = np.array([w.mixes[k][0] for k in pick], dtype=np.float64)
    inp = np.maximum(w.system_prompt_len + 8, rng.normal(prompt, 0.15 * prompt)).astype(np.int64)
    out = np.array([w.mixes[k][1] for k in pick], dtype=np.int64)
    return arr, inp, out


def simulate_trace(w: Workload, model_dir: Path, prefix: Path, seed: int,
                   truth: dict[str, float] = TRUTH) -> Path:
    """Simulate ``w`` under the truth and write it as a TraceV2 pair; returns the header."""
    program = parse_program(TRUTH_PROGRAM)
    model = step_model(program)
    consts = np.array([truth[n] for n in program.const_names])
    arr, inp, out = draw(w, seed)
    sc = make_scenario(w.name, arr, inp, out, model_dir=model_dir, hardware=HARDWARE,
                       tp=1, max_num_seqs=64, max_batched_tokens=2048, kv_blocks=4000,
                       system_prompt_len=w.system_prompt_len, n_prefix_groups=w.n_groups)
    res = simulate(sc, model, consts)
    assert not res.error, res.error
    ok, ttft, e2e = request_latencies(res.corpus, res.corpus.end_us, consts, model)
    e2e_all, ttft_all = np.full(sc.n_requests, np.nan), np.full(sc.n_requests, np.nan)
    e2e_all[ok], ttft_all[ok] = e2e, ttft
    measured = make_scenario(w.name, arr, inp, out, model_dir=model_dir, hardware=HARDWARE,
                             tp=1, max_num_seqs=64, max_batched_tokens=2048, kv_blocks=4000,
                             system_prompt_len=w.system_prompt_len, n_prefix_groups=w.n_groups,
                             e2e_s=e2e_all, ttft_s=ttft_all)
    header, columns = scenario_trace(measured)
    header["server"]["model"] = MODEL_ID
    header["workload_spec"] = w.name
    hpath, _ = write_tracev2(header, columns, prefix)
    return hpath


def write_model_config(root: Path) -> Path:
    d = root / "tiny-llama-1b"
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(MODEL_CONFIG, indent=1))
    return d


def build(root: Path, workloads: tuple[Workload, ...] = WORKLOADS, seed: int = 11) -> Path:
    """Simulate, write as TraceV2 and ingest every workload into ``root/data``."""
    root.mkdir(parents=True, exist_ok=True)
    model_dir = write_model_config(root / "models")
    data = root / "data"
    for i, w in enumerate(workloads):
        header = simulate_trace(w, model_dir, root / "traces" / w.name, seed + i)
        stages = ",".join(f"{s.rate:g}x{s.duration_s:g}" for s in w.stages)
        code = main(["ingest", str(header), "--out", str(data), "--name", f"synth-{w.name}",
                     "--model", str(model_dir), "--hardware", "H100", "--kv-blocks", "4000",
                     "--max-num-batched-tokens", "2048", "--split", w.split,
                     "--stages", stages])
        assert code == 0, f"evolve ingest failed for {w.name}"
    return data
