"""The exported model's clock (``templates.ASYNC_GO``) holds requests back as vLLM's async
scheduling does, driven call by call as BLIS drives it (docs/blis.md, "The engine loop").

A program with a constant step (1000 µs) and queue delay (300 µs) is exported with
``async_steps`` and built against a stand-in ``sim`` package; a small Go command feeds it
BLIS's calls (``QueueingTime`` at each arrival, ``StepTime`` as each step begins) and
prints what it returns. Every expected hold below is worked out by hand from vLLM's rule:
a request queued during step k joins step k+2, so it must enter BLIS's wait queue during
step k+1; an idle engine admits a request as soon as it is queued.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from evolve.export.go.body import field_names
from evolve.export.go.harness import SIM_GO, find_go, go_env
from evolve.export.go.templates import ARCH_GO
from evolve.export.go.writer import BLIS_REPO, export_go, type_prefix
from evolve.program.language import parse_program

GO = find_go()
PROGRAM = '''"""Constant step and queue delay, for the clock test."""
CONSTANTS = {'step_us': (1000.0, 1.0, 1e6), 'queue_us': (300.0, 0.0, 1e6)}

def step_time(f, c):
    return c.step_us + 0.0 * f.layers

def queueing_time(r, c):
    return c.queue_us
'''
MAIN = '''package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	p0 "%REPO%/exports/p0"
	"%REPO%/sim"
)

func main() {
	m := p0.New%P%ModelFromArch(p0.%P%Arch{%ARCH%}, p0.%P%Consts{%CONSTS%})
	reqs := map[string]*sim.Request{}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if f[0] == "q" {
			t, _ := strconv.ParseInt(f[2], 10, 64)
			r := &sim.Request{ID: f[1], ArrivalTime: t, InputTokens: make([]sim.TokenID, 8),
				NumNewTokens: 8}
			reqs[f[1]] = r
			fmt.Println(m.QueueingTime(r))
		} else {
			batch := []*sim.Request{}
			for _, id := range f[1:] {
				batch = append(batch, reqs[id])
			}
			fmt.Println(m.StepTime(batch))
		}
	}
}
'''
# (call, what BLIS passes, what the model must return, why)
SCRIPT = [
    ("q a 0", 300, "nothing ran yet: the program's delay; a is queued at 300"),
    ("s a", 1000, "a's step: the engine was idle, so it starts at 300 and ends at 1300"),
    ("q b 500", 801, "queued at 800, during a's step: in at 1301, after it ends"),
    ("q c 1100", 1700, "queued at 1400, in step [1300, 2300): in at 2800, mid [2300, 3300)"),
    ("s a", 1000, "the step formed at 1300 (b and c still held back)"),
    ("s a b", 1000, "formed at 2300 with b, as vLLM forms it"),
    ("s a b c", 1000, "formed at 3300 with c; the engine then falls idle at 4300"),
    ("q d 10000", 300, "the engine is idle and nothing else is waiting: no hold"),
    ("q e 10100", 1700, "idle now, but d starts a step at 10300: e (10400) joins the one after"),
    ("s d", 1000, "d's step starts at 10300 (d's queue time), ends at 11300"),
    ("q g 10600", 701, "queued at 10900, during d's step: in at 11301"),
]


@pytest.mark.usefixtures("go_toolchain")
def test_the_clock_holds_each_request_back_to_the_step_vllm_admits_it_to(tmp_path: Path):
    prog = parse_program(PROGRAM.encode())
    prefix = type_prefix(prog.id)
    source = export_go(prog, {"global": {"step_us": 1000.0, "queue_us": 300.0}},
                       async_steps=True)
    root = tmp_path / "mod"
    (root / "sim").mkdir(parents=True)
    (root / "exports" / "p0").mkdir(parents=True)
    (root / "cmd" / "clock").mkdir(parents=True)
    (root / "go.mod").write_text(f"module {BLIS_REPO}\n\ngo 1.24\n")
    stub = SIM_GO.replace("\tNumNewTokens  int\n}", "\tNumNewTokens  int\n\tID string\n"
                          "\tArrivalTime int64\n}")  # the two fields the clock reads
    assert stub != SIM_GO
    (root / "sim" / "sim.go").write_text(stub)
    (root / "exports" / "p0" / "model.go").write_text(source)
    arch = {"Layers": 32, "Hidden": 4096, "Heads": 32, "KVHeads": 32, "HeadDim": 128,
            "Intermediate": 11008, "NExperts": 0, "TopK": 0, "Vocab": 32000, "TP": 1,
            "PeakFlops": 989e12,
            "HBMBw": 3.35e12, "NVLinkBw": 900e9, "BytesPerParam": 2}
    assert set(arch) == {go for go, _ in ARCH_GO}
    fields = field_names(["step_us", "queue_us"])
    main = (MAIN.replace("%REPO%", BLIS_REPO).replace("%P%", prefix)
            .replace("%ARCH%", ", ".join(f"{k}: {v!r}" for k, v in arch.items()))
            .replace("%CONSTS%", f"{fields['step_us']}: 1000, {fields['queue_us']}: 300"))
    (root / "cmd" / "clock" / "main.go").write_text(main)
    built = subprocess.run([str(GO), "build", "-o", "clock", "./cmd/clock"], cwd=root,
                           capture_output=True, text=True, env=go_env())
    assert built.returncode == 0, built.stderr
    ran = subprocess.run([str(root / "clock")], input="\n".join(c for c, _, _ in SCRIPT),
                         capture_output=True, text=True, check=True)
    got = [int(x) for x in ran.stdout.split()]
    for (call, want, why), value in zip(SCRIPT, got, strict=True):
        assert value == want, f"{call}: {value}, expected {want} ({why})"
