"""Go export: every seed and a set of operator-covering programs export gofmt-clean Go that
builds and agrees with the numpy program to 1e-9 relative on every step of golden corpora.

One harness (a stand-in ``sim`` package plus all exports, one package each) is built once per
session; the synthetic corpus covers all four architectures at their TP (1/4/2/2), and the
real-run corpus comes from closed-loop simulation of the first seconds of one run per model.
Without a Go toolchain the Go-dependent tests skip and say why.
"""

from __future__ import annotations

import ast
import json
import math
import random
import subprocess
from pathlib import Path

import numpy as np
import pytest
from needs import require_go

from evaluator.components import ARCH_FIELDS, compute_features
from evaluator.glossary import N_STATS
from evaluator.kernels import KernelTables, kernel_block
from evaluator.scenarios import Hardware, ModelArch, data_dir
from evolve.codegen import step_model
from evolve.errors import ExportError
from evolve.export.go import BLIS_COMMIT, GroupInfo, export_go, type_prefix
from evolve.export.go_body import field_names
from evolve.export.go_expr import Atom, Binary, Call, Unary, format_expr
from evolve.export.go_harness import (
    HarnessExport,
    build_harness,
    find_go,
    go_env,
    gofmt_path,
    run_harness,
)
from evolve.language import parse_program

ROOT = Path(__file__).resolve().parents[2]
GO = find_go()


@pytest.fixture()
def go_toolchain() -> None:
    require_go()


needs_go = pytest.mark.usefixtures("go_toolchain")
REL = 1e-9

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
    "constant_only": '''"""No features at all."""
CONSTANTS = {"step": (5000.0, 10.0, 1e5)}

def step_time(f, c):
    return c.step
''',
}


def _programs():
    out = [(p.stem, p.read_text()) for p in sorted((ROOT / "seeds").glob("*.py"))]
    return [(name, parse_program(src)) for name, src in out + sorted(OWN_PROGRAMS.items())]


def _arch(model_dir: str, tp: int, kernels: bool = True) -> np.ndarray:
    """The arch vector of a model, with its measured kernel block (if the data has tables
    and ``kernels``), as ``Scenario.arch_vector`` builds it."""
    data = data_dir(None)
    a = ModelArch.load(data / "models" / model_dir / "config.json")
    h = Hardware.load(data / "hardware" / "h100-sxm.json")
    vals = {"layers": a.layers, "hidden": a.hidden, "heads": a.heads, "kv_heads": a.kv_heads,
            "head_dim": a.head_dim, "intermediate": a.intermediate, "n_experts": a.n_experts,
            "topk": a.topk, "vocab": a.vocab, "tp": tp, "peak_flops": h.peak_flops,
            "hbm_bw": h.hbm_bw, "nvlink_bw": h.nvlink_bw, "bytes_per_param": 2.0}
    base = np.array([float(vals[k]) for k in ARCH_FIELDS])
    if not kernels:
        return base
    return np.concatenate([base, kernel_block(KernelTables.load(data), a, tp, h)])


def _kernels() -> dict[str, tuple[tuple[str, ...], list[float]]]:
    """What the export embeds per model: the same blocks as :func:`_arch`."""
    out = {}
    for group, model_dir, tp, blis_name in MODELS:
        block = _arch(model_dir, tp)[len(ARCH_FIELDS):]
        if block.size and block[0] > 0:
            out[group] = ((MODEL_IDS[group].lower(), blis_name.lower()), block.tolist())
    return out


def stats_from_members(ptr, new, kv, slen) -> np.ndarray:
    """Glossary STATS per step from CSR membership (new tokens, kv_len, input length)."""
    t, k, s = (np.asarray(x, dtype=np.float64) for x in (new, kv, slen))
    pf = k < s
    step = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))
    out = np.zeros((N_STATS, len(ptr) - 1))
    for row, vals, mask in ((0, np.ones_like(t), pf), (1, np.ones_like(t), ~pf),
                            (2, t, pf), (3, t, ~pf), (4, t * (k + (t + 1.0) / 2.0), pf),
                            (5, k + t, pf), (6, k, ~pf), (8, t * (s + t / 2.0), pf)):
        np.add.at(out[row], step[mask], vals[mask])
    np.maximum.at(out[7], step, k + t)
    return out


