"""Small hand-made TraceV2 pairs for the ingest tests (no simulator, no bundled data)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import yaml
from synthetic_data import MODEL_CONFIG

from evaluator.ingest.tracev2 import write_tracev2

WALL0 = 1_771_340_000_000_000  # a Unix time in µs, as `blis observe` records send times


def model_dir(root: Path, **extra) -> Path:
    d = root / "model"
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps({**MODEL_CONFIG, **extra}))
    return d


def columns(n: int = 12, failed: tuple[int, ...] = (3,), errored: tuple[int, ...] = (7,),
            prefix: int = 32) -> tuple[dict, dict]:
    """(header, columns) of an observe-like trace: wall-clock sends, suffix-only inputs."""
    arrival = np.arange(n, dtype=np.int64) * 250_000
    send = WALL0 + arrival + 137
    ttft = 20_000 + 1_000 * np.arange(n)
    e2e = 900_000 + 10_000 * np.arange(n)
    bad = set(failed) | set(errored)
    ok = np.array([i not in bad for i in range(n)])
    status = ["timeout" if i in failed else "error" if i in errored else "ok" for i in range(n)]
    zeros = np.zeros(n, dtype=np.int64)
    cols = {
        "request_id": np.arange(n) + 100, "client_id": ["c"] * n, "tenant_id": [""] * n,
        "slo_class": [""] * n, "session_id": [""] * n, "round_index": zeros,
        "prefix_group": [f"sys-{i % 3}" for i in range(n)], "prefix_length": zeros + prefix,
        "streaming": np.ones(n, dtype=bool), "input_tokens": 200 + 10 * np.arange(n),
        "output_tokens": np.where(ok, 64, 0), "text_tokens": zeros, "image_tokens": zeros,
        "audio_tokens": zeros, "video_tokens": zeros, "reason_ratio": np.zeros(n),
        "model": [""] * n, "deadline_us": arrival + 300_000_000,
        "server_input_tokens": np.where(ok, 232 + 10 * np.arange(n), 0),
        "arrival_time_us": arrival, "send_time_us": send,
        "first_chunk_time_us": np.where(ok, send + ttft, 0),
        "last_chunk_time_us": np.where(ok, send + e2e, 0), "num_chunks": np.where(ok, 65, 0),
        "status": status, "error_message": ["" if s == "ok" else "boom" for s in status],
        "finish_reason": ["length" if s == "ok" else "" for s in status],
        "x_request_id": [f"id-{i}" for i in range(n)],
    }
    header = {"trace_version": 3, "time_unit": "us", "created_at": "2026-03-01T10:20:30Z",
              "mode": "real", "warm_up_requests": 0, "workload_spec": "preset:chatbot",
              "server": {"type": "vllm", "model": "synthetic/tiny-llama-1b"}}
    return header, cols


def write(prefix: Path, header: dict | None = None, cols: dict | None = None,
          **kw) -> tuple[Path, Path]:
    h, c = columns(**kw)
    return write_tracev2(header if header is not None else h, cols if cols is not None else c,
                         prefix)


def edit_csv(path: Path, row: int | None, column: str, value: str | None) -> None:
    """Set one cell (``row`` 0-based data row), or drop a column (``value`` None)."""
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    j = rows[0].index(column)
    if value is None:
        rows = [r[:j] + r[j + 1:] for r in rows]
    else:
        rows[row + 1][j] = value
    with open(path, "w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows(rows)


def perf_dir(root: Path, n: int = 16) -> Path:
    """An inference-perf output directory of ``n`` records (one timed out), its profile
    and vLLM settings, as the bundled runs' layout."""
    d = root / "perf-run"
    (d / "results").mkdir(parents=True)
    (d / "profile.yaml").write_text(yaml.safe_dump({
        "data": {"type": "shared_prefix", "shared_prefix": {
            "num_unique_system_prompts": 4, "system_prompt_len": 48, "question_len": 300,
            "output_len": 80}},
        "load": {"type": "constant", "stages": [{"rate": 2, "duration": 8}]},
        "server": {"type": "vllm", "model_name": "synthetic/tiny-llama-1b", "ignore_eos": True}}))
    (d / "exp-config.yaml").write_text(yaml.safe_dump({
        "model": "synthetic/tiny-llama-1b", "tensor_parallelism": 1, "max_model_len": 4096,
        "max_num_batched_tokens": 2048, "max_num_seqs": 64}))
    (d / "vllm.log").write_text("INFO ... # GPU blocks: 3456, # CPU blocks: 0\n")
    rows = []
    for i in range(n):
        start = 5000.0 + 0.5 * i
        err = {"error_type": "TimeoutError", "error_msg": "timed out"} if i == 6 else None
        times = [] if err else [start + 0.03 + 0.01 * k for k in range(40)]
        rows.append({"start_time": start, "end_time": start + (301 if err else 0.5),
                     "request": "{}", "response": "", "error": err,
                     "info": {"input_tokens": 0 if err else 340 + i, "output_tokens": 37,
                              "output_token_times": times}})
    rows.reverse()  # inference-perf need not write them in order
    (d / "results" / "per_request_lifecycle_metrics.json").write_text(json.dumps(rows))
    return d
