"""An inference-perf output directory (with its vLLM config) -> an experiment.

Why: inference-perf is the load generator of the bundled runs, and its output directory
is what a vLLM user running it has. The layout is the bundled experiments' one::

    DIR/profile.yaml          inference-perf config (YAML, or one line of JSON); or
    DIR/results/config.yaml   the copy inference-perf writes
    DIR/exp-config.yaml       vLLM server args (model, tensor_parallelism, max_model_len,
                              max_num_batched_tokens, max_num_seqs[, block_size])
    DIR/results/per_request_lifecycle_metrics.json   inference-perf per-request records
    (or DIR/requests.json + DIR/ground_truth.json, the bundled runs' per-request files)
    DIR/results/summary_lifecycle_metrics.json       optional: the run's aggregates
    DIR/vllm.log              optional: '# GPU blocks: N' gives the KV pool size

The bundled loader's rules apply (data README traps 4, 5): with ``shared_prefix`` data and
``ignore_eos`` every request decodes the profile's ``output_len`` (client-side output
counts are wrong for many requests), and requests join the profile's system-prompt groups
round robin. Arrival times are the records' ``start_time``; E2E = ``end_time`` -
``start_time``; TTFT = first output-token time - ``start_time``; a record with an
``error`` failed on the client (kept, with its error type as status).
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import numpy as np

from evaluator.data.experiment import ExperimentSpec
from evaluator.data.run_files import DataError, _read_json, read_request_rows, read_yaml
from evaluator.data.scenarios import Stage, _summary
from evaluator.ingest.common import (
    ServerFlags,
    assemble,
    read_hardware,
    read_model_config,
    resolve_server,
    safe_name,
    timeout_notes,
)
from evaluator.ingest.kv_pool import pool_note

MAX_CONFIG_BYTES = 16 << 20  # profile.yaml and exp-config.yaml are a few KB

_VLLM_KEYS = {"tp": ("tensor_parallelism", "tensor_parallel_size", "tensor-parallel-size"),
              "max_num_seqs": ("max_num_seqs", "max-num-seqs"),
              "max_batched_tokens": ("max_num_batched_tokens", "max-num-batched-tokens"),
              "block_size": ("block_size", "block-size"),
              "max_model_len": ("max_model_len", "max-model-len")}


def _yaml(path: Path) -> dict[str, Any]:
    """A config file (YAML or JSON) as a mapping; anything else, an invalid date or a
    number past Python's digit limit included, is one line naming the file and field."""
    doc = read_yaml(path, max_bytes=MAX_CONFIG_BYTES, what="config file")
    if not isinstance(doc, dict):
        raise DataError(f"{path}: expected a mapping")
    return doc


def _positive(obj: dict[str, Any], key: str, where: str) -> int:
    """A server limit the source records: a positive integer, or a one-line error."""
    val = obj[key]
    if isinstance(val, bool) or not isinstance(val, int) or val <= 0:
        raise DataError(f"{where}: must be a positive integer, got {val!r}")
    return val


def _first(d: Path, *names: str) -> Path | None:
    return next((d / n for n in names if (d / n).is_file()), None)


def _num(obj: Any, where: str, field: str, default: Any = None) -> float:
    val = obj.get(field, default) if isinstance(obj, dict) else default
    if isinstance(val, bool) or not isinstance(val, (int, float)) or not (
            -1e300 < val < 1e300):  # also NaN, inf and integers no float can hold
        if not isinstance(obj, dict) or field not in obj:
            raise DataError(f"{where}, field '{field}': missing")
        raise DataError(f"{where}, field '{field}': {val!r} is not a finite number "
                        "(|value| < 1e300)")
    if val < 0:
        raise DataError(f"{where}, field '{field}': negative value {val}")
    return float(val)


def _whole(obj: Any, where: str, field: str) -> int:
    """A token count: a finite whole number (491.7 tokens is no count; it was truncated)."""
    val = _num(obj, where, field)
    if not val.is_integer() or val > 2**53:
        raise DataError(f"{where}, field '{field}': not a whole number of tokens: {val!r}")
    return int(val)


