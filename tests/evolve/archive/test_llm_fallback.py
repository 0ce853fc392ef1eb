"""Where an LLM run fell back to the offline operator, as the archive and `evolve runs` say.

The generation is derived from the stored LLM calls (the first generation whose calls all
failed at the endpoint), so archives written before it was reported show it too.
"""

from __future__ import annotations

from evolve.archive import Archive
from evolve.archive.models import LLMCall
from evolve.cli.main import main


def call(run_id: int, g: int, seq: int, status: str) -> LLMCall:
    return LLMCall(run_id=run_id, generation=g, seq=seq, request_hash=f"h{g}{seq}",
                   model="m", template_version="t", prompt_tokens=1, completion_tokens=1,
                   cost_usd=0.0, latency_s=0.1, status=status, reply="", error="",
                   cached=False)


def test_fallback_generation_in_archive_and_runs(tmp_path, capsys):
    path = tmp_path / "a.db"
    with Archive(str(path)) as archive:
        llm = archive.create_run(1, {"operator": {"kind": "llm"}, "run": {}}, {}, None)
        offline = archive.create_run(2, {"operator": {"kind": "offline"}, "run": {}}, {}, None)
        archive.commit_generation(llm, 1, [call(llm, 1, 0, "ok"),
                                           call(llm, 1, 1, "unreachable")])
        archive.commit_generation(llm, 2, [call(llm, 2, 0, "unreachable"),
                                           call(llm, 2, 1, "rejected")])
        assert archive.llm_fallback_generation(llm) == 2
        assert archive.llm_fallback_generation(offline) is None
    assert main(["runs", "--archive", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"run {llm}: the LLM endpoint failed in generation 2" in out
    assert f"run {offline}: the LLM" not in out
