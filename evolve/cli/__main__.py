"""``python -m evolve.cli``: the same as the ``evolve`` command."""

from evolve.cli.main import main

raise SystemExit(main())