def recompute_steps(ptr, req, kv) -> np.ndarray:
    """Steps holding a request after its first preemption (its kv_len went down)."""
    step = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))
    order = np.argsort(req, kind="stable")
    r, k = req[order], kv[order]
    n = len(r)
    new_group = np.ones(n, bool)
    new_group[1:] = r[1:] != r[:-1]
    drop = np.zeros(n, bool)
    drop[1:] = ~new_group[1:] & (k[1:] < k[:-1])
    drops = np.cumsum(drop)
    start = np.maximum.accumulate(np.where(new_group, np.arange(n), 0))
    after = drops - drops[start] > 0
    out = np.zeros(len(ptr) - 1, bool)
    out[step[order][after]] = True
    return out


def synthetic_batches(rng: random.Random, n_steps: int) -> list[list[tuple[int, int, int]]]:
    """Mixed chunked prefills and decodes within a 2048-token budget, up to 128 requests."""
    steps = []
    for i in range(n_steps):
        size = 128 if i % 7 == 0 else 1 if i % 11 == 0 else rng.randint(1, 128)
        budget, batch = 2048, []
        for _ in range(size):
            s = rng.randint(1, 4000)
            if budget > 1 and rng.random() < (0.9 if i % 5 == 0 else 0.15):
                k = rng.randint(0, s - 1)
                t = rng.randint(1, min(s - k, budget - 1))
            else:
                k, t = rng.randint(s, 4095), 1
            batch.append((t, k, s))
            budget -= t
            if budget <= 0:
                break
        steps.append(batch)
    return steps


class Harness:
    """The built parity binary and what each export was built with."""

    def __init__(self, root: Path):
        self.root = root
        self.programs = _programs()
        rng = np.random.default_rng(7)
        self.exports: list[HarnessExport] = []
        self.scope: list[str] = []
        self.consts: list[dict[str, np.ndarray]] = []  # group -> c vector
        self.sources: list[str] = []
        kernels = _kernels()
        for i, (name, prog) in enumerate(self.programs):
            scope = ("pooled" if name == "transfer" else
                     "per_model" if i % 2 == 0 or name == "trained_physics" else "global")
            groups = ([m[0] for m in MODELS] if scope != "global" else []) + (
                ["global"] if scope != "per_model" else [])
            lo, hi = prog.bounds()
            cv = {g: lo + (hi - lo) * rng.random(len(lo)) for g in groups}
            named = {g: dict(zip(prog.const_names, map(float, v), strict=True))
                     for g, v in cv.items()}
            info = {g: GroupInfo((g, MODEL_IDS[g].lower()), f"test group {g}")
                    for g in groups if g in MODEL_IDS}
            src = export_go(prog, named, scope, info, {"run": 1, "scores": {"loss": 0.5}},
                            kernels)
            self.sources.append(src)
            fields = field_names(list(prog.const_names))
            self.exports.append(HarnessExport(src, type_prefix(prog.id),
                                              tuple(fields[n] for n in prog.const_names)))
            self.scope.append(scope)
            self.consts.append(cv)
        self.binary = build_harness(root / "mod", self.exports, GO)

    def consts_for(self, i: int, group: str) -> np.ndarray:
        cv = self.consts[i]
        return cv[group] if group in cv and self.scope[i] != "global" else cv["global"]

    def run(self, path: Path, cases: list[tuple[int, str, str, np.ndarray, list, list]]):
        """``cases``: (export, group, BLIS name, arch, steps, requests) -> parsed output."""
        lines = []
        for i, group, blis_name, arch, steps, reqs in cases:
            c = self.consts_for(i, group)
            lines.append(" ".join(["case", str(i), blis_name, str(len(arch)),
                                   *map(repr, map(float, arch)), str(len(c)),
                                   *map(repr, map(float, c))]))
            lines += [f"s {len(b)} " + " ".join(f"{t} {k} {s}" for t, k, s in b)
                      for b in steps]
            lines += [f"q {a} {b}" for a, b in reqs]
        path.write_text("\n".join(lines) + "\n")
        out, cur = [], None
        for ln in run_harness(self.binary, path):
            f = ln.split()
            if f[0] == "case":
                cur = {"s": [], "q": []}
                out.append(cur)
            elif f[0] == "o":
                cur["o"] = (int(f[1]), int(f[2]))
            elif f[0] == "s":
                cur["s"].append((float(f[1]), int(f[2]), float(f[3])))
            elif f[0] == "q":
                cur["q"].append((float(f[1]), int(f[2])))
        return out


