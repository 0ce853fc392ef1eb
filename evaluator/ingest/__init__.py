"""A user's measured run in three formats (inference-perf, BLIS TraceV2, our experiment directory),
both ways.

May import :mod:`evaluator.data`; nothing above it.
"""
