"""Exports of a fitted program to other simulators: ``go`` writes a BLIS ``LatencyModel``.

May import ``evolve.program`` and ``evaluator.api``; the refit for BLIS's engine loop that
precedes an export is a workflow (``evolve.workflows.for_loop``).
"""
