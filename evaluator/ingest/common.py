"""A user's measured run -> an :class:`~evaluator.data.experiment.ExperimentSpec`: the shared part.

Why: evolve fits step-time models to measured runs, and a BLIS user's runs are recorded by
their own tools on their own GPU, model and vLLM settings. Every source (a BLIS TraceV2
here, an inference-perf directory in :mod:`evaluator.ingest.inference_perf`) ends in
:func:`assemble`, which applies the rules the bundled loader applies (a failed request
with no recorded prompt length gets the median one, inputs are clamped so that input +
output fits ``max_model_len``) once, at ingest time, and records what it did in the
experiment's ``notes``. The model (a Hugging Face ``config.json``) and the GPU (a file in
the bundled datasheet format; H100 and A100 ship in ``evaluator/hardware/``) are checked
here: a config field that changes the cost of a step in a way the features do not model
(MLA, another MoE layout, sliding windows, quantisation, a head size that is not
``hidden / heads``) is refused rather than silently priced as a dense bf16 model.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evaluator.data.experiment import SPLITS, ExperimentSpec
from evaluator.data.scenarios import (
    CLIENT_TIMEOUT_S,
    MAX_MODEL_LEN,
    DataError,
    Hardware,
    ModelArch,
    Server,
    Stage,
    _read_json,
)

HARDWARE_DIR = Path(__file__).resolve().parents[1] / "hardware"
HARDWARE_ALIASES = {"h100": "h100-sxm", "h100-sxm": "h100-sxm", "h100-80gb": "h100-sxm",
                    "a100": "a100-sxm-80gb", "a100-sxm": "a100-sxm-80gb",
                    "a100-80": "a100-sxm-80gb", "a100-sxm-80gb": "a100-sxm-80gb"}
# config.json fields that change a step's cost in ways the glossary's features do not model.
UNMODELLED = {
    "kv_lora_rank": "multi-head latent attention (MLA)",
    "q_lora_rank": "multi-head latent attention (MLA)",
    "n_routed_experts": "a mixture-of-experts layout other than Mixtral's",
    "num_experts": "a mixture-of-experts layout other than Mixtral's",
    "moe_intermediate_size": "a mixture-of-experts layout other than Mixtral's",
    "n_shared_experts": "shared experts",
    "text_config": "a multimodal wrapper (pass the text model's config.json)",
    "quantization_config": "quantised weights (the features assume 16-bit weights)",
    "layer_types": "mixed layer types",
}


@dataclass
class ServerFlags:
    """Server settings given on the command line (None: take from the source or fail)."""

    tp: int | None = None
    max_num_seqs: int | None = None
    max_batched_tokens: int | None = None
    kv_blocks: int | None = None
    block_size: int | None = None
    max_model_len: int | None = None


MAX_E2E_S = 86_400.0  # a completed request slower than a day is a unit slip, not a latency
FLAG_NAMES = {"tp": "--tp", "max_num_seqs": "--max-num-seqs",
              "max_batched_tokens": "--max-num-batched-tokens", "kv_blocks": "--kv-blocks",
              "block_size": "--block-size", "max_model_len": "--max-model-len"}


def read_model_config(spec: str | Path) -> tuple[dict[str, Any], Path]:
    """A Hugging Face ``config.json`` (file or directory holding one), checked."""
    path = Path(spec)
    if path.is_dir():
        path = path / "config.json"
    doc = _read_json(path)
    if not isinstance(doc, dict):
        raise DataError(f"{path}: not a config.json object")
    for key, what in UNMODELLED.items():
        if doc.get(key) not in (None, 0, {}, []):
            raise DataError(f"{path}: field '{key}': {what} is not modelled by evolve's "
                            "step features")
    arch = ModelArch.load(path)
    for attr in ("layers", "hidden", "heads", "kv_heads", "intermediate", "vocab"):
        if getattr(arch, attr) <= 0:
            raise DataError(f"{path}: field for {attr} must be positive")
    if arch.hidden % arch.heads or arch.heads % arch.kv_heads:
        raise DataError(f"{path}: field 'num_attention_heads': hidden_size / heads / "
                        "kv heads do not divide evenly")
    hd = doc.get("head_dim")
    if hd is not None and hd != arch.head_dim:
        raise DataError(f"{path}: field 'head_dim': {hd} is not hidden_size / "
                        f"num_attention_heads = {arch.head_dim} (not modelled)")
    if arch.n_experts > 1 and not 0 < arch.topk <= arch.n_experts:
        raise DataError(f"{path}: field 'num_experts_per_tok': must be in [1, experts]")
    sw = doc.get("sliding_window")
    mpe = doc.get("max_position_embeddings")
    if sw not in (None, 0) and isinstance(mpe, int) and isinstance(sw, int) and sw < mpe:
        raise DataError(f"{path}: field 'sliding_window': sliding-window attention ({sw} "
                        "tokens) is not modelled")
    return doc, path


def read_hardware(spec: str | Path) -> tuple[dict[str, Any], Path]:
    """A GPU file in the bundled datasheet format, or a shipped one by name (H100, A100)."""
    path = Path(spec)
    if not path.exists():
        key = str(spec).lower().removesuffix(".json")
        if key not in HARDWARE_ALIASES:
            shipped = ", ".join(sorted(p.stem for p in HARDWARE_DIR.glob("*.json")))
            raise DataError(f"{spec}: no such hardware file and no shipped GPU of that name "
                            f"(shipped: {shipped}; aliases: H100, A100)")
        path = HARDWARE_DIR / f"{HARDWARE_ALIASES[key]}.json"
    doc = _read_json(path)
    hw = Hardware.load(path)
    for attr in ("peak_flops", "hbm_bw", "nvlink_bw"):
        if not getattr(hw, attr) > 0:
            raise DataError(f"{path}: field for {attr} must be positive")
    return doc, path


def resolve_server(flags: ServerFlags, known: dict[str, tuple[int, str]],
                   model_config: dict[str, Any]) -> tuple[Server, list[str]]:
    """Server limits from the flags and what the source records; a conflict is an error.

    ``known`` maps a setting to (value, where the source says so). ``block_size`` falls
    back to vLLM's 16, ``max_model_len`` to the config's ``max_position_embeddings``
    (vLLM's default), then 4096.
    """
    def source(key: str) -> str:  # the flag the user gave, else the file that recorded it
        rec = known.get(key)
        return rec[1] if getattr(flags, key) is None and rec is not None else FLAG_NAMES[key]

    vals: dict[str, int] = {}
    notes = []
    for key, flag in FLAG_NAMES.items():
        given, rec = getattr(flags, key), known.get(key)
        if given is not None and rec is not None and int(given) != int(rec[0]):
            raise DataError(f"{rec[1]}: {rec[0]} disagrees with {flag} {given}")
        val = given if given is not None else (rec[0] if rec is not None else None)
        if val is None and key == "block_size":
            val = 16
            notes.append("KV block size 16 (vLLM's default on GPUs)")
        if val is None and key == "max_model_len":
            mpe = model_config.get("max_position_embeddings")
            val = int(mpe) if isinstance(mpe, int) and mpe > 0 else MAX_MODEL_LEN
            notes.append(f"max_model_len {val} taken from the model config (vLLM's default)")
        if val is None:
            raise DataError(f"{flag}: required (the source does not record it)")
        if int(val) <= 0:
            raise DataError(f"{source(key)}: must be positive, got {val}")
        if int(val) > 2**31:  # no server setting comes near; an int64 column must hold it
            raise DataError(f"{source(key)}: {val} is out of range")
        vals[key] = int(val)
    server = Server(**vals)
    heads = model_config.get("num_attention_heads")
    if refused := server.refusal(heads if isinstance(heads, int) and heads > 0 else None):
        raise DataError(f"{source(refused[0])}: {refused[1]}")
    return server, notes


_NUM = r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_STAGE = re.compile(rf"\s*{_NUM}\s*[x×*@]\s*{_NUM}\s*s?\s*")


def parse_stages(text: str) -> tuple[Stage, ...]:
    """``"8x600,20x600"``: load stages as RATE x SECONDS, comma-separated."""
    out = []
    for part in text.split(","):
        m = _STAGE.fullmatch(part)
        if not m:
            raise DataError(f"--stages: {part.strip()!r} is not RATExSECONDS (e.g. 8x600)")
        rate, dur = float(m.group(1)), float(m.group(2))
        if rate < 0 or dur <= 0 or not (math.isfinite(rate) and math.isfinite(dur)):
            raise DataError(f"--stages: {part.strip()!r} needs rate >= 0 and seconds > 0")
        out.append(Stage(rate, dur))
    return tuple(out)


def safe_name(text: str) -> str:
    """An experiment directory name from free text (lower case, ``[a-z0-9._-]``)."""
    name = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-.")
    return name or "run"


def _fill(vals: np.ndarray, mask_ok: np.ndarray, what: str, notes: list[str],
          where: str = "the requests", field: str = "") -> np.ndarray:
    zero = vals <= 0
    if not zero.any():
        return vals
    good = vals[mask_ok & ~zero]
    if good.size == 0:
        raise DataError(f"{where}, field '{field}': no completed request has {what} above 0, "
                        "so there is none to give the others")
    fill = int(np.median(good))
    notes.append(f"{int(zero.sum())} request(s) without {what} got the median of the "
                 f"completed ones, {fill}")
    return np.where(zero, fill, vals)


def assemble(*, name: str, model_id: str, model_short: str | None, workload: str, split: str,
             server: Server, model_config: dict[str, Any], hardware: dict[str, Any],
             arrival_us: np.ndarray, input_tokens: np.ndarray, output_tokens: np.ndarray,
             prefix_group: np.ndarray, n_prefix_groups: int, system_prompt_len: int,
             status: list[str], e2e_s: np.ndarray, ttft_s: np.ndarray,
             stages: tuple[Stage, ...] | None, summary: dict[str, float] | None,
             source: dict[str, Any], notes: list[str],
             prefix_mode: str = "system",
             row_where: Callable[[int], str] | None = None) -> ExperimentSpec:
    """Sort by arrival, fill and clamp lengths, settle the stages: the common last step.

    ``row_where(i)`` names the source's row ``i`` (0-based, in file order) as the source's
    own reader does (a TraceV2 CSV gives its line too), so an error found here points where
    a reader's error would.
    """
    if split not in SPLITS:
        raise DataError(f"--split: must be one of {', '.join(SPLITS)}, got {split!r}")
    if model_short is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*",
                                                    model_short):
        raise DataError(f"--model-short {model_short!r}: letters, digits, '.', '_' and '-' "
                        "only (it keys the model's constants and names it in the Go export)")
    order = np.argsort(np.asarray(arrival_us, dtype=np.float64), kind="stable")
    arrival = np.asarray(arrival_us, dtype=np.float64)[order]
    arrival = arrival - arrival[0]
    status = [status[i] for i in order]
    ok = np.array([s == "ok" for s in status])
    src = str(source.get("data") or source.get("per_request") or "the requests")
    where = row_where or (lambda i: f"{src}: row {i + 1}")
    e2e_sorted = np.asarray(e2e_s, dtype=np.float64)[order]
    if np.any(long := ok & (e2e_sorted > MAX_E2E_S)):  # would swamp every mean it enters
        i = int(np.flatnonzero(long)[0])
        raise DataError(f"{where(int(order[i]))}: an E2E latency of "
                        f"{e2e_sorted[i]:.4g} s, over a day (a time-unit slip?)")
    timed = ok & np.isfinite(np.asarray(ttft_s, dtype=np.float64)[order])
    if not timed.any():  # nothing to score a model against; `evolve run` failed on it
        raise DataError(f"{src}: no request completed with a measured time to first token "
                        f"({int((~ok).sum())} of {len(ok)} failed, {int((ok & ~timed).sum())} "
                        "completed without token times): nothing to score a model against")
    inp = _fill(np.asarray(input_tokens, dtype=np.int64)[order], ok, "an input length", notes,
                src, "input_tokens")
    out = np.asarray(output_tokens, dtype=np.int64)[order]
    out = np.where(ok & (out <= 0), 1, out)
    out = _fill(out, ok, "an output length", notes, src, "output_tokens")
    if np.any(too_long := out >= server.max_model_len):
        i, many = int(np.flatnonzero(too_long)[0]), int(too_long.sum())
        also = (f" ({many} of {out.size} requests do not: is max_model_len right?)"
                if many > 1 else "")
        raise DataError(f"{where(int(order[i]))}, field 'output_tokens': {out[i]} "
                        f"output tokens do not fit max_model_len {server.max_model_len}"
                        f"{also}")
    clamped = inp > server.max_model_len - out
    if clamped.any():
        notes.append(f"{int(clamped.sum())} input length(s) clamped so that input + output "
                     f"<= max_model_len {server.max_model_len}")
        inp = np.minimum(inp, server.max_model_len - out)
    span_s = float(arrival[-1]) / 1e6
    if stages is None:
        dur = max(1.0, float(math.ceil(span_s)) + (1.0 if span_s.is_integer() else 0.0))
        stages = (Stage(rate=round(len(status) / dur, 6), duration_s=dur),)
    else:
        _check_stages(stages, arrival / 1e6, notes)
    return ExperimentSpec(
        name=name, model_id=model_id, model_short=model_short or safe_name(
            model_id.split("/")[-1]), workload=workload, split=split, server=server,
        model_config=model_config, hardware=hardware, stages=tuple(stages),
        system_prompt_len=int(system_prompt_len), n_prefix_groups=int(n_prefix_groups),
        arrival_us=arrival, input_tokens=inp, output_tokens=out,
        prefix_group=np.asarray(prefix_group, dtype=np.int64)[order], status=status,
        e2e_s=np.asarray(e2e_s, dtype=np.float64)[order],
        ttft_s=np.asarray(ttft_s, dtype=np.float64)[order], summary=summary, source=source,
        notes=notes, prefix_mode=prefix_mode)


def _check_stages(stages: Sequence[Stage], arrival_s: np.ndarray, notes: list[str]) -> None:
    """Stages that do not describe the arrivals are refused: a stage of rate 0 that
    requests arrive in, or stages ending before a tenth of the requests arrive (the search
    would judge stage slices with next to nothing in them). A short overrun is noted: those
    requests count in the last stage."""
    what = "the load stages (--stages, or the profile's load.stages)"
    starts = np.cumsum([0.0, *(s.duration_s for s in stages)])
    for k, s in enumerate(stages):
        inside = int(np.sum((arrival_s >= starts[k]) & (arrival_s < starts[k + 1])))
        if s.rate == 0 and inside:
            raise DataError(f"{what}: stage {k + 1} has rate 0, but {inside} requests "
                            "arrive in it")
    late = int(np.sum(arrival_s >= starts[-1]))
    if late > 0.1 * arrival_s.size:
        raise DataError(f"{what} end at {starts[-1]:g} s, but {late} of {arrival_s.size} "
                        f"requests arrive after that (until {arrival_s[-1]:.1f} s): they do "
                        "not describe this trace")
    if late:
        notes.append(f"the load stages end at {starts[-1]:g} s; {late} request(s) arrive "
                     f"until {arrival_s[-1]:.1f} s (counted in the last stage)")


def timeout_notes(timeouts_s: np.ndarray) -> list[str]:
    """Notes when a source's client timeouts are not the 300 s the simulator applies."""
    if timeouts_s.size == 0:
        return [f"no client deadlines recorded; evolve's simulator aborts requests "
                f"{CLIENT_TIMEOUT_S:g} s after arrival (inference-perf's timeout)"]
    med = float(np.median(timeouts_s))
    if abs(med - CLIENT_TIMEOUT_S) > 1.0:
        return [f"client deadlines are {med:g} s after arrival (median); evolve's simulator "
                f"applies {CLIENT_TIMEOUT_S:g} s"]
    return []
