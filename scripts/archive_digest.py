"""Print the determinism digest of an archive: sha256 of every table minus informational columns.

Two runs with the same seed, config, data and recorded LLM replies must print the same
digest (wall-clock and code-version columns are left out, see
``evolve.archive.informational``). Used to check that refactors change no behaviour:

    evolve run --generations 10 --seed 7 --archive before.db   # on the old code
    evolve run --generations 10 --seed 7 --archive after.db    # on the new code
    python scripts/archive_digest.py before.db after.db        # exit 1 if they differ
"""

from __future__ import annotations

import sys

from evolve.archive import Archive
from evolve.archive.digest import archive_digest


def main(paths: list[str]) -> int:
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    digests = []
    for path in paths:
        with Archive(path, create=False) as archive:
            digests.append(archive_digest(archive))
        print(f"{digests[-1]}  {path}")
    return 0 if len(set(digests)) == 1 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
