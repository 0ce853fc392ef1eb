"""Measured vLLM runs as typed, validated ``Scenario`` objects.

A scenario is everything the simulator and the scorer need about one run: the model
architecture (config.json), the GPU (datasheet), the server limits, the request stream and
the measured targets. Loading validates every field it reads and fails with a
``DataError`` naming the file and the field, because a silently wrong input would make
every score downstream meaningless.

Traps from ``data/README.md`` handled here: output lengths from the load profile (trap 4),
failed requests of 0 prompt tokens get the run's median prompt length, prefix groups are
inferred (trap 5, 8), the bf16 peak is halved to the dense figure (trap 6)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from evaluator.data.run_files import DataError, _get, _read_json, read_request_rows

DEFAULT_DATA = Path("../shared/data")
CLIENT_TIMEOUT_S = 300.0
LOOPS = ("vllm", "blis")  # Scenario.loop: vLLM v0.15.1's (measured) or BLIS's (exported to)
MAX_MODEL_LEN = 4096
DATA_GPU = "h100-sxm.json"  # every bundled run was served on it (data README)

# Positions in the architecture vector built by ``Scenario.arch_vector``.
ARCH_FIELDS: tuple[str, ...] = (
    "layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "n_experts",
    "topk", "vocab", "tp", "peak_flops", "hbm_bw", "nvlink_bw", "bytes_per_param",
)


def data_dir(explicit: str | os.PathLike[str] | None = None,
             hint: str = "; pass --data DIR or set EVOLVE_DATA") -> Path:
    """Resolve the data directory: explicit argument, ``EVOLVE_DATA``, then the default."""
    raw = explicit if explicit is not None else os.environ.get("EVOLVE_DATA") or DEFAULT_DATA
    if not str(raw).strip():  # `--data ""` (a variable left unset) once meant the default
        who = "--data" if explicit is not None else "EVOLVE_DATA"
        raise DataError(f"{who}: blank; name a data directory")
    if not ((path := Path(raw)) / "experiments").is_dir():  # a typo, or the wrong folder
        raise DataError(f"{path}: " + ("data directory not found" if not path.exists() else
                        "not a data directory (no experiments/ inside)") + hint)
    return path


@dataclass(frozen=True)
class ModelArch:
    """Transformer shape from a HuggingFace config.json."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    n_experts: int
    topk: int
    vocab: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 1

    @classmethod
    def load(cls, path: Path) -> ModelArch:
        cfg = _read_json(path)
        g = lambda k: int(_get(cfg, path, k, int, positive=True))  # noqa: E731
        arch = cls(name=path.parent.name, layers=g("num_hidden_layers"),
                   hidden=g("hidden_size"), heads=g("num_attention_heads"),
                   kv_heads=g("num_key_value_heads" if "num_key_value_heads" in cfg
                             else "num_attention_heads"),
                   intermediate=g("intermediate_size"),
                   n_experts=int(_get(cfg, path, "num_local_experts", int)
                                 if cfg.get("num_local_experts") else 0),
                   topk=int(_get(cfg, path, "num_experts_per_tok", int)
                            if cfg.get("num_experts_per_tok") else 0), vocab=g("vocab_size"))
        if arch.hidden % arch.heads or arch.heads % arch.kv_heads:
            raise DataError(f"{path}: field 'num_attention_heads': hidden_size / heads / "
                            "kv heads do not divide evenly")
        if arch.n_experts > 1 and not 0 < arch.topk <= arch.n_experts:
            raise DataError(f"{path}: field 'num_experts_per_tok': must be in [1, experts]")
        return arch


@dataclass(frozen=True)
class Hardware:
    """GPU peaks used by the analytical components (dense figures)."""

    name: str
    peak_flops: float
    hbm_bw: float
    nvlink_bw: float

    @classmethod
    def load(cls, path: Path) -> Hardware:
        hw = _read_json(path)
        def num(key: str) -> float:
            return float(_get(hw, path, key, positive=True))  # each divides a component

        compute, memory = hw.get("compute"), hw.get("memory")
        sparse = (isinstance(compute, dict) and compute.get("with_sparsity") is not None
                  and _get(hw, path, "compute.with_sparsity", bool))
        if isinstance(memory, dict) and memory.get("capacity_gb") is not None:
            num("memory.capacity_gb")  # optional, but read by ingest's KV-pool check
        return cls(name=str(hw.get("name", path.stem)),
                   peak_flops=num("compute.bf16_tensor_core") * 1e12 / (2.0 if sparse else 1.0),
                   hbm_bw=num("memory.bandwidth_tb_s") * 1e12,
                   nvlink_bw=num("interconnect.nvlink_bandwidth_gb_s") * 1e9)