@pytest.fixture(scope="session")
def harness(tmp_path_factory) -> Harness:
    require_go()
    return Harness(tmp_path_factory.mktemp("go_harness"))


def ticks(us: float) -> int:
    if math.isnan(us) or us >= 2.0**63:
        return 2**63 - 1
    return 0 if us <= 0 else int(us)


def assert_close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    got, want = np.asarray(got, float), np.asarray(want, float)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    err = np.abs(got - want) / np.maximum(np.abs(want), 1e-300)
    bad = np.flatnonzero(~same & ~(err <= REL))
    assert bad.size == 0, (f"{what}: {bad.size} of {got.size} steps differ; first at "
                           f"{bad[0]}: go {got[bad[0]]!r} numpy {want[bad[0]]!r}")


def check_case(h: Harness, i: int, group: str, arch, stats, out, reqs=()) -> None:
    prog = h.programs[i][1]
    sm = step_model(prog)
    c = h.consts_for(i, group)
    want = np.broadcast_to(sm.vector_fn(compute_features(stats, arch), c), stats.shape[1])
    go = np.array([s[0] for s in out["s"]])
    label = f"{h.programs[i][0]} on {group}"
    assert_close(go, want, label)
    assert_close(np.array([s[2] for s in out["s"]]), want, label + " (BLIS-config constructor)")
    assert [s[1] for s in out["s"]] == [max(1, ticks(u)) for u in go], label + " StepTime"
    o_idx, p_idx = prog.output_token_index, prog.post_decode_index
    assert out["o"] == (ticks(c[o_idx]) if o_idx is not None else 0,
                        ticks(c[p_idx]) if p_idx is not None else 0), label
    if reqs:
        R = np.array(reqs, dtype=np.float64).T
        q = sm.queue_fn(R, c) if sm.queue_fn is not None else np.zeros(len(reqs))
        assert_close(np.array([x[0] for x in out["q"]]), np.broadcast_to(q, len(reqs)),
                     label + " QueueingTime")
        assert [x[1] for x in out["q"]] == [ticks(x[0]) for x in out["q"]]


# ---------------------------------------------------------------------------------------


def test_blis_commit_recorded():
    assert len(BLIS_COMMIT) == 40
    assert BLIS_COMMIT in (ROOT / "docs" / "blis.md").read_text()


@needs_go
def test_exports_build_and_are_gofmt_clean(harness):
    res = subprocess.run([gofmt_path(GO), "-l", str(harness.root / "mod")], capture_output=True,
                         text=True, env=go_env())
    assert res.returncode == 0, res.stderr
    assert res.stdout == "", f"not gofmt-clean: {res.stdout}"
    res = subprocess.run([GO, "vet", "./..."], cwd=harness.root / "mod", capture_output=True,
                         text=True, env=go_env())
    assert res.returncode == 0, res.stdout + res.stderr
    for src in harness.sources:
        assert src.startswith("// Code generated by evolve export-go. DO NOT EDIT.\n")
        assert BLIS_COMMIT in src