def _table(obj: Any, where: str, field: str) -> dict[str, Any]:
    """``obj[field]`` as a mapping ({} when absent), or a one-line error."""
    val = obj.get(field) if isinstance(obj, dict) else None
    if val is None:
        return {}
    if not isinstance(val, dict):
        raise DataError(f"{where}, field '{field}': not a mapping ({type(val).__name__})")
    return val


def _count(obj: dict[str, Any], where: str, field: str, positive: bool = False) -> int | None:
    """An optional whole number of the profile (None when absent), or a one-line error."""
    val = obj.get(field)
    if val is None:
        return None
    if isinstance(val, bool) or not isinstance(val, int) or val < (1 if positive else 0):
        raise DataError(f"{where}, field '{field}': must be a "
                        f"{'positive' if positive else 'non-negative'} integer, got {val!r}")
    return val


def _dig(obj: Any, *path: str) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _lifecycle(path: Path) -> dict[str, Any]:
    """Per-request arrays from inference-perf's ``per_request_lifecycle_metrics.json``."""
    rows = _read_json(path)
    if not isinstance(rows, list) or not rows:
        raise DataError(f"{path}: expected a non-empty list of request records")
    n = len(rows)
    start, e2e, ttft = np.empty(n), np.full(n, np.nan), np.full(n, np.nan)
    inp, out = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    status = []
    for i, r in enumerate(rows):
        where = f"{path}: row {i + 1}"
        if not isinstance(r, dict):
            raise DataError(f"{where}: not an object")
        start[i] = _num(r, where, "start_time")
        end = _num(r, where, "end_time")
        if end < start[i]:
            raise DataError(f"{where}, field 'end_time': request finished before it arrived")
        info = _table(r, where, "info")
        tok = info.get("input_tokens", _dig(info, "request_metrics", "text", "input_tokens"))
        inp[i] = _whole({"input_tokens": tok if tok is not None else 0}, where,
                        "input_tokens")
        resp = _table(info, f"{where}, field 'info'", "response_metrics")
        usage = _table(resp, f"{where}, field 'info.response_metrics'", "server_usage")
        served = usage.get("completion_tokens")
        if served is not None:  # the server's count, named where it was read
            key = "info.response_metrics.server_usage.completion_tokens"
            out[i] = _whole({key: served}, where, key)
        else:
            count = info.get("output_tokens", resp.get("output_tokens", 0))
            out[i] = _whole({"output_tokens": count or 0}, where, "output_tokens")
        times = info.get("output_token_times", resp.get("output_token_times")) or []
        if not isinstance(times, list) or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in times):
            raise DataError(f"{where}, field 'output_token_times': not a list of numbers")
        if any(b < a for a, b in itertools.pairwise(times)):
            raise DataError(f"{where}, field 'output_token_times': timestamps not monotonic")
        if times and (times[0] < start[i] or times[-1] > end + 1e-3):
            raise DataError(f"{where}, field 'output_token_times': outside start..end")
        err = r.get("error")
        if err:
            kind = str(err.get("error_type") or "error") if isinstance(err, dict) else "error"
            msg = str(err.get("error_msg") or "") if isinstance(err, dict) else str(err)
            status.append("timeout" if re.search(r"time.?out", kind + msg, re.I)
                          else safe_name(kind))
        else:
            status.append("ok")
            e2e[i] = end - start[i]
            if times:
                ttft[i] = times[0] - start[i]
    return {"arrival_us": (start - start.min()) * 1e6, "input": inp, "output": out,
            "status": status, "e2e": e2e, "ttft": ttft, "config": {}}


def _bundled(d: Path) -> dict[str, Any]:
    """Per-request arrays from the bundled runs' ``requests.json`` + ``ground_truth.json``,
    read (and every row checked) as the scenario loader reads them."""
    rows = read_request_rows(d)
    doc = rows.doc
    return {"arrival_us": rows.arrival_us - rows.arrival_us.min(), "input": rows.input_tokens,
            "output": rows.output_tokens,
            "status": ["error" if f else "ok" for f in rows.failed], "e2e": rows.e2e_s,
            "ttft": rows.ttft_s, "config": doc.get("config") or {}, "split": doc.get("split"),
            "profile": doc.get("profile"), "model_id": doc.get("model_id"),
            "model_short": doc.get("model_short")}


