"""Archive locations without a server: paths and URLs, labels without passwords, the DDL a
PostgreSQL archive gets, the values it binds; the executor's configuration keys."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.schema import CreateTable

from evolve.archive import Archive
from evolve.archive.engines import _portable_params, exists, is_url, locate
from evolve.archive.models import Base
from evolve.cli.main import main
from evolve.errors import ArchiveError


def test_paths_and_urls():
    assert not is_url("archive.db") and not is_url(Path("runs/a.db"))
    assert is_url("postgresql://u@h/db") and is_url("postgresql+psycopg://u@h/db")
    loc = locate("runs/a.db")
    assert loc.file == Path("runs/a.db") and loc.label == "runs/a.db"
    assert locate("sqlite:///runs/a.db").file == Path("runs/a.db")
    pg = locate("postgresql://evolve:s3cret@db.example:5432/archive")
    assert pg.file is None and pg.url.drivername == "postgresql+psycopg"
    assert "s3cret" not in pg.label and pg.label.endswith("@db.example:5432/archive")
    assert locate("postgresql+psycopg2://u@h/d").url.drivername == "postgresql+psycopg2"
    assert exists("postgresql://u@h/d") and not exists("no/such/file.db")


def test_sqlite_url_is_the_same_archive(tmp_path):
    with Archive(tmp_path / "a.db") as ar:
        ar.create_run(1, {}, {}, None)
    with Archive(f"sqlite:///{tmp_path / 'a.db'}", create=False) as ar:
        assert ar.path == tmp_path / "a.db" and ar.latest_run_id() == 1
    with pytest.raises(ArchiveError, match="archive not found"):
        Archive(f"sqlite:///{tmp_path / 'b.db'}", create=False)


def test_missing_driver_is_a_one_line_error(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_psycopg(name, *a, **k):
        if name.startswith("psycopg"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_psycopg)
    with pytest.raises(ArchiveError, match=r"pip install -e '\.\[postgres\]'"):
        Archive("postgresql://u@127.0.0.1:9/db")


def test_postgres_ddl_sorts_text_like_sqlite():
    programs = Base.metadata.tables["programs"]
    pg = str(CreateTable(programs).compile(dialect=postgresql.dialect()))
    assert 'id VARCHAR COLLATE "C" NOT NULL' in pg
    assert 'source TEXT COLLATE "C"' in pg and 'parent_ids TEXT COLLATE "C"' in pg
    assert "seq INTEGER NOT NULL" in pg and "COLLATE" not in pg.split("seq ")[1].split(",")[0]
    lite = str(CreateTable(programs).compile(dialect=sqlite.dialect()))
    assert "COLLATE" not in lite  # SQLite archives are byte for byte what they were
    runs = Base.metadata.tables["runs"]  # any configured seed (< 2**63) fits a server's
    assert "seed BIGINT" in str(CreateTable(runs).compile(dialect=postgresql.dialect()))
    assert "seed INTEGER" in str(CreateTable(runs).compile(dialect=sqlite.dialect()))


def test_bound_values_as_sqlite_stores_them():
    nan = float("nan")
    _s, p = _portable_params(None, None, "x", {"a": True, "b": nan, "c": 1.5, "d": "t"},
                             None, False)
    assert p == {"a": 1, "b": None, "c": 1.5, "d": "t"} and type(p["a"]) is int
    _s, many = _portable_params(None, None, "x", [{"a": False}, {"a": 2}], None, True)
    assert many == [{"a": 0}, {"a": 2}]
    _s, tup = _portable_params(None, None, "x", (True, nan, "s"), None, False)
    assert tup == (1, None, "s")


def test_executor_keys(capsys):
    assert main(["run", "--print-config", "--ray-address", "10.0.0.5:6379"]) == 0
    run = tomllib.loads(capsys.readouterr().out)["run"]
    assert run["executor"] == "ray" and run["ray_address"] == "10.0.0.5:6379"
    assert main(["run", "--print-config", "--executor", "ray", "--workers", "3"]) == 0
    run = tomllib.loads(capsys.readouterr().out)["run"]
    assert run["executor"] == "ray" and run["ray_address"] == "" and run["workers"] == 3
    with pytest.raises(SystemExit):
        main(["run", "--print-config", "--executor", "dask"])
