"""Fixed Go text of an exported model: types, constructors, the feature computation.

``$T`` is the type prefix (``Evolved3f2a1b9c``), ``$t`` its unexported form; ``$ID`` the
short program id. The feature code mirrors ``evaluator.features.components.features_into`` line by
line (same formulas, same operation order) so Go and numpy round identically; change the
two together (the parity test fails otherwise). Comments are plain sentences on their own
lines: gofmt aligns trailing comments and reformats doc comments that look like lists or
code, and the export must be gofmt-clean without running gofmt.
"""

from __future__ import annotations

# Fields of the arch vector, in evaluator.features.components.ARCH_FIELDS order: (Go name, comment).
ARCH_GO: tuple[tuple[str, str], ...] = (
    ("Layers", "transformer layers (config.json num_hidden_layers)"),
    ("Hidden", "hidden size"),
    ("Heads", "attention heads"),
    ("KVHeads", "key/value heads (GQA); equal to Heads for MHA"),
    ("HeadDim", "hidden / heads, integer division as in evaluator/data/scenarios.py"),
    ("Intermediate", "MLP intermediate size (per expert for MoE)"),
    ("NExperts", "local experts; 0 for dense models"),
    ("TopK", "experts per token; 0 for dense models"),
    ("Vocab", "vocabulary size"),
    ("TP", "tensor-parallel degree"),
    ("PeakFlops", "dense bf16 peak, FLOP/s"),
    ("HBMBw", "HBM bandwidth, bytes/s"),
    ("NVLinkBw", "NVLink bandwidth, bytes/s"),
    ("BytesPerParam", "bytes per weight and activation element"),
)