# Server field -> its key under ``config`` in a run's requests.json
SERVER_KEYS = {"tp": "tensor_parallelism", "max_num_seqs": "max_num_seqs",
               "max_batched_tokens": "max_num_batched_tokens",
               "kv_blocks": "kv_blocks_total_gpu", "block_size": "block_size",
               "max_model_len": "max_model_len"}


@dataclass(frozen=True)
class Server:
    """vLLM server limits of a run."""

    tp: int
    max_num_seqs: int
    max_batched_tokens: int
    kv_blocks: int
    block_size: int
    max_model_len: int = MAX_MODEL_LEN

    def too_small(self) -> str | None:
        """Why vLLM would refuse to start with this KV pool (it must hold one request of
        ``max_model_len`` tokens), or None."""
        tokens = self.kv_blocks * self.block_size
        if tokens >= self.max_model_len:
            return None
        return (f"{self.kv_blocks} KV blocks x {self.block_size} tokens hold {tokens} tokens, "
                f"fewer than max_model_len {self.max_model_len} (vLLM refuses to start)")

    def refusal(self, heads: int | None = None) -> tuple[str, str] | None:
        """The first limit vLLM would refuse to start with, as (field of this class, why):
        the KV pool, a tensor-parallel size that does not divide the attention heads (when
        ``heads`` is known), a token budget below ``max_num_seqs``; None if it starts."""
        if why := self.too_small():
            return "kv_blocks", why
        if heads and heads % self.tp:
            return "tp", (f"tensor-parallel size {self.tp} does not divide the model's "
                          f"num_attention_heads ({heads}); vLLM refuses to start")
        if self.max_batched_tokens < self.max_num_seqs:
            return "max_batched_tokens", (
                f"max_num_batched_tokens {self.max_batched_tokens} is below max_num_seqs "
                f"{self.max_num_seqs}; vLLM refuses to start")
        return None


@dataclass(frozen=True)
class Stage:
    rate: float
    duration_s: float


@dataclass(frozen=True)
class Measured:
    """Ground truth: per-request client-side latencies and the run's aggregates (seconds)."""

    e2e_s: np.ndarray  # NaN where the request failed
    ttft_s: np.ndarray  # NaN where the request failed or no TTFT was recorded
    failed: np.ndarray  # bool
    summary: dict[str, float]  # e.g. "e2e_mean", "e2e_p99", "ttft_p90", "failures"


