"""Issue 56: a credential in a URL never leaves evolve. Every command is run with a secret in
every URL form (an archive's ``user:password@``, ``?password=``, ``sslpassword=`` in any
case, a bad port; an LLM endpoint's ``user:password@``, ``?api_key=``, ``?Token=``,
``?key=``; a config file's ``llm.base_url``), and stdout, stderr, the archive, the report
and traceback files are searched for it: 0 occurrences. An endpoint's ``user:password@``
is not sent either (an HTTP client would send it as Basic auth in place of the key)."""

from __future__ import annotations

from pathlib import Path

import pytest
from llm_server import LLMServer

from evolve.cli.main import main

S = "hunter2-Cr3dential-42"
ARCHIVE_URLS = [
    f"postgresql://evolve:{S}@127.0.0.1:1/db",
    f"postgresql://evolve@127.0.0.1:1/db?password={S}",
    f"postgresql://evolve@127.0.0.1:1/db?sslmode=disable&PassWord={S}",
    f"postgresql+psycopg://evolve@127.0.0.1:1/db?SSLPASSWORD={S}&application_name=x",
    f"postgresql://evolve:{S}@127.0.0.1:notaport/db?passwd={S}",
    f"postgresql://evolve@127.0.0.1:99999/db?pwd={S}",
]
ID = "0123abcd"


def llm_urls(port: int) -> list[str]:
    base = f"127.0.0.1:{port}/v1"
    return [f"http://user:{S}@{base}", f"http://{base}?api_key={S}",
            f"http://{base}?Token={S}&x=1", f"http://{base}?key={S}"]


def leaks(tmp_path: Path, *texts: str) -> list[str]:
    """Where the secret is: in ``texts`` (outputs) or any file under ``tmp_path`` (the
    archive, the report, traceback files) but the user's own config files (``*.toml``)."""
    found = [f"output {i}" for i, t in enumerate(texts) if S in t]
    found += [str(p) for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".toml"
              and S.encode() in p.read_bytes()]
    return found


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("url", ARCHIVE_URLS)
def test_an_archive_url_secret_is_never_shown(tmp_path, capsys, crash_dir, url, data_path):
    cmds = [["frontier"], ["show", ID], ["runs"], ["report", "--out", str(tmp_path / "r")],
            ["export-go", ID], ["replay", ID], ["validate", ID, "--no-plots"],
            ["run", "--generations", "0", "--data", str(data_path)]]
    for argv in cmds:
        code, out, err = run([*argv, "--archive", url], capsys)
        assert code == 2 and err.count("\n") == 1, (argv, err)
        assert not leaks(tmp_path, out, err), (argv, err)
    code, _out, err = run(["frontier", url], capsys)  # a URL where argparse expects none
    assert code == 2 and "unrecognized arguments" in err and S not in err


def test_a_traceback_file_has_the_secret_masked(tmp_path, capsys, crash_dir, monkeypatch):
    import evolve.cli.commands.runs as runs

    url = ARCHIVE_URLS[1]

    def boom(args):
        raise RuntimeError(f"a bug while reading {args.archive}")

    monkeypatch.setattr(runs, "run", boom)
    code, out, err = run(["runs", "--archive", url], capsys)
    assert code == 1 and "internal error" in err
    (crash,) = crash_dir.iterdir()
    assert "password=***" in crash.read_text()
    assert not leaks(tmp_path, out, err)