MODEL_DECL = '''
// Compile-time check that $TModel implements BLIS's latency model interface.
var _ sim.LatencyModel = (*$TModel)(nil)

// $TModel implements sim.LatencyModel with the evolved program $ID. StepTime computes
// the analytical features of the batch (evaluator/features/glossary.py) and evaluates the program.
type $TModel struct {
	// arch is the model and GPU shape the features are computed from.
	arch $TArch
	// consts are the program's fitted constants for this model.
	consts $TConsts
	// d holds quantities that depend only on arch, computed once.
	d $tDerived$ASYNCFIELD
}

// $tDerived are the per-model terms of evaluator/features/components.py features_into.
type $tDerived struct {
	// peak is FLOP per microsecond.
	peak float64
	// bw is HBM bytes per microsecond.
	bw float64
	// nvl is NVLink bytes per microsecond.
	nvl float64
	// attnProj is q, k, v and o projection parameters per layer.
	attnProj float64
	// mlp is gate, up and down projection parameters per layer (one expert).
	mlp float64
	// isMoe is 1 for mixture-of-experts models, else 0.
	isMoe float64
	// linParams is linear-layer parameters touched per token.
	linParams float64
	// attnScale is attention FLOPs per query-key pair on one GPU.
	attnScale float64
	// kvBytesTok is KV-cache bytes per token on one GPU.
	kvBytesTok float64
	// arFactor is the ring all-reduce volume factor 2(tp-1)/tp, 0 at tp 1.
	arFactor float64
	// weightUs is every weight once (all experts) at peak HBM bandwidth on one GPU, in
	// microseconds (r.weight_us of queueing_time).
	weightUs float64
}

// New$TModelFromArch builds the model from plain numbers (no BLIS configuration needed).
func New$TModelFromArch(arch $TArch, consts $TConsts) *$TModel {
	m := &$TModel{arch: arch, consts: consts}
	a := &m.arch
	d := &m.d
	d.peak = a.PeakFlops / 1e6
	d.bw = a.HBMBw / 1e6
	d.nvl = a.NVLinkBw / 1e6
	d.attnProj = a.Hidden*(a.Hidden+2.0*a.KVHeads*a.HeadDim) + a.Hidden*a.Hidden
	d.mlp = 3.0 * a.Hidden * a.Intermediate
	activeMlp := d.mlp
	if a.NExperts > 1.0 {
		d.isMoe = 1.0
		activeMlp = d.mlp * a.TopK
	}
	d.linParams = a.Layers * (d.attnProj + activeMlp)
	d.attnScale = 4.0 * a.Layers * (a.Heads / a.TP) * a.HeadDim
	d.kvBytesTok = 2.0 * a.Layers * a.KVHeads * a.HeadDim * a.BytesPerParam / a.TP
	if a.TP > 1.0 {
		d.arFactor = 2.0 * (a.TP - 1.0) / a.TP
	}
	experts := 1.0
	if a.NExperts > 1.0 {
		experts = a.NExperts
	}
	d.weightUs = (a.Layers*(d.attnProj+experts*d.mlp) + a.Hidden*a.Vocab) * a.BytesPerParam /
		a.TP / d.bw
	return m
}

// New$TModel builds the model from BLIS's configuration: the architecture from
// hw.ModelConfig, peak FLOP/s and HBM bandwidth from hw.HWConfig, NVLink from
// $tNVLinkBw, the measured kernel curves and the constants fitted for hw.Model. A
// coeffs.BetaCoeffs of exactly $NCONST values, not all zero, replaces the fitted
// constants (order of $TConsts); AlphaCoeffs is not used.
func New$TModel(coeffs sim.LatencyCoeffs, hw sim.ModelHardwareConfig) (*$TModel, error) {
	mc := hw.ModelConfig
	if hw.TP <= 0 || mc.NumLayers <= 0 || mc.NumHeads <= 0 || mc.HiddenDim <= 0 {
		return nil, fmt.Errorf("evolved model $ID: TP, NumLayers, NumHeads and HiddenDim "+
			"must be > 0, got %d, %d, %d, %d", hw.TP, mc.NumLayers, mc.NumHeads, mc.HiddenDim)
	}
	if !(hw.HWConfig.TFlopsPeak > 0) || !(hw.HWConfig.BwPeakTBs > 0) {
		return nil, fmt.Errorf("evolved model $ID: TFlopsPeak and BwPeakTBs must be > 0, "+
			"got %v, %v", hw.HWConfig.TFlopsPeak, hw.HWConfig.BwPeakTBs)
	}
	kvHeads := mc.NumKVHeads
	if kvHeads == 0 {
		kvHeads = mc.NumHeads
	}
	bytesPerParam := mc.BytesPerParam
	if !(bytesPerParam > 0) {
		bytesPerParam = 2.0
	}
	var arch $TArch
	arch.Layers = float64(mc.NumLayers)
	arch.Hidden = float64(mc.HiddenDim)
	arch.Heads = float64(mc.NumHeads)
	arch.KVHeads = float64(kvHeads)
	arch.HeadDim = float64(mc.HiddenDim / mc.NumHeads)
	arch.Intermediate = float64(mc.IntermediateDim)
	arch.NExperts = float64(mc.NumLocalExperts)
	arch.TopK = float64(mc.NumExpertsPerTok)
	arch.Vocab = float64(mc.VocabSize)
	arch.TP = float64(hw.TP)
	arch.PeakFlops = hw.HWConfig.TFlopsPeak * 1e12
	arch.HBMBw = hw.HWConfig.BwPeakTBs * 1e12
	arch.NVLinkBw = $tNVLinkBw
	arch.BytesPerParam = bytesPerParam
	arch.Kernels = $tKernelsFor(hw.Model)
	consts, err := $tConstsFor(hw.Model)
	if err != nil {
		return nil, err
	}
	override := false
	for _, v := range coeffs.BetaCoeffs {
		override = override || v != 0
	}
	if override {
		if len(coeffs.BetaCoeffs) != $NCONST {
			return nil, fmt.Errorf("evolved model $ID: BetaCoeffs has %d values; it takes "+
				"$NCONST constants ($CNAMES) or none", len(coeffs.BetaCoeffs))
		}
		consts = $TConsts{$BETAFIELDS}
	}
	return New$TModelFromArch(arch, consts), nil
}

// $tNVLinkBw is the NVLink bandwidth in bytes/s (H100 SXM); BLIS's HardwareCalib has none.
const $tNVLinkBw = 900e9
'''