@dataclass(frozen=True)
class Scenario:
    """One measured run (or a user trace), ready for simulation and scoring."""

    name: str
    model: str  # short model name, the key for per-model constants
    workload: str
    split: str
    arch: ModelArch
    hardware: Hardware
    server: Server
    stages: tuple[Stage, ...]
    system_prompt_len: int
    n_prefix_groups: int
    arrival_us: np.ndarray  # float64, sorted
    input_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64: tokens the server decodes (profile output_len)
    prefix_group: np.ndarray  # int64 in [0, n_prefix_groups)
    measured: Measured
    meta: dict[str, Any] = field(default_factory=dict, compare=False)
    scored: np.ndarray | None = field(default=None, compare=False)  # None: every request
    # Packed measured-kernel curves (evaluator.data.kernel_tables.kernel_block); empty:
    # roofline.
    kernels: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False)
    # Per request, the prompt it repeats (evaluator.data.prompt_cache); None: only the shared system
    # prompt is cached.
    prompt_id: np.ndarray | None = field(default=None, compare=False)
    # vLLM's async scheduling: a step is formed while the previous one runs (simulator.py)
    async_scheduling: bool = field(default=True, compare=False)
    loop: str = field(default="vllm", compare=False)  # LOOPS; simulator.py says what differs
    # sd of the log of a seeded mean-one multiplicative noise on every step time (0: none;
    # evaluator/sim/simulator.py); the stream is seeded by the run's name
    step_noise: float = field(default=0.0, compare=False)
    # what-if host cost per step (µs) per open request, arrived and neither finished nor
    # timed out (issue 58: Mixtral reasoning's decode interval); 0: none
    host_us_per_open: float = field(default=0.0, compare=False)
    # what-if: every step lasts at least this many µs, the server's host loop (issue 58:
    # the overloaded runs' sampled schedule calls; evaluator.data.host_time); 0: none
    host_floor_us: float = field(default=0.0, compare=False)
    # weights of the loss's steady-percentile terms (evaluator.scoring.score); None: default
    loss_weights: dict[str, float] | None = field(default=None, compare=False)

    @property
    def n_requests(self) -> int:
        return int(self.arrival_us.shape[0])

    @cached_property
    def arch_vector(self) -> np.ndarray:
        a, h = self.arch, self.hardware
        vals = {"layers": a.layers, "hidden": a.hidden, "heads": a.heads,
                "kv_heads": a.kv_heads, "head_dim": a.head_dim, "intermediate": a.intermediate,
                "n_experts": a.n_experts, "topk": a.topk, "vocab": a.vocab,
                "tp": self.server.tp, "peak_flops": h.peak_flops, "hbm_bw": h.hbm_bw,
                "nvlink_bw": h.nvlink_bw, "bytes_per_param": 2.0}
        base = np.array([float(vals[k]) for k in ARCH_FIELDS], dtype=np.float64)
        return np.concatenate([base, np.asarray(self.kernels, dtype=np.float64)])

    def head(self, seconds: float) -> Scenario:
        """The same run cut to the requests arriving in the first ``seconds`` (for tests)."""
        return self.window(0.0, seconds, keep_name=True)

    def window(self, start_s: float, end_s: float, warmup_s: float = 0.0,
               keep_name: bool = False) -> Scenario:
        """The requests arriving in ``[start_s - warmup_s, end_s)``, as a run of its own.

        Requests of the warm-up part are simulated (they fill the batches and the KV cache
        to a steady state) but not scored: ``scored`` marks the rest. Measured aggregates
        are recomputed from the scored requests' ground truth. Closed-loop fitting uses
        one such slice per load stage, a fraction of the cost of the whole run.
        """
        t0 = max(0.0, start_s - warmup_s)
        keep = (self.arrival_us >= t0 * 1e6) & (self.arrival_us < end_s * 1e6)
        arrival = self.arrival_us[keep]
        scored = arrival >= start_s * 1e6
        if self.scored is not None:
            scored &= self.scored[keep]
        m = self.measured
        e2e, ttft, failed = m.e2e_s[keep], m.ttft_s[keep], m.failed[keep]
        summary = summary_from_requests(e2e[scored], ttft[scored], failed[scored])
        stages, edge = [], 0.0
        for st in self.stages:
            lo, hi = max(edge, t0), min(edge + st.duration_s, end_s)
            if hi > lo:
                stages.append(Stage(st.rate, hi - lo))
            edge += st.duration_s
        name = self.name if keep_name else f"{self.name}@{start_s:.0f}-{end_s:.0f}s"
        return replace(self, name=name, stages=tuple(stages),
                       arrival_us=arrival - t0 * 1e6, input_tokens=self.input_tokens[keep],
                       output_tokens=self.output_tokens[keep],
                       prefix_group=self.prefix_group[keep],
                       prompt_id=None if self.prompt_id is None else self.prompt_id[keep],
                       measured=Measured(e2e, ttft, failed, summary),
                       scored=None if scored.all() else scored,
                       meta={**self.meta, "window_s": (start_s, end_s, warmup_s),
                             "parent": self.name,
                             "offset_s": float(self.meta.get("offset_s", 0.0)) + t0})

    def stage_slices(self, width_s: float = 120.0, warmup_s: float = 30.0) -> list[Scenario]:
        """One window of ``width_s`` (after ``warmup_s``) in the middle of every load stage."""
        out, edge = [], 0.0
        for st in self.stages:
            mid = edge + st.duration_s / 2.0
            half = min(width_s, st.duration_s) / 2.0
            out.append(self.window(mid - half, mid + half, warmup_s))
            edge += st.duration_s
        return out

    def stage_of(self, t_us: np.ndarray) -> np.ndarray:
        """Load-stage index of each time (µs since the first arrival)."""
        edges = np.cumsum([s.duration_s * 1e6 for s in self.stages])[:-1]
        return np.searchsorted(edges, t_us, side="right")


