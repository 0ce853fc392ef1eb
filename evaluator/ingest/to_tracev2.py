"""One of evolve's scenarios -> the TraceV2 pair that makes ``blis replay`` see what we see.

Why each field is what it is (measured with real BLIS and an exported champion: with
these, BLIS agrees with ``evolve validate`` to 0.06 % mean E2E on short-context runs;
without them it is off by +3-13 % E2E and +9-34 % TTFT):

* every request, the failed ones included: they loaded the server until the client gave
  up, and they are the failures an overloaded run is scored on;
* input lengths as the loader resolved them (a failed request without a recorded length
  has the run's median, inputs clamped so input + output <= max_model_len), output
  lengths as simulated (the load profile's ``output_len``, not the client's counts);
* the shared-prefix groups as the loader assigns them: ``prefix_group`` names the group,
  ``prefix_length`` is the system prompt, and ``input_tokens`` is the rest of the prompt
  (BLIS prepends the group's prefix, as ``blis observe`` records it); where requests repeat
  whole prompts (:mod:`evaluator.data.prompt_cache`), one group per prompt with ``prefix_length`` =
  the prompt less one token and ``input_tokens`` = 1, so BLIS shares the prompt's full
  blocks as vLLM does (``evolve ingest`` reads such a trace back as repeated prompts);
* ``deadline_us`` = arrival + the client timeout (300 s): in replay 0 means *no* timeout,
  unlike BLIS's generated workloads;
* ``send_time_us`` = arrival (BLIS injects a request at its send time when it has one),
  and the measured TTFT and E2E as chunk times, so ``blis calibrate`` can compare too.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import numpy as np

from evaluator.data.scenarios import CLIENT_TIMEOUT_S, Scenario

BLIS_GPU_NAMES = (("H100", "H100"), ("A100", "A100-SXM"), ("L40S", "L40S"))


def blis_gpu(scenario: Scenario) -> str:
    """The key of BLIS's ``hardware_config.json`` for the scenario's GPU.

    An ingested experiment's ``hardware.json`` may name it (``blis_gpu``, as the shipped
    files do); otherwise it is guessed from the GPU's name.
    """
    hw_file = scenario.meta.get("hardware_file")
    if hw_file:
        try:
            key = json.loads(Path(hw_file).read_text(encoding="utf-8")).get("blis_gpu")
        except (OSError, ValueError, AttributeError):
            key = None
        if isinstance(key, str) and key:
            return key
    name = scenario.hardware.name
    return next((key for tag, key in BLIS_GPU_NAMES if tag in name.upper()), name)


def scenario_trace(sc: Scenario) -> tuple[dict[str, Any], dict[str, Any]]:
    """(header, columns) of the TraceV2 pair for ``sc``: every request, as simulated."""
    n = sc.n_requests
    arrival = np.rint(sc.arrival_us).astype(np.int64)
    if sc.prompt_id is not None:  # one group per repeated prompt, all of it shared
        grouped = np.ones(n, dtype=bool)
        names = np.char.add("prompt-", sc.prompt_id.astype(str))
        plen: np.ndarray | int = sc.input_tokens - 1
    else:
        plen = sc.system_prompt_len if sc.n_prefix_groups > 0 else 0
        grouped = (sc.input_tokens >= plen) if plen > 0 else np.zeros(n, dtype=bool)
        names = np.where(grouped, np.char.add("prompt-", sc.prefix_group.astype(str)), "")
    m = sc.measured
    status = list(sc.meta.get("status") or [])
    if len(status) != n:
        status = ["timeout" if f else "ok" for f in m.failed.tolist()]
    ok = np.array([s == "ok" for s in status])
    ttft = np.where(ok & np.isfinite(m.ttft_s), np.rint(np.nan_to_num(m.ttft_s) * 1e6), 0)
    e2e = np.where(ok & np.isfinite(m.e2e_s), np.rint(np.nan_to_num(m.e2e_s) * 1e6), 0)
    first = np.where(ttft > 0, arrival + ttft.astype(np.int64), 0)
    last = np.where(e2e > 0, arrival + e2e.astype(np.int64), 0)
    zeros = np.zeros(n, dtype=np.int64)
    empty = [""] * n
    columns: dict[str, Any] = {
        "request_id": np.arange(n), "client_id": empty, "tenant_id": empty,
        "slo_class": empty, "session_id": empty, "round_index": zeros,
        "prefix_group": names.tolist(), "prefix_length": np.where(grouped, plen, 0),
        "streaming": np.ones(n, dtype=bool),
        "input_tokens": sc.input_tokens - np.where(grouped, plen, 0),
        "output_tokens": sc.output_tokens, "text_tokens": zeros, "image_tokens": zeros,
        "audio_tokens": zeros, "video_tokens": zeros, "reason_ratio": np.zeros(n),
        "model": empty, "deadline_us": arrival + int(CLIENT_TIMEOUT_S * 1e6),
        "server_input_tokens": zeros, "arrival_time_us": arrival, "send_time_us": arrival,
        "first_chunk_time_us": first, "last_chunk_time_us": last, "num_chunks": zeros,
        "status": status, "error_message": empty,
        "finish_reason": ["length" if s == "ok" else "" for s in status],
    }
    sv = sc.server
    header = {"trace_version": 2, "time_unit": "microseconds", "mode": "real",
              "warm_up_requests": 0, "workload_spec": sc.workload,
              "server": {"type": "vllm", "model": str(sc.meta.get("model_id") or sc.model),
                         "tensor_parallel": sv.tp, "max_num_seqs": sv.max_num_seqs,
                         "block_size": sv.block_size, "max_model_len": sv.max_model_len}}
    return header, columns


def replay_command(sc: Scenario, prefix: str | Path, blis: str = "./blis",
                   blis_dir: str | Path = ".", latency_model: str = "evolved") -> list[str]:
    """The ``blis replay`` argv that reproduces ``sc`` (server limits, model, GPU, horizon).

    ``--horizon`` covers the last arrival plus the client timeout (BLIS's default, twice
    the last arrival, cuts overloaded runs short); ``--model-config-folder`` points at
    the config.json the scenario was simulated with (BLIS bundles few); ``blis_dir``
    holds BLIS's ``hardware_config.json`` and ``defaults.yaml`` (replay reads both).
    """
    sv = sc.server
    hardware_config = str(Path(blis_dir) / "hardware_config.json")
    defaults = str(Path(blis_dir) / "defaults.yaml")
    horizon = int(np.max(sc.arrival_us)) + int((CLIENT_TIMEOUT_S + 1.0) * 1e6)
    model_dir = sc.meta.get("model_dir") or ""
    return [blis, "replay", "--trace-header", f"{prefix}.yaml", "--trace-data", f"{prefix}.csv",
            "--model", str(sc.meta.get("model_id") or sc.model).lower(),
            "--latency-model", latency_model, "--hardware", blis_gpu(sc),
            "--hardware-config", hardware_config, "--defaults-filepath", defaults,
            "--model-config-folder", str(Path(model_dir).resolve()) if model_dir else "",
            "--tp", str(sv.tp), "--max-num-seqs", str(sv.max_num_seqs),
            "--max-num-batched-tokens", str(sv.max_batched_tokens),
            "--total-kv-blocks", str(sv.kv_blocks), "--block-size-in-tokens",
            str(sv.block_size), "--max-model-len", str(sv.max_model_len),
            "--horizon", str(horizon), "--results-path", f"{prefix}.results.json"]


def shell(argv: list[str]) -> str:
    """``argv`` as one copy-pasteable shell line."""
    return " ".join(shlex.quote(a) for a in argv)