METHODS = '''
// StepTime implements sim.LatencyModel: the program's step time truncated to integer
// microseconds (as BLIS's trained-physics backend rounds), at least 1.
func (m *$TModel) StepTime(batch []*sim.Request) int64 {
$STEPBODY
}

// StepTimeUs is the program's step time in microseconds, before rounding.
func (m *$TModel) StepTimeUs(batch []*sim.Request) float64 {
	var f $TFeatures
	m.features(batch, &f)
	return $tStepTime(&f, &m.consts)
}

// QueueingTime implements sim.LatencyModel: the program's queueing delay truncated to
// integer microseconds, at least 0.
func (m *$TModel) QueueingTime(req *sim.Request) int64 {
$QUEUERET
}

// QueueingTimeUs is the program's queueing delay in microseconds, before rounding.
func (m *$TModel) QueueingTimeUs(req *sim.Request) float64 {
$QUEUEBODY
}

// OutputTokenProcessingTime implements sim.LatencyModel ($OUTDOC).
func (m *$TModel) OutputTokenProcessingTime() int64 {
	return $OUTEXPR
}

// PostDecodeFixedOverhead implements sim.LatencyModel ($POSTDOC).
func (m *$TModel) PostDecodeFixedOverhead() int64 {
	return $POSTEXPR
}

// features fills f from the batch like evaluator/features/components.py features_into: the batch
// statistics of evaluator/features/glossary.py STATS, then every feature with the same formulas in
// the same order, so Go and numpy agree to rounding. A request is prefill while its
// ProgressIndex (tokens cached) is below its input length, otherwise decode.
func (m *$TModel) features(batch []*sim.Request, f *$TFeatures) {
	a := &m.arch
	d := &m.d
	var nPf, nDc, pfTok, dcTok, pfPairs, pfCtx, dcKv, kvMax, blisPf float64
	for _, req := range batch {
		t := float64(req.NumNewTokens)
		k := float64(req.ProgressIndex)
		if k+t > kvMax {
			kvMax = k + t
		}
		if req.ProgressIndex < req.InputLen() {
			s := float64(req.InputLen())
			nPf++
			pfTok += t
			pfPairs += t * (k + (t+1.0)/2.0)
			pfCtx += k + t
			blisPf += t * (s + t/2.0)
		} else {
			nDc++
			dcTok += t
			dcKv += k
		}
	}
	bs := nPf + nDc
	tokens := pfTok + dcTok
	// The lm_head runs once per request in the batch (logits only at sampled positions).
	lmHead := 2.0 * a.Hidden * a.Vocab * bs
	pfShare := 0.0
	dcShare := 0.0
	if bs > 0 {
		pfShare = nPf / bs
		dcShare = nDc / bs
	}
	f.PfGemm = (2.0*pfTok*d.linParams + lmHead*pfShare) / a.TP / d.peak
	f.PfAttn = d.attnScale * pfPairs / d.peak
	f.DcGemm = (2.0*dcTok*d.linParams + lmHead*dcShare) / a.TP / d.peak
	f.DcAttn = d.attnScale * (dcKv + nDc) / d.peak
	wbytes := a.Layers*(d.attnProj+d.mlp) + a.Hidden*a.Vocab
	if d.isMoe > 0 {
		// Expected distinct experts hit by the step's tokens.
		touched := 0.0
		if tokens > 0 {
			touched = a.NExperts * (1.0 - math.Pow(1.0-a.TopK/a.NExperts, tokens))
		}
		wbytes = a.Layers*(d.attnProj+touched*d.mlp) + a.Hidden*a.Vocab
	}
	f.WeightRead = 0.0
	if bs > 0 {
		f.WeightRead = wbytes * a.BytesPerParam / a.TP / d.bw
	}
	f.KvRead = d.kvBytesTok * (dcKv + nDc + pfCtx) / d.bw
	f.KvWrite = d.kvBytesTok * tokens / d.bw
	f.TpAllreduce = 2.0 * a.Layers * tokens * a.Hidden * a.BytesPerParam * d.arFactor / d.nvl
	f.MoeGemm = 0.0
	if d.isMoe > 0 {
		f.MoeGemm = 2.0 * tokens * a.Layers * a.TopK * d.mlp / a.TP / d.peak
	}
	f.NPrefill = nPf
	f.NDecode = nDc
	f.BatchSize = bs
	f.PrefillTokens = pfTok
	f.DecodeTokens = dcTok
	f.KvSum = dcKv
	f.KvMax = kvMax
	f.Layers = a.Layers
	f.Tp = a.TP
	f.IsMoe = d.isMoe
	f.BlisPfAttn = d.attnScale * blisPf / d.peak
	if len(a.Kernels) > 0 && a.Kernels[0] > 0.0 {
		f.KGemm, f.KDcAttn, f.KPfAttn = $tKernelTimes(a.Kernels, tokens, bs, nDc, dcKv+nDc,
			pfPairs, a.Layers, a.NExperts, a.TopK)
	} else {
		// No measured kernels for this model: the roofline, as evaluator/features/components.py.
		f.KGemm = math.Max(f.PfGemm+f.DcGemm, f.WeightRead)
		f.KDcAttn = math.Max(f.DcAttn, d.kvBytesTok*(dcKv+nDc)/d.bw)
		f.KPfAttn = math.Max(f.PfAttn, d.kvBytesTok*pfCtx/d.bw)
	}
	f.KStep = f.KGemm + f.KDcAttn + f.KPfAttn
}

// $tTicks converts microseconds to BLIS ticks like BLIS's clampToInt64: truncation,
// NaN and overflow to math.MaxInt64; negative values become 0.
func $tTicks(us float64) int64 {
	if math.IsNaN(us) || us >= float64(math.MaxInt64) {
		return math.MaxInt64
	}
	if us <= 0 {
		return 0
	}
	return int64(us)
}
'''