def summary_from_requests(e2e: np.ndarray, ttft: np.ndarray, failed: np.ndarray
                          ) -> dict[str, float]:
    """Aggregates in the shape of ``_summary`` computed from per-request ground truth."""
    ok = ~failed & np.isfinite(e2e)
    out = {"successes": float(ok.sum()), "failures": float(failed.sum())}
    if ok.any():
        for metric, vals in (("e2e", e2e[ok]), ("ttft", ttft[ok & np.isfinite(ttft)])):
            if vals.size == 0:
                continue
            out[f"{metric}_mean"] = float(vals.mean())
            for q in (50, 90, 99):
                out[f"{metric}_p{q}"] = float(np.percentile(vals, q))
    return out


_SUMMARY_KEYS = {"mean": "mean", "p50": "median", "p90": "p90", "p99": "p99"}


def _summary(path: Path) -> dict[str, float]:
    doc = _read_json(path)
    out: dict[str, float] = {"successes": float(_get(doc, path, "successes.count")),
                             "failures": float(_get(doc, path, "failures.count"))}
    if out["successes"] > 0:
        for metric, key in (("e2e", "request_latency"), ("ttft", "time_to_first_token")):
            for short, src in _SUMMARY_KEYS.items():
                out[f"{metric}_{short}"] = float(
                    _get(doc, path, f"successes.latency.{key}.{src}"))
    return out


def load_scenario(exp_dir: Path, data: Path) -> Scenario:
    """Load and validate one experiment directory."""
    req_path = exp_dir / "requests.json"
    rows = read_request_rows(exp_dir)
    doc = rows.doc
    cfg = lambda k: int(_get(doc, req_path, f"config.{k}", int))  # noqa: E731
    server = Server(tp=cfg("tensor_parallelism"), max_num_seqs=cfg("max_num_seqs"),
                    max_batched_tokens=cfg("max_num_batched_tokens"),
                    kv_blocks=cfg("kv_blocks_total_gpu"), block_size=cfg("block_size"))
    for k, key in SERVER_KEYS.items():
        if k != "max_model_len" and getattr(server, k) <= 0:
            raise DataError(f"{req_path}: field 'config.{key}' must be positive")
    model_id = str(_get(doc, req_path, "model_id", str))
    split = str(_get(doc, req_path, "split", str))
    if split not in ("train", "validate", "test"):
        raise DataError(f"{req_path}: field 'split' must be train/validate/test, got {split!r}")
    arrival, inp = rows.arrival_us, rows.input_tokens
    if np.any(np.diff(arrival) < 0):
        raise DataError(f"{req_path}: field 'requests[].arrival_time_us' not sorted")

    prof_path = exp_dir / "profile.yaml"
    prof = _read_json(prof_path)  # one line of JSON, as the data README says
    sp = _get(prof, prof_path, "data.shared_prefix", dict)
    at = "data.shared_prefix."
    sys_len = int(_get(sp, prof_path, "system_prompt_len", int, at=at))
    if sys_len < 0:
        raise DataError(f"{prof_path}: field '{at}system_prompt_len' must be >= 0 "
                        f"(got {sys_len})")
    out_len = int(_get(sp, prof_path, "output_len", int, positive=True, at=at))
    if out_len >= server.max_model_len:
        raise DataError(f"{prof_path}: field '{at}output_len' {out_len} leaves no room for a "
                        f"prompt within max_model_len {server.max_model_len}")
    n_groups = 1  # absent or null: one shared prompt, as inference-perf's default
    if sp.get("num_unique_system_prompts") is not None:
        n_groups = int(_get(sp, prof_path, "num_unique_system_prompts", int, positive=True,
                            at=at))
    stage_rows = _get(prof, prof_path, "load.stages", list)
    if not stage_rows:
        raise DataError(f"{prof_path}: field 'load.stages' is empty (no load to replay)")
    stages = tuple(Stage(float(_get(s, prof_path, "rate", positive=True,
                                    at=f"load.stages[{i}].")),
                         float(_get(s, prof_path, "duration", positive=True,
                                    at=f"load.stages[{i}].")))
                   for i, s in enumerate(stage_rows))

    ok_inp = inp[(~rows.failed) & (inp > 0)]
    question = (int(_get(sp, prof_path, "question_len", int, at=at))
                if sp.get("question_len") is not None else 0)
    fill = int(np.median(ok_inp)) if ok_inp.size else sys_len + question
    inp = np.where(inp > 0, inp, fill)
    inp = np.minimum(inp, server.max_model_len - out_len)

    arch_dir = data / "models" / model_id.split("/")[-1]
    arch = ModelArch.load(arch_dir / "config.json")
    if refused := server.refusal(arch.heads):
        raise DataError(f"{req_path}: field 'config.{SERVER_KEYS[refused[0]]}': {refused[1]}")
    hw = Hardware.load(data / "hardware" / DATA_GPU)
    summary = _summary(exp_dir / "results" / "summary_lifecycle_metrics.json")
    n = len(inp)
    return Scenario(
        name=exp_dir.name, model=str(doc.get("model_short") or arch.name),
        workload=str(doc.get("profile") or "unknown"), split=split, arch=arch, hardware=hw,
        server=server, stages=stages, system_prompt_len=sys_len, n_prefix_groups=n_groups,
        arrival_us=arrival - arrival[0], input_tokens=inp,
        output_tokens=np.full(n, out_len, dtype=np.int64),
        prefix_group=np.arange(n, dtype=np.int64) % n_groups,
        measured=Measured(e2e_s=rows.e2e_s, ttft_s=rows.ttft_s, failed=rows.failed,
                          summary=summary),
        meta={"model_id": model_id, "path": str(exp_dir)})


