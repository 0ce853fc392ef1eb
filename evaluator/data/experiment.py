"""Experiment directories written by ``evolve ingest``: their format, writer and loader.

Why a second format beside the bundled one: the bundled runs (``evaluator.data.scenarios``) are
one lab's inference-perf runs on H100s, so their loader takes the output length from the
load profile, infers prefix groups round robin and assumes the H100 datasheet. A user's
run has its own GPU, per-request output lengths and (in a TraceV2) recorded prefix
groups. An ingested experiment therefore carries everything the simulator needs, already
resolved: its own ``model/config.json`` and ``hardware.json``, the server limits, and per
request the lengths, prefix group, status and measured latencies as they will be
simulated. Nothing is inferred at load time, so ``evolve export-trace`` of an ingested run
gives back what was ingested.

``requests.json`` (one JSON object; the first keys match the bundled files so that tools
reading only its head, such as ``evolve export-go``, find the model)::

    format, experiment, model_id, model_short, profile (workload), split,
    config {tensor_parallelism, max_num_seqs, max_num_batched_tokens,
            kv_blocks_total_gpu, block_size, max_model_len},
    prefix {system_prompt_len, num_groups, mode (system | prompt; absent = system)},
    stages [{rate, duration}],
    summary (optional aggregates, seconds), source {...}, notes [...],
    requests [{index, arrival_time_us, input_tokens, output_tokens, prefix_group,
               status, has_error, e2e_s, ttft_s}]

:func:`load_scenarios` is the data directory's loader for both formats.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from evaluator.data.kernel_tables import KernelTables, kernel_block
from evaluator.data.prompt_cache import with_prompt_cache
from evaluator.data.scenarios import (
    LOOPS,
    SERVER_KEYS,
    DataError,
    Hardware,
    Measured,
    ModelArch,
    Scenario,
    Server,
    Stage,
    _get,
    _read_json,
    data_dir,
    load_scenario,
    summary_from_requests,
)

FORMAT = "evolve-experiment/1"
SPLITS = ("train", "validate", "test")
PREFIX_MODES = ("system", "prompt")


@dataclass
class ExperimentSpec:
    """Everything an ingested experiment holds, validated, ready to be written."""

    name: str
    model_id: str
    model_short: str
    workload: str
    split: str
    server: Server
    model_config: dict[str, Any]
    hardware: dict[str, Any]
    stages: tuple[Stage, ...]
    system_prompt_len: int
    n_prefix_groups: int
    arrival_us: np.ndarray  # float64, sorted, first at 0
    input_tokens: np.ndarray  # int64, total prompt length as simulated
    output_tokens: np.ndarray  # int64, tokens the server decodes
    prefix_group: np.ndarray  # int64 in [0, n_prefix_groups) (0 when there are none)
    status: list[str]  # "ok" or the client's failure status
    e2e_s: np.ndarray  # NaN when failed
    ttft_s: np.ndarray  # NaN when failed or not recorded
    summary: dict[str, float] | None = None
    source: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # "system": a group shares its first system_prompt_len tokens; "prompt": a group is one
    # prompt, sent whole by every request of it (vLLM caches all its full blocks)
    prefix_mode: str = "system"

    def to_doc(self) -> dict[str, Any]:
        sv = self.server
        reqs = []
        for i in range(len(self.status)):
            e2e, ttft = float(self.e2e_s[i]), float(self.ttft_s[i])
            a = float(self.arrival_us[i])
            reqs.append({"index": i, "arrival_time_us": int(a) if a.is_integer() else a,
                         "input_tokens": int(self.input_tokens[i]),
                         "output_tokens": int(self.output_tokens[i]),
                         "prefix_group": int(self.prefix_group[i]), "status": self.status[i],
                         "has_error": self.status[i] != "ok",
                         "e2e_s": e2e if np.isfinite(e2e) else None,
                         "ttft_s": ttft if np.isfinite(ttft) else None})
        return {"format": FORMAT, "experiment": self.name, "model_id": self.model_id,
                "model_short": self.model_short, "profile": self.workload,
                "split": self.split,
                "config": {key: int(getattr(sv, attr)) for attr, key in SERVER_KEYS.items()},
                "prefix": {"system_prompt_len": self.system_prompt_len,
                           "num_groups": self.n_prefix_groups, "mode": self.prefix_mode},
                "stages": [{"rate": s.rate, "duration": s.duration_s} for s in self.stages],
                "summary": self.summary, "source": self.source, "notes": self.notes,
                "requests": reqs}


def is_ingested(exp_dir: Path) -> bool:
    """Whether ``exp_dir`` holds an ingested experiment (its ``requests.json`` says so)."""
    try:
        with open(exp_dir / "requests.json", encoding="utf-8", errors="replace") as fh:
            head = fh.read(200)
    except OSError:
        return False
    return f'"format": "{FORMAT}"' in head or f'"format":"{FORMAT}"' in head


def _number(row: dict, key: str, where: str, nullable: bool = False) -> float:
    val = row.get(key)
    if val is None and nullable:
        return float("nan")
    if isinstance(val, bool) or not isinstance(val, (int, float)) or not (
            -1e300 < val < 1e300):  # also NaN, inf and integers no float can hold
        raise DataError(f"{where}, field '{key}': missing or not a finite number")
    return float(val)


def load_experiment(exp_dir: Path, data: Path | None = None) -> Scenario:
    """Load and validate one ingested experiment directory (``data`` is not needed)."""
    path = exp_dir / "requests.json"
    doc = _read_json(path)
    if doc.get("format") != FORMAT:
        raise DataError(f"{path}: field 'format' is {doc.get('format')!r}, expected {FORMAT!r}")
    cfg = {attr: int(_get(doc, path, f"config.{key}", int)) for attr, key in SERVER_KEYS.items()}
    for attr, key in SERVER_KEYS.items():
        if cfg[attr] <= 0:
            raise DataError(f"{path}: field 'config.{key}' must be positive")
    server = Server(tp=cfg["tp"], max_num_seqs=cfg["max_num_seqs"],
                    max_batched_tokens=cfg["max_batched_tokens"], kv_blocks=cfg["kv_blocks"],
                    block_size=cfg["block_size"], max_model_len=cfg["max_model_len"])
    model_id = str(_get(doc, path, "model_id", str))
    split = str(_get(doc, path, "split", str))
    if split not in SPLITS:
        raise DataError(f"{path}: field 'split' must be train/validate/test, got {split!r}")
    sys_len = int(_get(doc, path, "prefix.system_prompt_len", int))
    n_groups = int(_get(doc, path, "prefix.num_groups", int))
    if sys_len < 0 or n_groups < 0:
        raise DataError(f"{path}: field 'prefix' has a negative value")
    mode = (doc.get("prefix") or {}).get("mode", "system")
    if mode not in PREFIX_MODES:
        raise DataError(f"{path}: field 'prefix.mode' must be one of {', '.join(PREFIX_MODES)},"
                        f" got {mode!r}")
    stages = tuple(Stage(float(_get(s, path, "rate")), float(_get(s, path, "duration")))
                   for s in _get(doc, path, "stages", list))
    if not stages or any(s.duration_s <= 0 or s.rate < 0 for s in stages):
        raise DataError(f"{path}: field 'stages' must list stages of positive duration")
    reqs = _get(doc, path, "requests", list)
    if not reqs:
        raise DataError(f"{path}: field 'requests' is empty")
    n = len(reqs)
    arrival, e2e, ttft = np.empty(n), np.empty(n), np.empty(n)
    inp, out, grp = (np.empty(n, dtype=np.int64) for _ in range(3))
    status: list[str] = []
    for i, r in enumerate(reqs):
        where = f"{path}: requests[{i}]"
        if not isinstance(r, dict):
            raise DataError(f"{where}: not an object")
        arrival[i] = _number(r, "arrival_time_us", where)
        inp[i] = _number(r, "input_tokens", where)
        out[i] = _number(r, "output_tokens", where)
        grp[i] = _number(r, "prefix_group", where)
        e2e[i] = _number(r, "e2e_s", where, nullable=True)
        ttft[i] = _number(r, "ttft_s", where, nullable=True)
        st = r.get("status")
        if not isinstance(st, str) or not st:
            raise DataError(f"{where}, field 'status': missing or empty")
        status.append(st)
        if i and arrival[i] < arrival[i - 1]:
            raise DataError(f"{where}, field 'arrival_time_us': not sorted")
        if arrival[i] < 0 or inp[i] < 1 or out[i] < 1:
            raise DataError(f"{where}: arrival must be >= 0 and token counts >= 1")
        if inp[i] + out[i] > server.max_model_len:
            raise DataError(f"{where}, field 'input_tokens': input + output exceeds "
                            f"max_model_len {server.max_model_len}")
        if not 0 <= grp[i] < max(n_groups, 1):
            raise DataError(f"{where}, field 'prefix_group': not in [0, {max(n_groups, 1)})")
        if (st == "ok") != np.isfinite(e2e[i]):
            raise DataError(f"{where}, field 'e2e_s': must be a number exactly when status "
                            "is ok")
    failed = np.array([s != "ok" for s in status])
    summary = summary_from_requests(e2e, ttft, failed)
    if isinstance(doc.get("summary"), dict):
        summary.update({k: float(v) for k, v in doc["summary"].items()
                        if isinstance(v, (int, float)) and not isinstance(v, bool)})
    arch = ModelArch.load(exp_dir / "model" / "config.json")
    arch = replace(arch, name=model_id.split("/")[-1])
    if refused := server.refusal(arch.heads):
        raise DataError(f"{path}: field 'config.{SERVER_KEYS[refused[0]]}': {refused[1]}")
    prompt = None
    if mode == "prompt":  # each group one prompt: cached whole, no system prompt shared
        prompt, grp, sys_len, n_groups = grp, np.zeros(n, dtype=np.int64), 0, 0
    return Scenario(
        name=exp_dir.name, model=str(doc.get("model_short") or arch.name),
        workload=str(doc.get("profile") or "custom"), split=split, arch=arch,
        hardware=Hardware.load(exp_dir / "hardware.json"), server=server, stages=stages,
        system_prompt_len=sys_len, n_prefix_groups=n_groups, arrival_us=arrival,
        input_tokens=inp, output_tokens=out, prefix_group=grp, prompt_id=prompt,
        measured=Measured(e2e_s=e2e, ttft_s=ttft, failed=failed, summary=summary),
        meta={"model_id": model_id, "path": str(exp_dir), "format": FORMAT,
              "status": status, "source": doc.get("source") or {},
              "notes": doc.get("notes") or [], "model_dir": str(exp_dir / "model"),
              "hardware_file": str(exp_dir / "hardware.json")})


def load_any(exp_dir: Path, data: Path) -> Scenario:
    """An experiment directory of either format."""
    return load_experiment(exp_dir, data) if is_ingested(exp_dir) else load_scenario(exp_dir,
                                                                                        data)


def experiment_dirs(data: str | os.PathLike[str] | None = None) -> list[Path]:
    """The experiment directories of a data directory, sorted by name (hidden ones skipped)."""
    root = data_dir(data)
    return sorted(p for p in (root / "experiments").iterdir()
                  if p.is_dir() and not p.name.startswith("."))


def load_scenarios(data: str | os.PathLike[str] | None = None,
                   names: list[str] | None = None, prompt_cache: bool = True,
                   async_scheduling: bool = True, loop: str = "vllm") -> list[Scenario]:
    """Every experiment under ``<data>/experiments`` (bundled or ingested), or the named ones.

    ``prompt_cache``: requests that repeat a prompt hit vLLM's prefix cache for all of it
    (:func:`evaluator.data.prompt_cache.with_prompt_cache`); off, only shared system prompts do.
    ``async_scheduling``: simulate vLLM's async scheduling (``evaluator/sim/simulator.py``).
    ``loop``: the engine loop (``LOOPS``); BLIS's has no async scheduling."""
    if loop not in LOOPS:
        raise ValueError(f"loop {loop!r}: not one of {', '.join(LOOPS)}")
    root = data_dir(data)
    dirs = experiment_dirs(root)
    if names is not None:
        known = {p.name: p for p in dirs}
        missing = [n for n in names if n not in known]
        if missing:
            raise DataError(f"{root / 'experiments'}: no experiment named {missing[0]!r}")
        dirs = [known[n] for n in names]
    out = []
    tables = KernelTables.load(root)
    for p in dirs:
        sc = load_any(p, root)
        sc = replace(sc, kernels=kernel_block(tables, sc.arch, sc.server.tp, sc.hardware))
        if not is_ingested(p):
            sc.meta.setdefault("model_dir", str(root / "models" / sc.arch.name))
            sc.meta.setdefault("format", "bundled")
        if not prompt_cache:
            sc = replace(sc, prompt_id=None)
        elif sc.prompt_id is None:
            sc = with_prompt_cache(sc)
        out.append(replace(sc, async_scheduling=async_scheduling and loop == "vllm",
                           loop=loop))
    return out


