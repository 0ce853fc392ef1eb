"""A checked program as a BLIS ``LatencyModel`` in Go: expressions, body, kernels, templates, test
harness.
"""
