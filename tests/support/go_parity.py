"""The Go parity harness: every seed and own program exported with random constants, built
into one binary, fed step batches and requests, and compared with the numpy program.

Kept apart from the tests so that the parity tests (test_go_parity.py) and the translation
tests (test_go_export.py) read as tests; the session fixture lives in conftest.py.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
from go_programs import MODEL_IDS, MODELS, OWN_PROGRAMS

from evaluator.data.kernel_tables import KernelTables, kernel_block
from evaluator.data.scenarios import Hardware, ModelArch, data_dir
from evaluator.features.components import ARCH_FIELDS, compute_features, request_inputs
from evaluator.features.glossary import N_STATS
from evolve.export.go.body import field_names
from evolve.export.go.harness import HarnessExport, build_harness, find_go, run_harness
from evolve.export.go.writer import GroupInfo, export_go, type_prefix
from evolve.program.codegen import step_model
from evolve.program.language import parse_program

ROOT = Path(__file__).resolve().parents[2]
GO = find_go()
REL = 1e-9


def _programs():
    out = [(p.stem, p.read_text()) for p in sorted((ROOT / "seeds").glob("*.py"))]
    return [(name, parse_program(src)) for name, src in out + sorted(OWN_PROGRAMS.items())]


def arch_of(model_dir: str, tp: int, kernels: bool = True) -> np.ndarray:
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
    """What the export embeds per model: the same blocks as :func:`arch_of`."""
    out = {}
    for group, model_dir, tp, blis_name in MODELS:
        block = arch_of(model_dir, tp)[len(ARCH_FIELDS):]
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
        pairs = np.array(reqs, dtype=np.float64).T
        R = request_inputs(pairs[0], pairs[1], arch[:len(ARCH_FIELDS)])
        q = sm.queue_fn(R, c) if sm.queue_fn is not None else np.zeros(len(reqs))
        assert_close(np.array([x[0] for x in out["q"]]), np.broadcast_to(q, len(reqs)),
                     label + " QueueingTime")
        assert [x[1] for x in out["q"]] == [ticks(x[0]) for x in out["q"]]