def write_experiment(root: str | os.PathLike[str], spec: ExperimentSpec,
                     replace_existing: bool = False) -> Path:
    """Write ``spec`` under ``<root>/experiments/<name>``, atomically; returns the directory.

    The files go to a hidden temporary directory beside the target, which is loaded back
    with :func:`load_experiment` (so a written experiment is known to load) and only then
    renamed into place. On any failure the temporary directory, and any directory this
    call created, is removed: nothing is left half-written.
    """
    root = Path(root)
    name = spec.name
    if not name or name.startswith(".") or "/" in name or "\\" in name or name in ("..",):
        raise DataError(f"experiment name {name!r}: must be a plain directory name")
    exps = root / "experiments"
    final = exps / name
    for p in (root, exps):  # a file in the way is the user's, and one line
        if p.exists() and not p.is_dir():
            raise DataError(f"{p}: exists and is not a directory")
    if final.exists() and not replace_existing:
        raise DataError(f"{final}: an experiment of that name exists (pick another --name, "
                        "or pass --replace)")
    created = [p for p in (root, exps) if not p.exists()]
    tmp = exps / f".{name}.ingest-{os.getpid()}"
    old = exps / f".{name}.old-{os.getpid()}"
    try:
        (tmp / "model").mkdir(parents=True)
        with open(tmp / "requests.json", "w", encoding="utf-8") as fh:
            json.dump(spec.to_doc(), fh, separators=(",", ":"))
        (tmp / "model" / "config.json").write_text(json.dumps(spec.model_config, indent=2),
                                                   encoding="utf-8")
        (tmp / "hardware.json").write_text(json.dumps(spec.hardware, indent=2),
                                           encoding="utf-8")
        load_experiment(tmp)
        if final.exists():
            final.rename(old)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old.exists() and not final.exists():
            old.rename(final)
        for p in reversed(created):
            if p.exists() and not any(p.iterdir()):
                p.rmdir()
        raise
    shutil.rmtree(old, ignore_errors=True)
    return final