# Go names of the features, in glossary order; checked against FEATURE_NAMES at import of
# evolve.export.go.writer so a new glossary feature cannot be silently missing here.
FEATURE_GO: tuple[tuple[str, str], ...] = (
    ("pf_gemm", "PfGemm"), ("pf_attn", "PfAttn"), ("dc_gemm", "DcGemm"),
    ("dc_attn", "DcAttn"), ("weight_read", "WeightRead"), ("kv_read", "KvRead"),
    ("kv_write", "KvWrite"), ("tp_allreduce", "TpAllreduce"), ("moe_gemm", "MoeGemm"),
    ("n_prefill", "NPrefill"), ("n_decode", "NDecode"), ("batch_size", "BatchSize"),
    ("prefill_tokens", "PrefillTokens"), ("decode_tokens", "DecodeTokens"),
    ("kv_sum", "KvSum"), ("kv_max", "KvMax"), ("layers", "Layers"), ("tp", "Tp"),
    ("is_moe", "IsMoe"), ("blis_pf_attn", "BlisPfAttn"), ("k_gemm", "KGemm"),
    ("k_dc_attn", "KDcAttn"), ("k_pf_attn", "KPfAttn"), ("k_step", "KStep"),
)

# Go names of what queueing_time reads (glossary REQUEST_FIELDS, in order), the Go
# expression filling each from ``req`` and the model ``m``, and its doc line.
REQUEST_GO: tuple[tuple[str, str, str, str], ...] = (
    ("input_tokens", "InputTokens", "float64(req.InputLen())", "the prompt length"),
    ("output_tokens", "OutputTokens", "float64(len(req.OutputTokens))",
     "the tokens to generate"),
    ("weight_us", "WeightUs", "m.d.weightUs",
     "every weight once at peak HBM bandwidth on one GPU (us)"),
    ("layers", "Layers", "m.arch.Layers", "transformer layers"),
    ("tp", "Tp", "m.arch.TP", "tensor-parallel degree"),
    ("is_moe", "IsMoe", "m.d.isMoe", "1 for mixture-of-experts models"),
)

