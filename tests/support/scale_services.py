"""Real servers for the scale-out tests: a PostgreSQL server and a Ray cluster, each started
in a temporary directory on a free loopback port and stopped by the process id we got.

Why real servers: what can break is the part a fake would hide (a SQL dialect, a collation,
concurrent writers, a worker process dying). CI installs both (scripts/ci_setup_services.sh);
a missing one fails with what to install, unless ``EVOLVE_SKIP_POSTGRES=1`` or
``EVOLVE_SKIP_RAY=1`` says to skip on purpose.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from needs import missing

from evaluator import PINNED_ENV

INSTALL = "run scripts/ci_setup_services.sh (as in scripts/setup.sh)"


def require(what: str, env: str, ok: bool, why: str) -> None:
    """Fail (never silently skip) when a server part is missing, unless opted out."""
    if not ok:
        missing(f"{what}: {why}", env, INSTALL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(pred, timeout: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
    raise RuntimeError(f"{what} did not come up in {timeout:.0f} s\n{tail}")


# ---- PostgreSQL -----------------------------------------------------------------------
@dataclass
class Postgres:
    port: int
    root: Path

    def url(self, db: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{db}"

    def create_database(self, name: str, icu: bool = True) -> str:
        """A fresh database; ``icu``: with a natural-language collation (en-US), under
        which text sorts unlike SQLite, so the archive's own collation is what is tested."""
        import psycopg

        extra = (" TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US'"
                 " LOCALE 'C.UTF-8'" if icu else "")
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"{extra}')
        return self.url(name)


def _pg_bin() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    cands = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    return Path(cands[-1]).parent if cands else None


@contextlib.contextmanager
def postgres_server() -> Iterator[Postgres]:
    """initdb + postgres on 127.0.0.1:<free port>; as root, run as the ``postgres`` user."""
    bindir = _pg_bin()
    require("PostgreSQL", "EVOLVE_SKIP_POSTGRES", bindir is not None,
            "server binaries (initdb, postgres) not found; Debian: apt-get install postgresql")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        require("PostgreSQL", "EVOLVE_SKIP_POSTGRES", False,
                "the psycopg driver is not installed (pip install -e '.[postgres]')")
    assert bindir is not None
    as_user: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="evolve-pg-", dir="/tmp"))
    if os.geteuid() == 0:  # postgres refuses to run as root
        require("PostgreSQL", "EVOLVE_SKIP_POSTGRES", shutil.which("runuser") is not None
                and _user_exists("postgres"), "running as root needs user postgres + runuser")
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres")
    data, sock, log = root / "data", root / "sock", root / "server.log"
    port = free_port()
    proc = None
    try:
        subprocess.run([*as_user, str(bindir / "initdb"), "-D", str(data), "-U", "postgres",
                        "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C.UTF-8"],
                       check=True, capture_output=True, timeout=120)
        subprocess.run([*as_user, "mkdir", "-p", str(sock)], check=True)
        with open(log, "wb") as fh:
            proc = subprocess.Popen(
                [*as_user, str(bindir / "postgres"), "-D", str(data), "-p", str(port),
                 "-k", str(sock), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
                 "-c", "max_connections=60"], stdout=fh, stderr=subprocess.STDOUT)
        server = Postgres(port, root)
        _wait(lambda: _pg_ready(server), 60, "PostgreSQL", log)
        yield server
    finally:
        if proc is not None:
            _stop_postgres(data, proc)
        shutil.rmtree(root, ignore_errors=True)


def _user_exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def _pg_ready(server: Postgres) -> bool:
    import psycopg

    try:
        with psycopg.connect(server.url(), connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False


def _stop_postgres(data: Path, proc: subprocess.Popen[bytes]) -> None:
    """Fast shutdown of the postmaster we started (its pid is in postmaster.pid)."""
    pidfile = data / "postmaster.pid"
    try:
        pid = int(pidfile.read_text().split()[0])
        os.kill(pid, signal.SIGINT)
    except (OSError, ValueError, IndexError):
        proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# ---- Ray --------------------------------------------------------------------------------
@dataclass
class RayCluster:
    address: str
    proc: subprocess.Popen[bytes]
    temp_dir: Path

    def descendants(self) -> list[int]:
        """Processes started under this cluster's ``ray start`` (ours to kill)."""
        parent: dict[int, int] = {}
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    parent[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1]
                                              .split()[1])
                except (OSError, IndexError, ValueError):
                    continue
        out, frontier = [], {self.proc.pid}
        while frontier:
            kids = {p for p, pp in parent.items() if pp in frontier}
            out += sorted(kids)
            frontier = kids
        return out


@contextlib.contextmanager
def ray_cluster(cpus: int = 2) -> Iterator[RayCluster]:
    """``ray start --head --block`` on 127.0.0.1:<free port>; stopped with SIGTERM to that
    process, which stops everything it started. Started without the kernel pins that
    importing evolve sets in this process (as ``ray start`` from a shell is): a run that
    joins it must bring them to its workers (``ray_executor.worker_pins``)."""
    import importlib.util

    ray_cli = Path(sys.executable).parent / "ray"  # not imported here: the executor sets
    ok = ray_cli.exists() and importlib.util.find_spec("ray") is not None  # Ray's env first
    require("Ray", "EVOLVE_SKIP_RAY", ok, "Ray is not installed (pip install -e '.[ray]')")
    temp_dir = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # short: unix socket paths
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in PINNED_ENV}
    env.update(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0")
    log = temp_dir / "start.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [str(ray_cli), "start", "--head", "--block", f"--port={port}",
             "--node-ip-address=127.0.0.1", f"--num-cpus={cpus}", "--include-dashboard=false",
             "--disable-usage-stats", f"--temp-dir={temp_dir}",
             f"--dashboard-agent-listen-port={free_port()}",
             "--object-store-memory=300000000"], stdout=fh, stderr=subprocess.STDOUT, env=env)
    cluster = RayCluster(f"127.0.0.1:{port}", proc, temp_dir)
    try:
        _wait(lambda: b"Ray runtime started" in log.read_bytes() or proc.poll() is not None,
              120, "Ray head", log)
        if proc.poll() is not None:
            raise RuntimeError(f"ray start exited {proc.returncode}\n{log.read_text()[-2000:]}")
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            from evolve.search.execution.ray_tasks import disconnect

            disconnect()
        kids = cluster.descendants()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for pid in kids:  # anything of this cluster that outlived its parent (by pid,
            with contextlib.suppress(OSError):  # and only if it still is a Ray process)
                if b"ray" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(pid, signal.SIGKILL)
        shutil.rmtree(temp_dir, ignore_errors=True)