def _kv_blocks(d: Path, block_size: int | None) -> int | None:
    log = _first(d, "vllm.log", "results/vllm.log")
    if log is None:
        return None
    text = log.read_text(encoding="utf-8", errors="replace")
    m = re.search(r"# GPU blocks: (\d+)", text)
    if m:
        if int(m.group(1)) <= 0:
            raise DataError(f"{log}: '# GPU blocks: {m.group(1)}': no KV cache, vLLM could not "
                            "have served")
        return int(m.group(1))
    m = re.search(r"GPU KV cache size: ([\d,]+) tokens", text)
    if m is None:
        return None
    blocks = int(m.group(1).replace(",", "")) // (block_size or 16)
    if blocks <= 0:
        raise DataError(f"{log}: 'GPU KV cache size: {m.group(1)} tokens': not one block, "
                        "vLLM could not have served")
    return blocks


def from_inference_perf(directory: str | Path, *, model: str | Path | None,
                        hardware: str | Path, flags: ServerFlags, name: str | None = None,
                        split: str | None = None, workload: str | None = None,
                        model_id: str | None = None, model_short: str | None = None,
                        stages: tuple[Stage, ...] | None = None,
                        data_root: Path | None = None) -> ExperimentSpec:
    """Read, validate and convert one inference-perf directory."""
    d = Path(directory)
    if not d.is_dir():
        raise DataError(f"{d}: not a directory")
    prof_path = _first(d, "profile.yaml", "results/config.yaml", "config.yaml")
    if prof_path is None:
        raise DataError(f"{d}: no profile.yaml or results/config.yaml (inference-perf config)")
    prof = _yaml(prof_path)
    vllm_path = _first(d, "exp-config.yaml", "vllm-config.yaml")
    vllm = _yaml(vllm_path) if vllm_path else {}
    per_req = _first(d, "results/per_request_lifecycle_metrics.json",
                     "per_request_lifecycle_metrics.json")
    if per_req is not None:
        raw = _lifecycle(per_req)
    elif (d / "requests.json").is_file():
        raw = _bundled(d)
    else:
        raise DataError(f"{d}: no results/per_request_lifecycle_metrics.json (enable "
                        "report.request_lifecycle.per_request) and no requests.json")
    mid = model_id or vllm.get("model") or raw.get("model_id") or _dig(
        prof, "server", "model_name")
    if not isinstance(mid, str) or not mid:
        what = "missing" if mid is None else f"not a model name ({mid!r})"
        raise DataError(f"{vllm_path or d}: field 'model': {what} (or pass --model-id)")
    if model is None and data_root is not None:
        guess = data_root / "models" / mid.split("/")[-1] / "config.json"
        model = guess if guess.is_file() else None
    if model is None:
        raise DataError(f"--model: required (a config.json for {mid})")
    config, cfg_path = read_model_config(model)
    hw, hw_path = read_hardware(hardware)
    known: dict[str, tuple[int, str]] = {}
    for k, keys in _VLLM_KEYS.items():  # spellings of one setting must agree
        for key in (key for key in keys if key in vllm):
            val, where = _positive(vllm, key, f"{vllm_path}: field '{key}'"), \
                f"{vllm_path}: field '{key}'"
            if k in known and known[k][0] != val:
                raise DataError(f"{where} is {val}, but {known[k][1]} is {known[k][0]}")
            known[k] = (val, where)
    cfg = raw["config"]
    for k, key in (("kv_blocks", "kv_blocks_total_gpu"), ("tp", "tensor_parallelism"),
                   ("max_num_seqs", "max_num_seqs"), ("block_size", "block_size"),
                   ("max_batched_tokens", "max_num_batched_tokens")):
        where = f"{d / 'requests.json'}: field 'config.{key}'"
        if key in cfg and k not in known:
            known[k] = (_positive(cfg, key, where), where)
    if "kv_blocks" not in known and flags.kv_blocks is None:
        blocks = _kv_blocks(d, flags.block_size)
        if blocks:
            known["kv_blocks"] = (blocks, f"{d / 'vllm.log'}: '# GPU blocks'")
    server, notes = resolve_server(flags, known, config)
    if note := pool_note(config, cfg_path, hw, server.tp, server.block_size, server.kv_blocks):
        notes.append(note)

    data = _table(prof, str(prof_path), "data")
    at = f"{prof_path}: data"
    sp = _table(data, at, "shared_prefix")
    at += ".shared_prefix"
    n = len(raw["status"])
    out = np.asarray(raw["output"], dtype=np.int64)
    ignore_eos = bool(_dig(prof, "server", "ignore_eos"))
    out_len = _count(sp, at, "output_len", positive=True)
    if data.get("type") == "shared_prefix" and out_len is not None and (
            ignore_eos or per_req is None):
        out = np.full(n, out_len, dtype=np.int64)
        notes.append(f"every request decodes the profile's output_len {out_len} "
                     "(ignore_eos; client-side output counts are unreliable)")
    sys_len = (_count(sp, at, "system_prompt_len") or 0) if data.get("type") == \
        "shared_prefix" else 0
    n_groups = (_count(sp, at, "num_unique_system_prompts", positive=True)
                or _count(sp, at, "num_groups", positive=True) or 1)
    if out_len is not None and out_len >= server.max_model_len:
        raise DataError(f"{at}, field 'output_len': {out_len} output tokens do not fit "
                        f"max_model_len {server.max_model_len}")
    longest = int(np.max(raw["input"])) if n else 0
    if sys_len > 0 and sys_len >= longest:  # the prompts include their system prompt
        raise DataError(f"{at}, field 'system_prompt_len': {sys_len} tokens, not shorter "
                        f"than the longest prompt of the records ({longest})")
    if sys_len <= 0:
        n_groups = 0
    else:
        notes.append(f"prefix groups inferred round robin over {n_groups} system prompts of "
                     f"{sys_len} tokens (inference-perf does not record them)")
    st = _dig(prof, "load", "stages")
    if st is not None and not isinstance(st, list):
        raise DataError(f"{prof_path}: field 'load.stages': not a list of stages")
    prof_stages = tuple(Stage(_num(s, f"{prof_path}: load.stages[{i}]", "rate"),
                              _num(s, f"{prof_path}: load.stages[{i}]", "duration"))
                        for i, s in enumerate(st)) if isinstance(st, list) and st else None
    if prof_stages is not None and any(s.duration_s <= 0 for s in prof_stages):
        raise DataError(f"{prof_path}: field 'load.stages': rate >= 0 and duration > 0 needed")
    done = np.array([s == "ok" for s in raw["status"]])
    untimed = int(np.sum(done & ~np.isfinite(raw["ttft"])))
    if untimed:
        notes.append(f"{untimed} of {int(done.sum())} completed records have no "
                     "output_token_times: their TTFT is unknown, left out of the measured "
                     "TTFT and ITL")
    timeout = _dig(prof, "load", "request_timeout")
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        notes += timeout_notes(np.array([float(timeout)]))
    summary = None
    summ_path = _first(d, "results/summary_lifecycle_metrics.json",
                       "summary_lifecycle_metrics.json")
    if summ_path is not None:
        summary = _summary(summ_path)
        counted = int(summary["successes"] + summary["failures"])
        if counted != n:  # a different run, or a cut of it: its aggregates are not these rows'
            notes.append(f"{summ_path.name} counts {counted} requests, the per-request "
                         f"records {n}: not used (the measured figures come from the records)")
            summary = None
    wl = workload or raw.get("profile") or safe_name(d.name)
    short = model_short or raw.get("model_short") or safe_name(mid.split("/")[-1])
    source = {"kind": "inference-perf", "directory": str(d.resolve()),
              "per_request": str((per_req or d / "requests.json").resolve()),
              "model_config": str(cfg_path.resolve()), "hardware": str(hw_path.resolve())}
    order = np.argsort(raw["arrival_us"], kind="stable")
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)  # round robin in arrival order, as the bundled loader does
    return assemble(
        name=safe_name(name or d.name), model_id=mid, model_short=short, workload=wl,
        split=split or raw.get("split") or "train", server=server, model_config=config,
        hardware=hw, arrival_us=raw["arrival_us"], input_tokens=raw["input"],
        output_tokens=out, prefix_group=rank % max(n_groups, 1), n_prefix_groups=n_groups,
        system_prompt_len=sys_len, status=raw["status"], e2e_s=raw["e2e"],
        ttft_s=raw["ttft"], stages=stages or prof_stages, summary=summary, source=source,
        notes=notes, row_where=lambda i: f"{per_req or d / 'requests.json'}: row {i + 1}")
