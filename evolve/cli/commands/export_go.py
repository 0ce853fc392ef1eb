"""``evolve export-go ID``: write an archived program as a BLIS ``LatencyModel`` Go file.

ID is a program id or unique prefix in the archive, a program file or a seed name. The
work (read the program and its constants, bring them to ``--loop``'s engine loop, write the
Go source) is :func:`evolve.workflows.export_go.export`, whose docstring says where each
part comes from; this module checks the flags and writes the file (or stdout) and the
constants.
"""

from __future__ import annotations

import argparse
import json
import sys

from evolve.errors import UserError
from evolve.workflows.export_go import ExportOptions, export
from evolve.workflows.targets import check_id_spec, output_file, program_file, write_file

HELP = "translate a program to a BLIS Go model"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", metavar="ID",
                        help="program id (or unique prefix) in the archive, a program file "
                        "or a seed name (e.g. layered)")
    parser.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    parser.add_argument("--archive", default="archive.db", metavar="F", help="archive file")
    parser.add_argument("--run", type=int, metavar="N",
                        help="archive run to take constants from (default: latest with ID)")
    parser.add_argument("--model", metavar="NAME",
                        help="export only this constant group (a model, or a scenario for "
                             "per_scenario scope); matched on group names and model ids")
    parser.add_argument("--constants", metavar="JSON",
                        help="program-file mode: {group: {name: value}} or {name: value} "
                             "(global), as JSON text or a .json file")
    parser.add_argument("--scope", choices=("global", "per_model", "pooled", "per_scenario"),
                        help="program-file mode: the constants' scope (default: global for "
                             "one group named 'global', pooled for model groups plus "
                             "'global', else per_model)")
    parser.add_argument("--alias", action="append", default=[], metavar="GROUP=NAME",
                        help="another model name (BLIS hw.Model) for a constant group; "
                             "repeatable")
    parser.add_argument("--data", metavar="DIR",
                        help="data directory for model names, the refit and the accuracy "
                             "table (default: $EVOLVE_DATA or ../shared/data; without data "
                             "only --no-refit exports)")
    parser.add_argument("--loop", choices=("blis", "vllm"), default="blis",
                        help="engine loop the Go model will run in: blis (BLIS at the pinned "
                             "commit, the default; see --bridge) or vllm (a BLIS with vLLM's "
                             "async scheduling); constants fitted in the other loop are "
                             "refitted")
    parser.add_argument("--bridge", choices=("async", "refit"),
                        help="for --loop blis and constants fitted in vLLM's loop: async (the "
                             "default; the model itself holds each request back as vLLM's "
                             "async scheduling does and the constants stay as fitted) or "
                             "refit (constants refitted closed loop in BLIS's loop)")
    parser.add_argument("--no-refit", action="store_true",
                        help="export the constants as they are, with no refit and no "
                             "accuracy table (offline; for constants fitted in --loop's loop)")
    parser.add_argument("--fitted-loop", choices=("vllm", "blis"),
                        help="program-file mode: the loop --constants were fitted in "
                             "(default: vllm, `evolve fit`'s default)")
    parser.add_argument("--save-constants", metavar="FILE",
                        help="also write the exported constants as JSON {group: {name: "
                             "value}} (what `evolve validate FILE --constants` reads)")
    parser.add_argument("--refit-evals", type=int, metavar="N",
                        help="closed-loop simulations per constant group in the refit "
                             "(default: the run's fit.polish_evals, 150)")


def run(args: argparse.Namespace) -> int:
    if args.output:  # an unwritable path is found now, not after the work
        output_file(args.output, "-o")
    if args.save_constants:
        output_file(args.save_constants, "--save-constants")
    path = program_file(args.id)  # a file, or a seed name (as fit, validate, generalize)
    if path is not None:
        args.id = str(path)
    else:
        check_id_spec(args.id, args.archive)
    if args.refit_evals is not None and args.refit_evals < 0:
        raise UserError(f"--refit-evals {args.refit_evals}: must be an integer >= 0")
    opts = ExportOptions(args.id, path is not None, args.archive, args.run, args.model,
                         args.constants, args.scope, args.alias, args.data, args.loop,
                         args.no_refit, args.fitted_loop, args.refit_evals, args.bridge)
    done = export(opts, lambda msg: print(msg, file=sys.stderr))
    consts = done.constants
    if args.save_constants:
        write_file(args.save_constants, json.dumps(consts, indent=1, sort_keys=True) + "\n",
                   "--save-constants")
    if args.output:
        write_file(args.output, done.text, "-o")
        print(f"wrote {args.output} ({done.program.id[:12]}, {done.scope}: "
              f"{', '.join(sorted(consts))})", file=sys.stderr)
    else:
        sys.stdout.write(done.text)
    if done.scope == "pooled" and "global" in consts:
        print("note: any other model gets the pooled global set, which a frontier pick is "
              "not chosen for; for a model nobody measured export the `layered` rule "
              "(docs/selection.md, 'A model nobody measured')", file=sys.stderr)
    return 0
