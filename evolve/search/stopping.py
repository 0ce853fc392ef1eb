"""SIGINT and SIGTERM during a run: stop promptly, but never in the middle of a write.

Why not the default behaviour: SIGTERM killed the run with the shell's "Terminated" and
no word from evolve, and a KeyboardInterrupt can land anywhere, including inside the
transaction that journals a finished fit. Here, while :func:`stop_signals` is active, a
signal raises :class:`StopRequested` in the main thread at the next Python instruction,
unless the main thread is inside :func:`critical` (an archive write); then it is raised
when the write has finished. Everything a run finished is journaled as it finishes
(:mod:`evolve.search.journal`), so stopping loses only the jobs still computing; the
command prints how to resume and exits 128 + the signal number (130, 143).

Worker processes leave the driver's process group (their own session) and ignore SIGINT:
the driver decides when to stop, and terminates them. Why: a terminal's Ctrl-C, or
coreutils ``timeout`` (the signal to the process, then to its whole group), used to reach
the workers too; an idle worker waits for its next job inside the pool's queue lock, and
one killed there left the lock taken, so stopping the pool hung forever. For the same
reason a repeat of the stop signal within :data:`REPEAT_IGNORED_S` of the first is
ignored: ``timeout`` sends two at once, and the second must not cut short the cleanup that
marks the run ``interrupted`` and releases its lock. A later one (a user who does not want
to wait for the cleanup) stops at once; the lock it leaves is stale and taken over.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequested(BaseException):
    """A stop signal arrived; a ``BaseException`` so that no ``except Exception`` in the
    loop mistakes it for a failed job."""

    def __init__(self, signum: int):
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(f"stopped by {self.name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


_critical_depth = 0
_pending: int | None = None
REPEAT_IGNORED_S = 2.0
_stopped_at: float | None = None  # when a stop was raised (monotonic), None before
_requested: int | None = None  # the signal of that stop, for check()


def _stop(signum: int) -> StopRequested:
    global _stopped_at, _requested
    if _stopped_at is None:
        _stopped_at, _requested = time.monotonic(), signum
    return StopRequested(signum)


def check() -> None:
    """Raise the stop again if one was requested. Why: a handler's exception raised where
    Python ignores exceptions (an at-fork hook such as logging's lock release, a
    ``__del__``) is printed and dropped, and the run went on to "finish" (seen in CI);
    the loop calls this at every generation boundary."""
    if _requested is not None and threading.current_thread() is threading.main_thread():
        raise StopRequested(_requested)


def chained_stop(exc: BaseException) -> BaseException | None:
    """The stop behind ``exc``, or None: a :class:`StopRequested` or ``KeyboardInterrupt``
    anywhere in its cause/context chain, or a stop requested while it was raised. Why:
    numba's dispatcher reports an exception raised inside compiled code (our handler's,
    during a closed-loop fit) as ``SystemError: ... returned a result with an exception
    set``, the stop only chained; the run was then marked failed with "internal error"
    instead of interrupted with its resume line (found in review)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, StopRequested | KeyboardInterrupt):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    if _requested is not None and threading.current_thread() is threading.main_thread():
        return StopRequested(_requested)
    return None


def _handler(signum: int, _frame: FrameType | None) -> None:
    global _pending
    if _stopped_at is not None:
        if time.monotonic() - _stopped_at < REPEAT_IGNORED_S:
            return  # the same stop, sent twice: let its cleanup finish
        raise StopRequested(signum)  # asked again later: stop now
    if _critical_depth > 0:
        _pending = signum
        return
    raise _stop(signum)


_active = False  # inside stop_signals()


def reclaim() -> None:
    """Install the stop handler again if a library replaced it inside :func:`stop_signals`.
    Why: ``ray.init`` sets its own SIGTERM handler (``sys.exit``), and a SIGTERM then
    crashed a Ray run with a C++ stack dump instead of stopping it (found in review)."""
    if _active and threading.current_thread() is threading.main_thread():
        for s in SIGNALS:
            if signal.getsignal(s) is not _handler:
                signal.signal(s, _handler)


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """Turn SIGINT/SIGTERM into :class:`StopRequested` for the duration (main thread
    only; elsewhere this does nothing)."""
    global _pending, _stopped_at
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    global _requested, _active
    previous = {s: signal.signal(s, _handler) for s in SIGNALS}
    _pending, _stopped_at, _requested = None, None, None
    _active = True
    try:
        yield
    finally:
        _active = False
        for s, h in previous.items():
            signal.signal(s, h)


@contextlib.contextmanager
def critical() -> Iterator[None]:
    """A section a stop signal must not interrupt (its signal is raised at the end)."""
    global _critical_depth, _pending
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _critical_depth += 1
    try:
        yield
    finally:
        _critical_depth -= 1
        if _critical_depth == 0 and _pending is not None:
            signum, _pending = _pending, None
            raise _stop(signum)


def worker_signals() -> None:
    """In a worker process: out of the driver's process group, ignore SIGINT, die on
    SIGTERM (the driver's ``Pool.terminate``; the module docstring says why)."""
    with contextlib.suppress(OSError):  # already a group leader: nothing to leave
        os.setsid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
