"""``evolve ingest SOURCE --out DATA_DIR``: a user's measured run -> an experiment directory.

Why: evolve fits step-time models to measured runs; a BLIS user wants one for *their*
GPU, model and vLLM settings, measured with the tools they already use. SOURCE is a
TraceV2 pair (``blis observe``) or an inference-perf output directory; what the source does
not record comes from flags. The work (read and check everything, then write the
experiment atomically beside those already in DATA_DIR) is
:func:`evolve.workflows.ingest.ingest`; this module checks the flags and prints what was
written. Every command then reads it with ``--data DATA_DIR``; docs/ingest.md has worked
examples.
"""

from __future__ import annotations

import argparse

from evolve.errors import UserError
from evolve.workflows.ingest import IngestOptions, ingest

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


def run(args: argparse.Namespace) -> int:
    for flag, val in (("--name", args.name), ("--stages", args.stages),
                      ("--workload", args.workload), ("--model-id", args.model_id),
                      ("--model-short", args.model_short)):
        if val is not None and not val.strip():  # an unset shell variable, most likely
            raise UserError(f"{flag}: empty (leave it out for the default)")
    server = {"tp": args.tp, "max_num_seqs": args.max_num_seqs,
              "max_batched_tokens": args.max_num_batched_tokens, "kv_blocks": args.kv_blocks,
              "block_size": args.block_size, "max_model_len": args.max_model_len}
    done = ingest(IngestOptions(
        args.source, args.out, args.hardware, args.model, args.name, args.split,
        args.trace_data, server, args.stages, args.workload, args.model_id, args.model_short,
        args.ignore_prefix_groups, args.replace))
    spec = done.spec
    n, failed = len(spec.status), sum(s != "ok" for s in spec.status)
    sv = spec.server
    stage_txt = ", ".join(f"{s.rate:g} rps x {s.duration_s:g} s" for s in spec.stages)
    print(f"wrote {done.path}")
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