@pytest.mark.real_data
@needs_go
def test_parity_synthetic(harness, tmp_path):
    """All programs x all four architectures, 50 mixed batches each."""
    rng = random.Random(11)
    cases, expect = [], []
    for i in range(len(harness.programs)):
        for group, model_dir, tp, blis_name in MODELS:
            arch = _arch(model_dir, tp)
            steps = synthetic_batches(rng, 50)
            reqs = [(rng.randint(1, 4000), rng.randint(1, 1000)) for _ in range(5)]
            cases.append((i, group, blis_name, arch, steps, reqs))
            ptr = np.cumsum([0] + [len(b) for b in steps])
            flat = np.array([m for b in steps for m in b])
            expect.append((i, group, arch, stats_from_members(ptr, *flat.T), reqs))
        if harness.scope[i] != "per_model":  # a model the export has no curves (and, pooled,
            # no constants) for: roofline features and the global set
            arch = _arch("Mixtral-8x7B-v0.1", 2, kernels=False)
            steps = synthetic_batches(rng, 20)
            cases.append((i, "global", "someone/unknown-model", arch, steps, []))
            ptr = np.cumsum([0] + [len(b) for b in steps])
            flat = np.array([m for b in steps for m in b])
            expect.append((i, "global", arch, stats_from_members(ptr, *flat.T), []))
    outs = harness.run(tmp_path / "synthetic.txt", cases)
    assert len(outs) == len(expect)
    for (i, group, arch, stats, reqs), out in zip(expect, outs, strict=True):
        check_case(harness, i, group, arch, stats, out, reqs)


@needs_go
def test_parity_real_run(harness, all_scenarios, tmp_path):
    """Golden corpora from the closed-loop simulator: the first 30 s of each model's
    reasoning run (longest contexts, batches up to 128, some preemption)."""
    from evaluator.simulator import simulate

    i = next(j for j, (name, _p) in enumerate(harness.programs) if name == "trained_physics")
    prog = harness.programs[i][1]
    assert harness.scope[i] == "per_model"
    seen, cases, expect = set(), [], []
    recomputing = 0  # steps holding a request that recomputes after preemption
    for sc in all_scenarios:
        if sc.model in seen or sc.workload != "reasoning":
            continue
        seen.add(sc.model)
        head = sc.head(30.0)
        c = harness.consts_for(i, sc.model)
        corpus = simulate(head, step_model(prog), c, record_members=True).corpus
        ptr = corpus.member_ptr
        # Each member's prompt length as the simulator used it: the input length, or input +
        # generated tokens while a preempted request recomputes (BLIS's InputLen()).
        slen = corpus.member_len
        keep = np.arange(corpus.n_steps)  # every step, recomputing requests included
        recomputing += int(recompute_steps(ptr, corpus.member_req, corpus.member_kv).sum())
        ours = stats_from_members(ptr, corpus.member_new, corpus.member_kv, slen)
        np.testing.assert_array_equal(ours[:, keep], corpus.stats[:, keep])
        steps = [list(zip(corpus.member_new[ptr[j]:ptr[j + 1]].tolist(),
                          corpus.member_kv[ptr[j]:ptr[j + 1]].tolist(),
                          slen[ptr[j]:ptr[j + 1]].tolist(), strict=True)) for j in keep]
        cases.append((i, sc.model, sc.meta["model_id"].lower(), sc.arch_vector, steps, []))
        expect.append((sc.model, sc.arch_vector, corpus.stats[:, keep]))
    assert len(seen) == 4
    assert recomputing > 0  # the golden corpora do exercise recompute preemption
    outs = harness.run(tmp_path / "real.txt", cases)
    for (group, arch, stats), out in zip(expect, outs, strict=True):
        check_case(harness, i, group, arch, stats, out)


@needs_go
def test_printer_matches_gofmt(tmp_path):
    """format_expr is a fixed point of gofmt on random expressions of every node kind."""
    rng = random.Random(3)
    atoms = [Atom("x"), Atom("f.PfGemm"), Atom("2.0"), Atom("1e-05"), Atom("c.A")]

    def gen(d: int):
        r = rng.random()
        if d == 0 or r < 0.2:
            return rng.choice(atoms)
        if r < 0.3:
            return Unary("-", gen(d - 1))
        if r < 0.45:
            fn, n = rng.choice([("math.Max", 2), ("math.Sqrt", 1), ("math.Pow", 2),
                                ("math.Min", 2)])
            return Call(fn, tuple(gen(d - 1) for _ in range(n)))
        return Binary(rng.choice(["+", "-", "*", "/", "+", "*"]), gen(d - 1), gen(d - 1))

    lines = ["package p", "", "func g() {"]
    for j in range(400):
        e = gen(rng.randint(1, 5))
        if rng.random() < 0.15:
            e = Binary(rng.choice(["<", ">=", "<=", ">"]), e, gen(2))
        lines.append(f"\tv{j} := {format_expr(e)}")
    path = tmp_path / "p.go"
    path.write_text("\n".join([*lines, "}"]) + "\n")
    res = subprocess.run([gofmt_path(GO), "-d", str(path)], capture_output=True, text=True,
                         env=go_env())
    assert res.returncode == 0, res.stderr
    assert res.stdout == "", res.stdout[:3000]


