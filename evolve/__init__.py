"""evolve: discover step-time models for LLM-inference simulators by evolutionary search."""

__version__ = "0.1.0"
