"""``evolve ingest``'s work: a user's measured run -> an experiment directory.

SOURCE is a TraceV2 pair (``blis observe``; the ``.yaml`` header, the ``.csv`` beside it
is found) or an inference-perf output directory. What the source does not record (the
server limits, the model's config.json, the GPU) comes from the options. Everything is
validated before anything is written, and the experiment appears atomically beside those
already in the data directory (a refused or stopped ingest leaves no directory it
created). :func:`ingest` returns an :class:`Ingested`; the command renders it.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evolve.errors import UserError
from evolve.workflows.targets import output_dir


@dataclass
class IngestOptions:
    """What ``evolve ingest`` was asked for; None: from the source (or its default)."""

    source: str
    out: str  # the data directory to add the experiment to
    hardware: str
    model: str | None = None  # the model's config.json (or its directory)
    name: str | None = None
    split: str | None = None
    trace_data: str | None = None
    server: dict[str, int | None] | None = None  # evaluator.api.ServerFlags' fields
    stages: str | None = None  # RATExSECONDS,...
    workload: str | None = None
    model_id: str | None = None
    model_short: str | None = None
    ignore_prefix_groups: bool = False
    replace: bool = False


@dataclass
class Ingested:
    """The experiment written (``spec``: an ``evaluator.api`` experiment spec)."""

    path: Path
    spec: Any


def ingest(opts: IngestOptions) -> Ingested:
    """Read and check the source, then write the experiment under ``opts.out``."""
    from evaluator.api import ServerFlags, write_experiment

    spec = _read(opts, ServerFlags(**(opts.server or {})))
    out = Path(opts.out)
    made = [p for p in (out, *out.parents) if not p.exists()]  # what this ingest creates
    old = signal.signal(signal.SIGTERM, _stop)  # `kill`: clean up as Ctrl-C does
    try:
        output_dir(opts.out, "--out")  # after the source is read: a refused one writes nothing
        path = write_experiment(opts.out, spec, replace_existing=opts.replace)
    except BaseException:
        for p in made:  # innermost first; only what is still empty
            if p.is_dir() and not any(p.iterdir()):
                p.rmdir()
        raise
    finally:
        if old is not None:  # None: installed from C, and signal() cannot put that back
            signal.signal(signal.SIGTERM, old)
    return Ingested(path, spec)


def _read(opts: IngestOptions, flags: Any) -> Any:
    """The experiment spec from a TraceV2 pair or an inference-perf directory."""
    from evaluator.api import from_inference_perf, from_tracev2, parse_stages

    stages = parse_stages(opts.stages) if opts.stages else None
    common = {"hardware": opts.hardware, "flags": flags, "name": opts.name,
              "workload": opts.workload, "model_id": opts.model_id,
              "model_short": opts.model_short, "stages": stages}
    src = Path(opts.source)
    if src.is_dir():
        if opts.trace_data or opts.ignore_prefix_groups:
            raise UserError("--trace-data and --ignore-prefix-groups apply to TraceV2 sources")
        return from_inference_perf(src, model=opts.model, split=opts.split,
                                   data_root=Path(opts.out), **common)
    if src.suffix in (".yaml", ".yml", ".csv"):
        if opts.model is None:
            raise UserError("--model: required for a TraceV2 source (the model's config.json)")
        header, data = trace_paths(opts.source, opts.trace_data)
        return from_tracev2(header, data, model=opts.model, split=opts.split or "train",
                            ignore_prefix=opts.ignore_prefix_groups, **common)
    if not src.exists():
        raise UserError(f"{src}: no such file or directory")
    raise UserError(f"{src}: not a TraceV2 .yaml/.csv nor an inference-perf directory")


def trace_paths(source: str, trace_data: str | None) -> tuple[Path, Path]:
    """A TraceV2 source's header and data files (either may be named; the other is beside
    it with the other suffix)."""
    src = Path(source)
    if src.suffix == ".csv":
        return Path(trace_data or src).with_suffix(".yaml"), Path(trace_data or src)
    return src, Path(trace_data) if trace_data else src.with_suffix(".csv")


def _stop(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through write_experiment's cleanup