def test_translation_is_readable_and_exact():
    prog = parse_program(OWN_PROGRAMS["all_calls"])
    src = export_go(prog, {"global": {n: 1.0 for n in prog.const_names}}, "global")
    assert "math.Min(math.Max(math.Exp(-f.BatchSize/64.0), 0.05), 0.9)" in src
    assert "// over = where(f.kv_max > c.knee" in src  # the Python line above its Go
    assert "+ tail - -c.B" in src
    prog = parse_program(OWN_PROGRAMS["powers"])
    src = export_go(prog, {"global": {"p": 2.0}}, "global")
    assert "f.Tp*f.Tp" in src  # ** 2 on an atom is x*x, like numpy's square
    assert "math.Pow(f.BlisPfAttn+1.0, c.P)" in src
    nested = parse_program(OWN_PROGRAMS["nested_where"])
    src = export_go(nested, {"global": {n: 2.0 for n in nested.const_names}}, "global")
    assert "t = t*0.75 + 6.0" in src  # pure-literal parts folded in float64
    assert src.index("where1 :=") < src.index("\ta := c.K2")  # inner where first
    assert "\tb := f.KvMax * f.KvMax" not in src and "\tb := " in src  # where assigns b


def test_export_errors():
    prog = parse_program(OWN_PROGRAMS["constant_only"])
    with pytest.raises(ExportError, match="no value"):
        export_go(prog, {"global": {}}, "global")
    with pytest.raises(ExportError, match="scope"):
        export_go(prog, {"global": {"step": 1.0}}, "per_gpu")
    with pytest.raises(ExportError, match="exactly one"):
        export_go(prog, {"a": {"step": 1.0}, "b": {"step": 2.0}}, "global")
    bad = parse_program("CONSTANTS = {}\ndef step_time(f, c):\n    return f.tp / (1.0 - 1.0)\n")
    with pytest.raises(ExportError, match="division by zero"):
        export_go(bad, {"global": {}}, "global")


def test_per_model_lookup_lists_aliases():
    prog = parse_program(OWN_PROGRAMS["constant_only"])
    info = {"llama-2-7b": GroupInfo(("llama-2-7b", "meta-llama/llama-2-7b-hf"))}
    src = export_go(prog, {"llama-2-7b": {"step": 10.0}, "other": {"step": 2.5}},
                    "per_model", info)
    assert 'case "llama-2-7b", "llama-2-7b-hf", "meta-llama/llama-2-7b-hf":' in src
    assert 'case "other":' in src
    assert "strings.ToLower(model)" in src


def test_pooled_lookup_falls_back_to_the_global_set():
    """Pooled constants: measured models by name, any other model gets the global set."""
    prog = parse_program(OWN_PROGRAMS["constant_only"])
    src = export_go(prog, {"llama-2-7b": {"step": 10.0}, "global": {"step": 2.5}}, "pooled")
    assert 'case "llama-2-7b":' in src and 'case "global"' not in src
    assert "no fitted constants" not in src
    tail = src[src.index("ConstsFor(model string)"):]
    tail = tail[:tail.index("\n}\n")]
    assert tail.rstrip().endswith("2.5}, nil")


@needs_go
def test_pooled_export_is_in_the_parity_harness(harness):
    i = next(j for j, (name, _p) in enumerate(harness.programs) if name == "transfer")
    assert harness.scope[i] == "pooled" and "Any other model" in harness.sources[i]


