"""Measured runs as typed scenarios: run files, experiment directories, the KV pool and prompt
cache they imply.

Imports only the standard library, numpy and its own modules (the bottom layer of ``evaluator``).
"""
