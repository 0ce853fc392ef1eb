"""The ``evolve`` command line: argument parsing, output formatting and one module per sub-command.

The top layer: may import anything in ``evolve``.
"""