def test_an_endpoint_url_secret_is_neither_shown_nor_sent_as_basic_auth(
        tmp_path, capsys, crash_dir, monkeypatch):
    monkeypatch.setenv("EVOLVE_TEST_KEY", "the-bearer-key")
    with LLMServer(lifetime_s=60) as server:
        for url in llm_urls(server.port):
            for extra in ([], ["--json"]):
                code, out, err = run(["llm-check", "--llm", "test-model", "--llm-base-url",
                                      url, "--api-key-env", "EVOLVE_TEST_KEY", *extra],
                                     capsys)
                assert code == 0, err
                assert not leaks(tmp_path, out, err), (url, out, err)
            code, out, err = run(["run", "--llm", "test-model", "--llm-base-url", url,
                                  "--print-config"], capsys)
            assert code == 0 and "base_url" in out and not leaks(tmp_path, out, err)
        cfg = tmp_path / "c.toml"
        cfg.write_text(f'[llm]\nmodel = "test-model"\nbase_url = "{llm_urls(server.port)[0]}"\n')
        code, out, err = run(["llm-check", "--config", str(cfg), "--api-key-env",
                              "EVOLVE_TEST_KEY"], capsys)
        assert code == 0 and not leaks(tmp_path, out, err)
        # the key as the bearer token, never user:password@ as Basic auth; a query reaches
        # the endpoint as the query of each request (the client appends paths to the base)
        assert len(server.auth) == 9 and set(server.auth) == {"Bearer the-bearer-key"}
        assert sum(p.endswith(f"/v1/chat/completions?api_key={S}") for p in server.paths) == 2
    for url in llm_urls(server.port):  # the server is gone: a refusal, masked
        for argv in (["llm-check", "--llm", "test-model", "--llm-base-url", url],
                     ["run", "--llm", "test-model", "--llm-base-url", url, "--archive",
                      str(tmp_path / "a.db")]):
            code, out, err = run(argv, capsys)
            assert code == 2 and "error:" in err and not leaks(tmp_path, out, err), err


def test_a_run_stores_and_reports_its_endpoint_without_the_secret(
        tmp_path, capsys, crash_dir, tiny_config_file):
    with LLMServer(lifetime_s=120) as server:
        url = f"http://user:{S}@127.0.0.1:{server.port}/v1?api_key={S}"
        code, out, err = run(["run", "--config", str(tiny_config_file), "--generations", "0",
                              "--llm", "test-model", "--llm-base-url", url, "--archive",
                              str(tmp_path / "a.db"), "--report", str(tmp_path / "r")],
                             capsys)
    assert code == 0, err
    assert (tmp_path / "r" / "index.html").exists() and (tmp_path / "a.db").exists()
    assert "api_key=***" in (tmp_path / "r" / "index.html").read_text()
    assert not leaks(tmp_path, out, err)
    code, out, err = run(["run", "--resume", "1", "--generations", "1", "--archive",
                          str(tmp_path / "a.db")], capsys)  # the stored URL lacks the key
    assert code == 2 and "pass the endpoint again with --llm-base-url" in err


@pytest.mark.parametrize(("text", "shown"), [
    ("postgresql://u:pw@h:5432/db", "postgresql://u:***@h:5432/db"),
    ("postgresql://u:p/w@d@h/db?x=1", "postgresql://u:***@h/db?x=1"),
    ("postgresql://u@h/db?sslmode=require&PassWord=pw", "postgresql://u@h/db?sslmode=require&PassWord=***"),
    ("http://h/v1?api_key=pw#token=pw", "http://h/v1?api_key=***#token=***"),
    ("'http://h/v1?Signature=pw&x=1'", "'http://h/v1?Signature=***&x=1'"),
    ("no route /v1/?api-key=pw here", "no route /v1/?api-key=*** here"),
    ("host=h password=pw dbname=d", "host=h password=*** dbname=d"),
    ("http://token@h/ and max_tokens=5", "http://token@h/ and max_tokens=5"),
])
def test_one_masking_function_for_every_form(text, shown):
    from evolve.text.untrusted import mask_secrets

    assert mask_secrets(text) == shown


def test_userinfo_is_stripped_from_the_endpoint_and_never_stored():
    from evolve.config.llm import LLMConfig
    from evolve.operators.llm.endpoint import endpoint_parts
    from evolve.text.untrusted import printable, strip_userinfo

    assert strip_userinfo("https://a:b@c@h:1/v1?k=1") == "https://h:1/v1?k=1"
    assert LLMConfig(base_url=f"http://u:{S}@h/v1").base_url == "http://h/v1"
    assert endpoint_parts(f"http://u:{S}@h/v1?api_key={S}") == ("http://h/v1", {"api_key": S})
    assert printable("ok\x1b[2J\x07\u202e\n") == "ok\\x1b[2J\\x07\\u202e\\x0a"
    assert printable("a\tb\nc\x9b", lines=True) == "a\tb\nc\\x9b"
