"""The run configuration: its dataclass tree, TOML loading and the documented TOML it prints.

May import :mod:`evolve.errors` only.
"""
