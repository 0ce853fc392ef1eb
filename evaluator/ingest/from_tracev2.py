"""A BLIS TraceV2 pair (``blis observe``, or any tool writing the format) -> an experiment.

Why these rules: the experiment must simulate the same requests ``blis replay`` would
replay from the same trace, so lengths and arrivals follow BLIS's reader
(``sim/workload/replay.go``): a request enters at ``send_time_us`` when it has one (the
moment the client dispatched it) and at ``arrival_time_us`` otherwise; its prompt is the
group's shared prefix (``prefix_length``) plus ``input_tokens`` (which ``blis observe``
records suffix-only), or the server's ``server_input_tokens`` when there is no group.
Measured latencies are taken as ``blis calibrate`` takes them, from the send time: TTFT =
first chunk - send, E2E = last chunk - send. Requests that failed on the client keep
their status (they count as failures, which is what overloaded runs are about) and are
simulated too, since the server saw them.

evolve's simulator shares one system-prompt length among all prefix groups and puts
every request in a group or none; a trace whose groups have different prefix lengths is
simulated with the shortest (noted), and a trace mixing grouped and ungrouped requests is
refused unless ``ignore_prefix`` (then prefixes count as plain prompt tokens).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from evaluator.data.experiment import ExperimentSpec
from evaluator.data.scenarios import DataError, Stage
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
from evaluator.ingest.tracev2 import TraceV2, read_tracev2

_SERVER_FROM_HEADER = (("tp", "tensor_parallel"), ("max_num_seqs", "max_num_seqs"),
                       ("block_size", "block_size"), ("max_model_len", "max_model_len"))


PROMPT_GROUPS = -1  # _prefix's shared length when every group is one whole prompt


def _prefix(t: TraceV2, ignore: bool, order: np.ndarray, notes: list[str]
            ) -> tuple[np.ndarray, np.ndarray, int, int]:
    """(group index per request, prefix tokens per request, n_groups, shared length).

    Groups are numbered in order of first arrival (``order``), not of file rows.
    """
    c = t.columns
    names, plen = c["prefix_group"], c["prefix_length"]
    length: dict[str, tuple[int, int]] = {}
    for i, (g, p) in enumerate(zip(names.tolist(), plen.tolist(), strict=True)):
        if g == "":
            continue
        if g in length and length[g][0] != p:
            raise DataError(f"{t.where(i)}, field 'prefix_length': {p} differs from {length[g][0]}"
                            f" in row {length[g][1] + 1} of the same prefix_group {g!r}")
        length.setdefault(g, (p, i))
    live = {g for g, (p, _) in length.items() if p > 0}  # BLIS prepends only these
    grouped = np.array([g in live for g in names.tolist()], dtype=bool)
    prefix_tokens = np.where(grouped, plen, 0)
    n = len(names)
    if ignore or not grouped.any():
        if ignore and grouped.any():
            notes.append("prefix groups ignored (--ignore-prefix-groups): shared prefixes "
                         "count as plain prompt tokens")
        return np.zeros(n, dtype=np.int64), prefix_tokens, 0, 0
    if not grouped.all():
        i = int(np.flatnonzero(~grouped)[0])
        raise DataError(f"{t.where(i)}, field 'prefix_group': this request has no prefix "
                        "group while others do; evolve's simulator needs every request in a "
                        "group or none (pass --ignore-prefix-groups to treat prefixes as "
                        "plain prompt tokens)")
    index: dict[str, int] = {}
    for i in order.tolist():
        index.setdefault(names[i], len(index))
    grp = np.array([index[g] for g in names.tolist()], dtype=np.int64)
    lens = sorted({length[g][0] for g in live})
    if len(lens) > 1 and bool(np.all(c["input_tokens"] == 1)):
        notes.append(f"{len(index)} prefix groups of one whole prompt each (prefix + 1 token, "
                     "as `evolve export-trace` writes repeated prompts): each is cached whole")
        return grp, prefix_tokens, len(index), PROMPT_GROUPS
    if len(lens) > 1:
        notes.append(f"prefix groups have lengths {lens[0]}..{lens[-1]}; evolve's simulator "
                     f"shares one length, so the shortest ({lens[0]}) is cached")
    return grp, prefix_tokens, len(index), lens[0]


def _model_id(t: TraceV2, explicit: str | None, config: dict[str, Any], cfg_path: Path) -> str:
    if explicit:
        return explicit
    models = sorted({m for m in t.columns["model"].tolist() if m})
    if len(models) > 1:
        raise DataError(f"{t.data_path}: field 'model': the trace names several models "
                        f"({', '.join(models[:3])}); ingest one model per experiment")
    server = t.header.get("server") or {}
    named = server.get("model")
    if isinstance(named, str) and named and models and models[0] != named:
        raise DataError(f"{t.data_path}: field 'model': the requests name {models[0]!r}, the "
                        f"header's server.model {named!r}; say which with --model-id")
    for cand in (named, models[0] if models else None,
                 config.get("_name_or_path")):
        if isinstance(cand, str) and cand:
            return cand
    return cfg_path.parent.name


def from_tracev2(header_path: str | Path, data_path: str | Path, *, model: str | Path,
                 hardware: str | Path, flags: ServerFlags, name: str | None = None,
                 split: str = "train", workload: str | None = None,
                 model_id: str | None = None, model_short: str | None = None,
                 stages: tuple[Stage, ...] | None = None,
                 ignore_prefix: bool = False) -> ExperimentSpec:
    """Read, validate and convert one TraceV2 pair; ``DataError`` names file, row, field."""
    t = read_tracev2(header_path, data_path)
    config, cfg_path = read_model_config(model)
    hw, hw_path = read_hardware(hardware)
    c, notes = t.columns, []
    server_hdr = t.header.get("server") or {}
    known = {key: (int(server_hdr[hk]), f"{t.header_path}: field 'server.{hk}'")
             for key, hk in _SERVER_FROM_HEADER if server_hdr.get(hk) is not None}
    server, more = resolve_server(flags, known, config)
    notes += more
    if note := pool_note(config, cfg_path, hw, server.tp, server.block_size, server.kv_blocks,
                         server_hdr.get("gpu_memory_utilization")):
        notes.append(note)

    arr, send = c["arrival_time_us"], c["send_time_us"]
    has_send = send > 0
    offset = int(np.median(send[has_send] - arr[has_send])) if has_send.any() else 0
    inject = np.where(has_send, send, arr + offset)
    inject = (inject - inject.min()).astype(np.float64)  # exact: µs integers, then relative
    base = np.where(has_send, send, arr)  # the clock of the chunk times (calibrate's)
    grp, prefix_tokens, n_groups, sys_len = _prefix(
        t, ignore_prefix, np.argsort(inject, kind="stable"), notes)
    mode = "prompt" if sys_len == PROMPT_GROUPS else "system"
    sys_len = 0 if mode == "prompt" else sys_len
    named = np.array([g != "" for g in c["prefix_group"].tolist()], dtype=bool)
    sit = c["server_input_tokens"]
    own = np.where((sit > 0) & ~named, sit, c["input_tokens"])
    total = own + prefix_tokens

    status = [str(s) for s in c["status"].tolist()]
    ok = np.array([s == "ok" for s in status])
    first, last = c["first_chunk_time_us"], c["last_chunk_time_us"]
    ttft = np.where(ok & (first > 0), (first - base) / 1e6, np.nan)
    e2e = np.where(ok, (last - base) / 1e6, np.nan)
    if (~ok).any():
        kinds = sorted({s for s in status if s != "ok"})
        notes.append(f"{int((~ok).sum())} request(s) failed on the client ({', '.join(kinds)});"
                     " they are simulated and count as failures")
    dl = c["deadline_us"]
    notes += timeout_notes(((dl - arr) / 1e6)[dl > 0])
    if t.header.get("warm_up_requests"):
        notes.append(f"the recorder left out {t.header['warm_up_requests']} warm-up "
                     "request(s); their load is missing from the first seconds")
    if (c["round_index"] > 0).any():
        notes.append("session rounds are replayed at their recorded times (open loop), "
                     "as `blis replay --session-mode fixed` does")

    mid = _model_id(t, model_id, config, cfg_path)
    spec_wl = str(t.header.get("workload_spec") or "")
    wl = workload or safe_name(Path(spec_wl.removeprefix("preset:")).stem or "trace")
    short = model_short or safe_name(mid.split("/")[-1])
    if name is None:
        stamp = "".join(ch for ch in str(t.header.get("created_at") or "")[:19] if ch.isdigit())
        stamp = f"{stamp[:8]}-{stamp[8:14]}-" if len(stamp) >= 14 else ""
        name = f"{stamp}{short}-tp{server.tp}-{wl}"
    source = {"kind": "tracev2", "header": str(Path(header_path).resolve()),
              "data": str(Path(data_path).resolve()), "mode": t.header.get("mode"),
              "model_config": str(cfg_path.resolve()), "hardware": str(hw_path.resolve())}
    return assemble(name=safe_name(name), model_id=mid, model_short=short, workload=wl,
                    split=split, server=server, model_config=config, hardware=hw,
                    arrival_us=inject, input_tokens=total, output_tokens=c["output_tokens"],
                    prefix_group=grp, n_prefix_groups=n_groups, system_prompt_len=sys_len,
                    status=status, e2e_s=e2e, ttft_s=ttft, stages=stages, summary=None,
                    source=source, notes=notes, prefix_mode=mode, row_where=t.where)
