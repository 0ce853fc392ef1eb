"""The SQLite archive of runs, programs, evaluations, LLM calls, grids and frontiers."""

from evolve.archive.store import Archive, ArchiveError

__all__ = ["Archive", "ArchiveError"]
