"""``evolve ingest SOURCE --out DATA_DIR``: a user's measured run -> an experiment directory.

Why: evolve fits step-time models to measured runs; a BLIS user wants one for *their*
GPU, model and vLLM settings, measured with the tools they already use. SOURCE is a
TraceV2 pair (``blis observe``; give the ``.yaml`` header, the ``.csv`` beside it is
found) or an inference-perf output directory. What the source does not record (the
server limits, the model's config.json, the GPU) comes from flags. Everything is
validated before anything is written (one line naming file, row and field; exit 2), and
the experiment appears atomically beside those already in DATA_DIR, which every command
then reads with ``--data DATA_DIR``. docs/ingest.md has worked examples.
"""

from __future__ import annotations

import argparse
import signal
from pathlib import Path

HELP = "turn a measured run (BLIS TraceV2 or inference-perf) into an experiment directory"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="SOURCE",
                        help="TraceV2 header .yaml (or its .csv), or an inference-perf "
                             "output directory")
    parser.add_argument("--out", required=True, metavar="DATA_DIR",
                        help="data directory to add the experiment to (created if absent)")
    parser.add_argument("--name", help="experiment name (default: from the source)")
    parser.add_argument("--split", choices=("train", "validate", "test"),
                        help="how the search uses the run (default: train, or the source's)")
    parser.add_argument("--trace-data", metavar="CSV",
                        help="the TraceV2 data file (default: SOURCE with .csv)")
    parser.add_argument("--model", metavar="CONFIG_JSON_OR_DIR",
                        help="the model's Hugging Face config.json (or its directory)")
    parser.add_argument("--hardware", metavar="FILE_OR_NAME", required=True,
                        help="GPU file in the bundled datasheet format, or a shipped one: "
                             "H100, A100 (evaluator/hardware/)")
    for flag, what in (("--tp", "tensor-parallel degree"),
                       ("--max-num-seqs", "vLLM max_num_seqs"),
                       ("--max-num-batched-tokens", "vLLM max_num_batched_tokens"),
                       ("--kv-blocks", "KV-cache blocks on the GPU (vLLM logs '# GPU blocks')"),
                       ("--block-size", "KV-cache block size in tokens"),
                       ("--max-model-len", "vLLM max_model_len (default: the source's, "
                                           "else the model's max_position_embeddings)")):
        parser.add_argument(flag, type=int, metavar="N", help=what)
    parser.add_argument("--stages", metavar="RATExSECONDS,...",
                        help="load stages, e.g. 8x600,20x600 (default: the source's, else "
                             "one stage over the whole run)")
    parser.add_argument("--workload", help="workload label (default: from the source)")
    parser.add_argument("--model-id", help="model id, e.g. meta-llama/Llama-2-7b-hf "
                                           "(default: from the source)")
    parser.add_argument("--model-short", help="short model name: the key of per-model "
                                              "constants (default: the id's last part)")
    parser.add_argument("--ignore-prefix-groups", action="store_true",
                        help="TraceV2: treat shared prefixes as plain prompt tokens")
    parser.add_argument("--replace", action="store_true",
                        help="replace an experiment of the same name")


def _trace_paths(args: argparse.Namespace) -> tuple[Path, Path]:
    src = Path(args.source)
    if src.suffix == ".csv":
        return Path(args.trace_data or src).with_suffix(".yaml"), Path(args.trace_data or src)
    return src, Path(args.trace_data) if args.trace_data else src.with_suffix(".csv")


def _stop(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through write_experiment's cleanup


def run(args: argparse.Namespace) -> int:
    from evaluator.api import (
        ServerFlags,
        from_inference_perf,
        from_tracev2,
        parse_stages,
        write_experiment,
    )
    from evolve.errors import UserError
    from evolve.workflows.targets import output_dir

    flags = ServerFlags(tp=args.tp, max_num_seqs=args.max_num_seqs,
                        max_batched_tokens=args.max_num_batched_tokens,
                        kv_blocks=args.kv_blocks, block_size=args.block_size,
                        max_model_len=args.max_model_len)
    for flag, val in (("--name", args.name), ("--stages", args.stages),
                      ("--workload", args.workload), ("--model-id", args.model_id),
                      ("--model-short", args.model_short)):
        if val is not None and not val.strip():  # an unset shell variable, most likely
            raise UserError(f"{flag}: empty (leave it out for the default)")
    stages = parse_stages(args.stages) if args.stages else None
    common = {"hardware": args.hardware, "flags": flags, "name": args.name,
              "workload": args.workload, "model_id": args.model_id,
              "model_short": args.model_short, "stages": stages}
    src = Path(args.source)
    if src.is_dir():
        if args.trace_data or args.ignore_prefix_groups:
            raise UserError("--trace-data and --ignore-prefix-groups apply to TraceV2 sources")
        spec = from_inference_perf(src, model=args.model, split=args.split,
                                   data_root=Path(args.out), **common)
    elif src.suffix in (".yaml", ".yml", ".csv"):
        if args.model is None:
            raise UserError("--model: required for a TraceV2 source (the model's config.json)")
        header, data = _trace_paths(args)
        spec = from_tracev2(header, data, model=args.model, split=args.split or "train",
                            ignore_prefix=args.ignore_prefix_groups, **common)
    elif not src.exists():
        raise UserError(f"{src}: no such file or directory")
    else:
        raise UserError(f"{src}: not a TraceV2 .yaml/.csv nor an inference-perf directory")
    out = Path(args.out)
    made = [p for p in (out, *out.parents) if not p.exists()]  # what this ingest creates
    old = signal.signal(signal.SIGTERM, _stop)  # `kill`: clean up as Ctrl-C does
    try:
        output_dir(args.out, "--out")  # after the source is read: a refused one writes nothing
        path = write_experiment(args.out, spec, replace_existing=args.replace)
    except BaseException:
        for p in made:  # innermost first; only what is still empty
            if p.is_dir() and not any(p.iterdir()):
                p.rmdir()
        raise
    finally:
        if old is not None:  # None: installed from C, and signal() cannot put that back
            signal.signal(signal.SIGTERM, old)
    n, failed = len(spec.status), sum(s != "ok" for s in spec.status)
    sv = spec.server
    stage_txt = ", ".join(f"{s.rate:g} rps x {s.duration_s:g} s" for s in spec.stages)
    print(f"wrote {path}")
    print(f"  {n} requests ({failed} failed), {spec.model_id} as '{spec.model_short}', "
          f"TP {sv.tp}, GPU {spec.hardware.get('name', '?')}, split {spec.split}")
    print(f"  max_num_seqs {sv.max_num_seqs}, max_num_batched_tokens {sv.max_batched_tokens}, "
          f"kv blocks {sv.kv_blocks} x {sv.block_size}, max_model_len {sv.max_model_len}")
    print(f"  stages: {stage_txt}; prefix groups: {spec.n_prefix_groups} x "
          f"{spec.system_prompt_len} tokens")
    for note in spec.notes:
        print(f"  note: {note}")
    print(f"next: evolve data --data {args.out}; evolve run --data {args.out}")
    return 0