def make_scenario(name: str, arrival_us, input_tokens, output_tokens, *, model_dir: Path,
                  hardware: Path, tp: int = 1, max_num_seqs: int = 128,
                  max_batched_tokens: int = 2048, kv_blocks: int = 10_000,
                  block_size: int = 16, system_prompt_len: int = 0, n_prefix_groups: int = 1,
                  split: str = "train", e2e_s=None, ttft_s=None) -> Scenario:
    """A scenario from plain arrays (user traces, hand-made test cases).

    Measured latencies default to NaN (nothing to compare against) unless given.
    """
    arrival = np.asarray(arrival_us, dtype=np.float64)
    n = arrival.shape[0]
    e2e = np.full(n, np.nan) if e2e_s is None else np.asarray(e2e_s, dtype=np.float64)
    ttft = np.full(n, np.nan) if ttft_s is None else np.asarray(ttft_s, dtype=np.float64)
    failed = ~np.isfinite(e2e) if e2e_s is not None else np.zeros(n, dtype=bool)
    arch = ModelArch.load(model_dir / "config.json")
    return Scenario(
        name=name, model=arch.name, workload="custom", split=split, arch=arch,
        hardware=Hardware.load(hardware),
        server=Server(tp=tp, max_num_seqs=max_num_seqs, max_batched_tokens=max_batched_tokens,
                      kv_blocks=kv_blocks, block_size=block_size),
        stages=(Stage(rate=0.0, duration_s=float(arrival.max(initial=0.0)) / 1e6 + 1.0),),
        system_prompt_len=system_prompt_len, n_prefix_groups=n_prefix_groups,
        arrival_us=arrival, input_tokens=np.asarray(input_tokens, dtype=np.int64),
        output_tokens=np.asarray(output_tokens, dtype=np.int64),
        prefix_group=np.arange(n, dtype=np.int64) % max(n_prefix_groups, 1),
        measured=Measured(e2e, ttft, failed, summary_from_requests(e2e, ttft, failed)))