def test_cli_standalone(tmp_path):
    from evolve.cli import main

    prog_file = tmp_path / "prog.py"
    prog_file.write_text(OWN_PROGRAMS["all_calls"])
    prog = parse_program(OWN_PROGRAMS["all_calls"])
    consts = {"llama-2-7b": {n: 1.5 for n in prog.const_names}}
    out = tmp_path / "evolved.go"
    rc = main(["export-go", str(prog_file), "--constants", json.dumps(consts),
               "--scope", "per_model", "-o", str(out)])
    assert rc == 0
    text = out.read_text()
    assert type_prefix(prog.id) + "Model" in text
    assert 'case "llama-2-7b"' in text
    assert ast.parse(prog.source)  # the header carries the source; the file is Go
    rc = main(["export-go", str(prog_file), "--constants", json.dumps({"x": {}}),
               "--scope", "per_model", "-o", str(out)])
    assert rc == 2


def test_cli_per_scenario_needs_one_group(tmp_path, capsys):
    from evolve.cli import main

    prog_file = tmp_path / "prog.py"
    prog_file.write_text(OWN_PROGRAMS["constant_only"])
    consts = json.dumps({"run-a": {"step": 10.0}, "run-b": {"step": 20.0}})
    args = ["export-go", str(prog_file), "--constants", consts, "--scope", "per_scenario"]
    assert main(args) == 2
    assert "pick one scenario with --model" in capsys.readouterr().err
    assert main([*args, "--model", "run-b"]) == 0
    text = capsys.readouterr().out
    assert "One constant set (per_scenario scope) serves every model." in text
    assert "Consts{Step: 20.0}, nil" in text


@pytest.mark.real_data
def test_cli_from_archive(tmp_path, capsys):
    """Archive mode: constants, scope and scores of the latest accepted evaluation."""
    from evolve.archive import Archive
    from evolve.archive.models import Evaluation, ProgramRow
    from evolve.cli import main

    prog = parse_program((ROOT / "seeds" / "linear.py").read_text())
    consts = {m[0]: {n: 1.0 + j for j, n in enumerate(prog.const_names)} for m in MODELS}
    metrics = {"run-a": {"split": "train", "ape": {"e2e_mean": 0.1, "ttft_mean": 0.3}},
               "run-b": {"split": "test", "ape": {"e2e_mean": 0.2, "ttft_mean": 0.4}}}
    db = tmp_path / "a.db"
    with Archive(db) as a:
        rid = a.create_run(7, {"fit": {"scope": "per_model"}}, {}, None)
        a.commit_generation(rid, 0, [
            ProgramRow(run_id=rid, id=prog.id, seq=0, source=prog.source, parent_ids=[],
                       operator="seed", generation=0, complexity=prog.complexity,
                       n_features=len(prog.features), fingerprint=None),
            Evaluation(run_id=rid, generation=0, seq=0, program_id=prog.id, kind="seed",
                       operator="seed", corpus_version="abc", constants=consts,
                       metrics=metrics, loss=0.25, complexity=prog.complexity, n_evals=10,
                       status="accepted", reason="")])
    assert main(["export-go", prog.id[:10], "--archive", str(db)]) == 0
    text = capsys.readouterr().out
    assert "// Archive: a.db, run 1 (seed 7), generation 0, operator seed" in text
    assert "// Train loss: 0.25" in text
    assert "// Scores (test, 1 runs, teacher forced): mean APE E2E 20.00 %, TTFT 40.00 %" in text
    assert "Constant scope: per_model (codellama-34b, llama-2-70b, llama-2-7b, mixtral-8x7b)" \
        in text
    assert '"meta-llama/llama-2-7b-hf"' in text  # aliases from the data directory
    assert main(["export-go", prog.id[:10], "--archive", str(db), "--model",
                 "mistralai/Mixtral-8x7B-v0.1"]) == 0
    text = capsys.readouterr().out
    assert "Constant scope: per_model (mixtral-8x7b)" in text
    assert main(["export-go", "ffff", "--archive", str(db)]) == 2
    assert main(["export-go", prog.id[:10], "--archive", str(db), "--alias",
                 "llama-2-7b=Acme/Llama-2-7B-Chat"]) == 0
    assert '"acme/llama-2-7b-chat", "llama-2-7b"' in capsys.readouterr().out
    assert main(["export-go", prog.id[:10], "--archive", str(db), "--alias", "x=y"]) == 2