# StepTime's and QueueingTime's bodies: the program alone, or with ASYNC_GO's clock.
STEP_PLAIN = """\tif len(batch) == 0 {
\t\treturn 1
\t}
\treturn max(1, $tTicks(m.StepTimeUs(batch)))"""
STEP_ASYNC = """\td := int64(1)
\tif len(batch) > 0 {
\t\td = max(1, $tTicks(m.StepTimeUs(batch)))
\t}
\tm.async.stepBegins(batch, d)
\treturn d"""
QUEUE_PLAIN = "\treturn $tTicks(m.QueueingTimeUs(req))"
QUEUE_ASYNC = "\treturn m.async.hold(req, $tTicks(m.QueueingTimeUs(req)))"

# The model's own clock, for constants fitted in vLLM's loop run in stock BLIS
# (evolve/export/go/writer.py export_go(async_steps=True); docs/blis.md).
ASYNC_GO = '''
// $tAsync carries vLLM v0.15.1's async scheduling into BLIS at the pinned commit, which
// forms each step when the previous one ends. vLLM forms step k+1 while step k runs, so a
// request queued during step k joins step k+2 at the earliest; in BLIS it would join k+1.
// BLIS calls StepTime once as each step begins and QueueingTime once as each request
// arrives, so the model can keep the clock: when the running step began and when it ends.
// QueueingTime then returns the program's delay plus what puts the request into BLIS's
// wait queue during the step after the one it was queued in, so BLIS admits it to the step
// vLLM would. When that step is still to come, steps are predicted as long as the last one
// and the request goes in at the middle of the predicted step; an engine that is idle, and
// stays idle until the request is queued, holds nothing back. One clock per instance:
// BLIS builds a latency model per instance.
type $tAsync struct {
	// started is false until the first step began.
	started bool
	// start and end are the last step's start and end, in BLIS ticks (microseconds).
	start, end int64
	// queued is when each arrived request enters BLIS's wait queue, until a batch holds it.
	queued map[string]int64
}

// stepBegins records the step BLIS is forming: it starts when the previous one ended if a
// request of the batch was running or waiting by then, otherwise (the engine was idle)
// when the first of the batch entered the wait queue; it lasts d.
func (a *$tAsync) stepBegins(batch []*sim.Request, d int64) {
	first, waited := int64(math.MaxInt64), false
	for _, req := range batch {
		if q, ok := a.queued[req.ID]; ok && (!a.started || q > a.end) {
			first = min(first, q)
		} else {
			waited = true
		}
		delete(a.queued, req.ID)
	}
	if waited || first == math.MaxInt64 {
		first = a.end
	}
	a.start, a.end, a.started = first, first+min(d, math.MaxInt64-first), true
}

// hold is the delay from arrival to BLIS's wait queue for a request whose program delay
// is q: q, or more so that the request is admitted to the step vLLM's async scheduling
// admits it to.
func (a *$tAsync) hold(req *sim.Request, q int64) int64 {
	if a.queued == nil {
		a.queued = map[string]int64{}
	}
	if q > math.MaxInt64/4 || a.end-a.start > math.MaxInt64/4 {
		return q // no finite delay or step (the program's NaN or overflow): nothing to time
	}
	at := req.ArrivalTime + q
	if a.started && at <= a.end {
		// queued during the running step: in after it ends, before the next one does
		at = a.end + 1
	} else if a.started && a.end > a.start {
		// queued during a later step: in at the middle of the step after it, steps
		// predicted as long as the last one from when the engine is next busy
		from := a.end
		if req.ArrivalTime >= a.end {
			from = a.idleUntil(req.ArrivalTime)
		}
		if from < at {
			d := a.end - a.start
			at = from + ((at-from)/d+1)*d + d/2
		}
	}
	a.queued[req.ID] = at
	return at - req.ArrivalTime
}

// idleUntil is when an engine idle at now starts its next step: when the first request
// that arrived before is queued (math.MaxInt64 if none is waiting to be). An earlier
// queue time would have started a step already; such a request was dropped, so it is
// forgotten.
func (a *$tAsync) idleUntil(now int64) int64 {
	next := int64(math.MaxInt64)
	for id, at := range a.queued {
		if at < now {
			delete(a.queued, id)
		} else {
			next = min(next, at)
		}
	}
	return next
}
'''
