"""The exported file compiles inside the real BLIS ``sim``/``sim/latency`` packages at the
pinned commit, registered with the edits ``docs/blis.md`` prescribes, and BLIS's own
``latency.NewLatencyModel`` then returns step times equal to the numpy program's.

Needs BLIS's source at the pinned commit (``tests/support/needs.py`` ``require_blis``: a tarball or
git copy, ``$EVOLVE_BLIS_GIT``, else ``../shared/blis/*.tar.gz``, else the cache clone) and
Go; otherwise it fails and says what to get (``EVOLVE_SKIP_BLIS=1`` or
``EVOLVE_SKIP_GO=1`` skip it on purpose). BLIS's two third-party imports in these
packages (logrus, yaml.v3) are replaced by tiny local stubs so nothing is downloaded; the
rest is BLIS's code unchanged apart from the documented registration.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
from needs import build_blis, require_blis, require_go

from evaluator.features.components import compute_features
from evolve.export.go.harness import go_env
from evolve.export.go.writer import BLIS_COMMIT, GroupInfo, export_go, type_prefix
from evolve.program.codegen import step_model
from evolve.program.language import parse_program

ROOT = Path(__file__).resolve().parents[3]

STUBS = {
    "logrus": ("github.com/sirupsen/logrus v1.9.3", '''package logrus

import (
	"fmt"
	"os"
)

func Debugf(format string, args ...any) {}
func Infof(format string, args ...any)  {}
func Warnf(format string, args ...any)  {}
func Errorf(format string, args ...any) {}
func Fatalf(format string, args ...any) { fmt.Fprintf(os.Stderr, format, args...); os.Exit(1) }
'''),
    "yaml": ("gopkg.in/yaml.v3 v3.0.1", '''package yaml

import (
	"errors"
	"io"
)

type Decoder struct{}

func NewDecoder(r io.Reader) *Decoder    { return &Decoder{} }
func (d *Decoder) KnownFields(bool)      {}
func (d *Decoder) Decode(v any) error    { return errors.New("yaml stub") }
'''),
}

CHECK_MAIN = '''package main

import (
	"fmt"

	"github.com/inference-sim/inference-sim/sim"
	"github.com/inference-sim/inference-sim/sim/latency"
)

func main() {
	mc := sim.ModelConfig{NumLayers: 80, HiddenDim: 8192, NumHeads: 64, NumKVHeads: 8,
		VocabSize: 32000, BytesPerParam: 2, IntermediateDim: 28672}
	hc := sim.HardwareCalib{TFlopsPeak: 989.5, BwPeakTBs: 3.35, MemoryGiB: 80}
	hw := sim.NewModelHardwareConfig(mc, hc, "meta-llama/llama-2-70b-hf", "H100", 4, 1, false, "",
		"evolved", 4096)
	m, err := latency.NewLatencyModel(sim.NewLatencyCoeffs([]float64{0, 0, 0},
		[]float64{0, 0, 0}), hw)
	if err != nil {
		panic(err)
	}
	us := m.(interface{ StepTimeUs([]*sim.Request) float64 })
	for _, b := range [][][3]int{%BATCHES%} {
		var batch []*sim.Request
		for _, r := range b {
			req := &sim.Request{InputTokens: make([]sim.TokenID, r[2]),
				OutputTokens: make([]sim.TokenID, 4)}
			req.ProgressIndex = int64(r[1])
			req.NumNewTokens = r[0]
			batch = append(batch, req)
		}
		fmt.Printf("%.17g %d\\n", us.StepTimeUs(batch), m.StepTime(batch))
	}
	fmt.Println(m.QueueingTime(&sim.Request{InputTokens: make([]sim.TokenID, 100)}),
		m.OutputTokenProcessingTime(), m.PostDecodeFixedOverhead())
}
'''

BATCHES = [[(1, 700, 600), (1, 2000, 1999), (512, 0, 3000)], [(1, 4000, 10)] * 128,
           [(2048, 1024, 4000)], [(17, 100, 117), (1, 117, 117)]]


def _extract(source: Path, dest: Path) -> None:
    build_blis.extract(source, dest, BLIS_COMMIT, ["sim"])
    for test in dest.rglob("*_test.go"):  # BLIS's tests need testify; not run here
        test.unlink()


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{path}: anchor for the documented edit not found: {old!r}"
    path.write_text(text.replace(old, new))


def test_drop_into_real_blis(tmp_path):
    go = require_go()
    _extract(require_blis(BLIS_COMMIT), tmp_path)
    stub_lines = []
    for d, (mod, src) in STUBS.items():
        (tmp_path / "_stubs" / d).mkdir(parents=True)
        (tmp_path / "_stubs" / d / "go.mod").write_text(f"module {mod.split()[0]}\n\ngo 1.24\n")
        (tmp_path / "_stubs" / d / f"{d}.go").write_text(src)
        stub_lines.append((mod, d))
    (tmp_path / "go.mod").write_text(
        "module github.com/inference-sim/inference-sim\n\ngo 1.24\n\nrequire (\n"
        + "".join(f"\t{m}\n" for m, _ in stub_lines) + ")\n\n"
        + "".join(f"replace {m.split()[0]} => ./_stubs/{d}\n" for m, d in stub_lines))

    prog = parse_program((ROOT / "seeds" / "trained_physics.py").read_text())
    rng = np.random.default_rng(5)
    lo, hi = prog.bounds()
    groups = {g: lo + (hi - lo) * rng.random(len(lo)) for g in ("llama-2-70b", "llama-2-7b")}
    named = {g: dict(zip(prog.const_names, map(float, v), strict=True))
             for g, v in groups.items()}
    info = {"llama-2-70b": GroupInfo(("meta-llama/llama-2-70b-hf",))}
    prefix = type_prefix(prog.id)
    lat = tmp_path / "sim" / "latency"
    (lat / "evolved_model.go").write_text(export_go(prog, named, "per_model", info))
    # The registration edits of docs/blis.md ("Dropping it into BLIS").
    _edit(tmp_path / "sim" / "bundle.go", '"trained-physics": true}',
          '"trained-physics": true, "evolved": true}')
    _edit(lat / "latency.go", '\tcase "trained-physics":\n',
          f'\tcase "evolved":\n\t\tm, err := New{prefix}Model(coeffs, hw)\n'
          '\t\tif err != nil {\n\t\t\treturn nil, err\n\t\t}\n\t\treturn m, nil\n'
          '\tcase "trained-physics":\n')
    batches = ", ".join("{" + ", ".join(f"{{{t}, {k}, {s}}}" for t, k, s in b) + "}"
                        for b in BATCHES)
    (tmp_path / "cmd" / "check").mkdir(parents=True)
    (tmp_path / "cmd" / "check" / "main.go").write_text(
        CHECK_MAIN.replace("%BATCHES%", batches))
    env = go_env()
    res = subprocess.run([go, "vet", "./sim/latency"], cwd=tmp_path, capture_output=True,
                         text=True, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    res = subprocess.run([go, "run", "./cmd/check"], cwd=tmp_path, capture_output=True,
                         text=True, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()

    arch = np.array([80, 8192, 64, 8, 128, 28672, 0, 0, 32000, 4, 989.5e12, 3.35e12, 900e9,
                     2.0])
    stats = np.zeros((9, len(BATCHES)))
    for j, b in enumerate(BATCHES):
        for t, k, s in b:
            if k < s:
                stats[[0, 2, 4, 5, 8], j] += [1, t, t * (k + (t + 1) / 2), k + t, t * (s + t / 2)]
            else:
                stats[[1, 3, 6], j] += [1, t, k]
            stats[7, j] = max(stats[7, j], k + t)
    c = groups["llama-2-70b"]
    want = step_model(prog).vector_fn(compute_features(stats, arch), c)
    got = np.array([float(ln.split()[0]) for ln in lines[:-1]])
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=0)
    assert [int(ln.split()[1]) for ln in lines[:-1]] == [max(1, int(u)) for u in got]
    names = prog.const_names
    assert lines[-1].split() == [str(int(c[names.index(n)])) for n in
                                 ("queue_us", "output_token_us", "post_decode_us")]
