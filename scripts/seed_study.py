"""Independent runs of one configuration: now ``evolve study`` (seeds in parallel on the
chosen executor; see docs/scaling.md). Kept so old command lines keep working.

Usage: python scripts/seed_study.py --seeds 1 2 3 4 5 [--generations 100] [--config F]
       [--out runs/study] [--executor local|ray] [--parallel P] ...
"""

from __future__ import annotations

import sys

from evolve.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["study", *sys.argv[1:]]))
