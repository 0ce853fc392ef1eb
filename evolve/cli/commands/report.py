"""``evolve report [RUN] --out DIR``: write a static HTML report of a run (offline, no CDN).

``--watch`` keeps regenerating it as the run commits generations (open ``DIR/index.html``
and reload), and returns when the run is no longer running. ``--validate`` simulates the
pick closed loop on every whole run (``evolve validate``'s work,
``evolve.workflows.pick_validation``) and embeds the table and plots in the validation
page. ``DIR`` must be new, empty or
an earlier report (``evolve/report/outdir.py``): a folder of other files is refused.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "write a static HTML report of a run (frontier, programs, lineage, LLM log)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", nargs="?", type=int, metavar="RUN",
                        help="run id (default: the latest)")
    parser.add_argument("--archive", default="archive.db", metavar="F", help="archive file")
    parser.add_argument("--out", default="runs/report", metavar="DIR",
                        help="output directory (default runs/report)")
    parser.add_argument("--watch", action="store_true",
                        help="regenerate after every generation until the run stops")
    parser.add_argument("--interval", type=float, default=2.0, metavar="S",
                        help="--watch: seconds between checks of the archive")
    parser.add_argument("--cassette", metavar="F",
                        help="LLM cassette to show prompts from (default: the run's own)")
    parser.add_argument("--validate", action="store_true",
                        help="simulate the pick closed loop on every whole run (what "
                             "`evolve validate` does, a minute or so) and embed its table "
                             "and plots in the validation page")
    parser.add_argument("--data", help="--validate: data directory (default: $EVOLVE_DATA "
                        "or ../shared/data)")
    parser.add_argument("--validate-dir", metavar="DIR",
                        help="embed the PNG plots `evolve validate --out DIR` wrote")


def run(args: argparse.Namespace) -> int:
    import math

    from evolve.errors import UserError
    from evolve.report import Options, Written, outdir, watch, write_report
    from evolve.workflows.targets import output_dir

    if not (math.isfinite(args.interval) and args.interval > 0):
        raise UserError(f"--interval {args.interval}: must be a finite number > 0")
    from evolve.archive import Archive

    with Archive(args.archive, create=False) as ar:  # a bad archive or run: before --out
        ar.run(args.run if args.run is not None else ar.latest_run_id())
    if args.validate and (args.watch or args.validate_dir):
        raise UserError("--validate: simulates once and embeds its own plots; not with "
                        + ("--watch" if args.watch else "--validate-dir"))
    if args.data is not None and not args.validate:
        raise UserError("--data: applies to --validate only")
    if args.validate_dir and not Path(args.validate_dir).is_dir():
        raise UserError(f"--validate-dir {args.validate_dir}: not a directory (what `evolve "
                        "validate --out DIR` wrote)")
    if args.cassette and not Path(args.cassette).is_file():
        raise UserError(f"--cassette {args.cassette}: file not found")
    opts = Options(cassette=args.cassette, validate_dir=args.validate_dir)
    outdir.check(Path(args.out))  # someone's folder is refused before anything is written
    output_dir(args.out, "--out")
    index = Path(args.out) / "index.html"
    if args.validate:
        return _validated(args, opts, index)

    def say(w: Written) -> None:
        gen = "no generation committed yet" if w.generation is None else \
            f"generation {w.generation}"
        print(f"wrote {index} ({gen}; {w.changed} of {w.pages} pages changed)",
              file=sys.stderr, flush=True)

    if args.watch:
        watch(args.archive, args.out, args.run, opts, args.interval, lambda: False, say)
        return 0
    say(write_report(args.archive, args.out, args.run, opts))
    return 0


def _validated(args: argparse.Namespace, opts: object, index: Path) -> int:
    """``--validate``: the pick's whole-run validation into a scratch folder, then the
    report with its table and plots embedded (the page is one file: no folder is left)."""
    import dataclasses
    import tempfile

    from evolve.report import Options, write_report
    from evolve.workflows.pick_validation import validate_pick

    assert isinstance(opts, Options)
    print("validating the pick closed loop on every whole run...", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="evolve-validate-") as tmp:
        whole = validate_pick(args.archive, args.run, args.data, Path(tmp),
                              lambda n: print(f"  simulated {n}", file=sys.stderr))
        w = write_report(args.archive, args.out, args.run,
                         dataclasses.replace(opts, validate_dir=tmp, validation=whole))
    print(f"wrote {index} (generation {w.generation}; {w.changed} of {w.pages} pages "
          f"changed; the pick {whole.program_id[:12]} validated on {len(whole.rows)} runs)",
          file=sys.stderr, flush=True)
    return 0
