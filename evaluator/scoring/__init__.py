"""Step times -> per-request latencies -> per-run errors; sensitivity and the published baseline
models.

May import everything in ``evaluator`` but :mod:`evaluator.api`.
"""
