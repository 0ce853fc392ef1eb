"""Text in and out: canonical JSON bytes and untrusted text made safe.

A leaf: imports nothing of ours but :mod:`evolve.errors`.
"""
