"""One module per sub-command: ``add_arguments(parser)`` and ``run(args)``; parse, call, render.

Commands never import each other (an import-linter contract); the work they share lives in
``evolve.workflows`` and the formatting in ``evolve.cli.output``.
"""
