#!/usr/bin/env python3
"""Convert one bundled experiment into a TraceV2 pair as ``blis observe`` would record it.

Why: to try ``evolve ingest`` on a trace that evolve did not write. This script uses the
standard library only (no evolve code) and writes what a BLIS observer of the same run
would have recorded: rows in completion order, ``send_time_us`` and chunk times on the
wall clock (Unix µs), ``arrival_time_us`` relative to the start, ``input_tokens``
suffix-only after a ``prefix_length``-token shared system prompt, the server's output
count for completed requests and none for the ones the client timed out, ``x_request_id``.

What the bundled files do not say is filled the way evolve's loader fills it (data README
traps 4, 5): every request decodes the profile's ``output_len`` (``ignore_eos``), requests
join the profile's system-prompt groups round robin, and a failed request whose prompt
length was not recorded gets the median prompt.

    python scripts/bundled_to_tracev2.py ../shared/data/experiments/<exp> --out /tmp/run
    evolve ingest /tmp/run.yaml --out mydata --model ../shared/data/models/<model> \\
        --hardware H100 --kv-blocks 7462 --max-num-batched-tokens 2048 --stages 5x600,10x600
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import uuid
from datetime import UTC, datetime
from pathlib import Path

COLUMNS = [
    "request_id", "client_id", "tenant_id", "slo_class", "session_id", "round_index",
    "prefix_group", "prefix_length", "streaming", "input_tokens", "output_tokens",
    "text_tokens", "image_tokens", "audio_tokens", "video_tokens", "reason_ratio",
    "model", "deadline_us", "server_input_tokens",
    "arrival_time_us", "send_time_us", "first_chunk_time_us", "last_chunk_time_us",
    "num_chunks", "status", "error_message", "finish_reason", "x_request_id",
]
TIMEOUT_US = 300_000_000


def convert(exp: Path, out: Path, head_s: float | None = None) -> tuple[Path, Path]:
    doc = json.loads((exp / "requests.json").read_text())
    truth = {r["index"]: r for r in json.loads((exp / "ground_truth.json").read_text())}
    prof = json.loads((exp / "profile.yaml").read_text())  # one line of JSON
    sp = prof["data"]["shared_prefix"]
    sys_len, out_len = int(sp["system_prompt_len"]), int(sp["output_len"])
    groups = int(sp.get("num_unique_system_prompts") or 1)
    reqs = sorted(doc["requests"], key=lambda r: r["arrival_time_us"])
    t0 = reqs[0]["arrival_time_us"]
    if head_s is not None:
        reqs = [r for r in reqs if r["arrival_time_us"] - t0 < head_s * 1e6]
    ok_inputs = [r["input_tokens"] for r in reqs if not r["has_error"] and r["input_tokens"] > 0]
    median = int(statistics.median(ok_inputs)) if ok_inputs else sys_len
    stamp = datetime.strptime(exp.name[:15], "%Y%m%d-%H%M%S").replace(tzinfo=UTC)
    wall0 = int(stamp.timestamp() * 1e6)
    rows = []
    for i, r in enumerate(reqs):
        arrival = int(r["arrival_time_us"] - t0)
        send = wall0 + arrival
        total = r["input_tokens"] if r["input_tokens"] > 0 else median
        gt = truth[r["index"]]
        ok = not r["has_error"]
        first = send + round(gt["ttft_s"] * 1e6) if ok else 0
        last = send + round(gt["e2e_s"] * 1e6) if ok else 0
        rows.append({
            "request_id": i, "client_id": "inference-perf", "tenant_id": "", "slo_class": "",
            "session_id": "", "round_index": 0, "prefix_group": f"system-{i % groups}",
            "prefix_length": sys_len, "streaming": "true", "input_tokens": total - sys_len,
            "output_tokens": out_len if ok else 0, "text_tokens": 0, "image_tokens": 0,
            "audio_tokens": 0, "video_tokens": 0, "reason_ratio": 0, "model": "",
            "deadline_us": arrival + TIMEOUT_US, "server_input_tokens": total if ok else 0,
            "arrival_time_us": arrival, "send_time_us": send, "first_chunk_time_us": first,
            "last_chunk_time_us": last, "num_chunks": 2 * out_len if ok else 0,
            "status": "ok" if ok else "timeout",
            "error_message": "" if ok else "streaming timeout: context deadline exceeded",
            "finish_reason": "length" if ok else "",
            "x_request_id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{exp.name}/{i}")),
            "_done": last if ok else send + TIMEOUT_US})
    rows.sort(key=lambda row: row["_done"])  # a recorder appends rows as requests finish
    header = "\n".join([
        "trace_version: 3", "time_unit: us",
        f"created_at: \"{stamp.strftime('%Y-%m-%dT%H:%M:%SZ')}\"", "mode: real",
        "warm_up_requests: 0", f"workload_spec: preset:{doc.get('profile', 'trace')}",
        "server:", "    type: vllm", f"    model: {doc['model_id']}",
        "network:", "    measured_rtt_ms: 0.2", ""])
    hpath, dpath = out.with_suffix(".yaml"), out.with_suffix(".csv")
    hpath.parent.mkdir(parents=True, exist_ok=True)
    hpath.write_text(header)
    with open(dpath, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(COLUMNS)
        for row in rows:
            w.writerow([row[c] for c in COLUMNS])
    return hpath, dpath


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("experiment", type=Path, help="a bundled experiment directory")
    ap.add_argument("--out", type=Path, required=True, help="write OUT.yaml and OUT.csv")
    ap.add_argument("--head", type=float, metavar="S", help="only the first S seconds")
    args = ap.parse_args()
    for p in convert(args.experiment, args.out, args.head):
        print(f"wrote {p}")


if __name__ == "__main__":
    main()
