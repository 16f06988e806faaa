"""The planner's batched pipeline (`layouts.schedules.pipeline_times`) against the engine's executed schedule
(`replay.schedule.execute`), row by row: random stage-heterogeneous durations, sends that differ along the
pipeline, the last microbatch's own sends; GPipe, 1F1B and interleaved; the shortened runs it extrapolates from
included. And the closed-form gradient-bucket queue against `replay.engine.gradient_reduction`."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ultracluster.replay.engine import bucket_queue_end
from ultracluster.layouts.schedules import pipeline_times
from ultracluster.replay.engine import StepComm, gradient_reduction
from ultracluster.replay.schedule import execute, stage_programs


def executed(schedule, p, v, m, fwd, bwd, sf, sb, sl):
    ex = execute(stage_programs(schedule, p, m, v), fwd[None, :], bwd[None, :], sf, sb,
                 {("B", m - 1, c): sl[c] for c in range(p * v)})
    return ex


def assert_rows_match(schedule, p, v, ms, fwd, bwd, sf, sb, sl):
    pt = pipeline_times(schedule, p, v, np.array(ms), fwd, bwd, sf, sb, sl)
    for r, m in enumerate(ms):
        ex = executed(schedule, p, v, m, fwd[r], bwd[r], sf[r], sb[r], sl[r])
        scale = ex.stage_end.max()
        np.testing.assert_allclose(pt.stage_end[r], ex.stage_end[0], rtol=1e-9, atol=1e-12 * scale)
        for c in range(p * v):
            assert pt.last_b_end[r, c] == pytest.approx(float(ex.end[("B", m - 1, c)][0]), rel=1e-9, abs=1e-12 * scale)
            assert pt.last_b_start[r, c] == pytest.approx(float(ex.start[("B", m - 1, c)][0]), rel=1e-9,
                                                          abs=1e-12 * scale)
    return pt


def sends(rng, rows, chunks, period):
    sf = rng.uniform(0.0, 0.05, (rows, chunks))
    sf[:, period - 1::period] *= 20                      # an EFA hop every `period` stages
    sf[:, -1] = 0.0
    sb = np.concatenate([np.zeros((rows, 1)), sf[:, :-1]], axis=1)
    return sf, sb, sb * rng.uniform(1.0, 2.0, (rows, chunks))


@settings(max_examples=40, deadline=None)
@given(schedule=st.sampled_from(["1f1b", "interleaved", "gpipe"]), p=st.integers(1, 8), v=st.integers(2, 3),
       groups=st.integers(1, 12), extra=st.integers(0, 40), spread=st.sampled_from([0.0, 0.003, 0.3]),
       period=st.integers(1, 4), seed=st.integers(0, 2**31))
def test_batched_pipeline_equals_the_engines_execution(schedule, p, v, groups, extra, spread, period, seed):
    rng = np.random.default_rng(seed)
    if schedule == "interleaved":
        p = max(p, 2)
        ms = [p * groups, p * (groups + 3)]              # microbatches fill the groups of p
    else:
        v = 1
        ms = [groups + extra, 2 * p + 40 + extra]
    chunks = p * v
    rows = len(ms)
    base = np.ones(chunks)
    base[-1] += 0.2                                       # the LM head
    fwd = base * np.exp(spread * rng.standard_normal((rows, chunks)))
    bwd = 2 * fwd * np.exp(spread * rng.standard_normal((rows, chunks)))
    assert_rows_match(schedule, p, v, ms, fwd, bwd, *sends(rng, rows, chunks, period))


def test_long_pipelines_are_extrapolated_from_short_runs_exactly():
    """A 64-stage 1F1B pipeline with ragged stages and an EFA send every 16 stages repeats over more than one
    block; 1,024 microbatches are priced from a run of a few hundred and still match the engine."""
    rng = np.random.default_rng(7)
    p, rows = 64, 3
    layers = np.array([1.0] * 24 + [2.0] * 16 + [1.0] * 24)
    fwd = np.tile(0.13 * layers, (rows, 1))
    fwd[:, -1] = 0.26
    bwd = 3 * fwd
    sf, sb, sl = sends(rng, rows, p, 16)
    pt = assert_rows_match("1f1b", p, 1, [1024, 1000, 333], fwd, bwd, sf, sb, sl)
    assert pt.evaluated_microbatches[0] < 1024


@settings(max_examples=60, deadline=None)
@given(v=st.integers(1, 4), seed=st.integers(0, 2**31))
def test_bucket_queue_closed_form_equals_gradient_reduction(v, seed):
    """The engine sorts every bucket's ready time and runs one queue per stage; the fast path takes the max over
    each chunk's first and last bucket (chunk windows follow the program, v of them per stage)."""
    rng = np.random.default_rng(seed)
    p, m = 2, 4
    programs = stage_programs("interleaved" if v > 1 else "1f1b", p, m, v)
    chunks = p * v
    fwd = rng.uniform(0.5, 1.5, (1, chunks))
    ex = execute(programs, fwd, 2 * fwd, np.zeros(chunks), np.zeros(chunks))
    buckets = rng.integers(1, 40, chunks)
    bucket_s = rng.uniform(0.0, 0.4, chunks)
    comm = StepComm(tp_fwd=np.zeros(chunks), tp_bwd=np.zeros(chunks), send_fwd=np.zeros(chunks),
                    send_bwd=np.zeros(chunks), dp=np.zeros(p), records=[], dp_bucket_s=bucket_s, dp_buckets=buckets,
                    dp_overlap=True)
    want, _ = gradient_reduction(ex, comm, p, m)
    for s in range(p):
        seg = np.arange(s, chunks, p)[::-1]                 # the last backwards of the stage, in program order
        t0 = np.array([[float(ex.start[("B", m - 1, c)][0]) for c in seg]])
        t1 = np.array([[float(ex.end[("B", m - 1, c)][0]) for c in seg]])
        got = bucket_queue_end(t0, t1, buckets[seg][None, :].astype(float), bucket_s[seg][None, :])
        assert got[0] == pytest.approx(want[s], rel=1e-12)


@pytest.mark.parametrize("schedule,p,m,v", [("1f1b", 1, 5, 1), ("1f1b", 4, 9, 1), ("1f1b", 16, 40, 1),
                                            ("gpipe", 8, 12, 1), ("interleaved", 4, 8, 2), ("interleaved", 8, 24, 3)])
def test_dependency_depths_are_the_engines_unit_time_schedule(schedule, p, m, v):
    """An op's level is 1 + its longest chain of predecessors and producers: the end time the engine gives it when
    every op takes one second and sends take none."""
    from ultracluster.layouts.programs import depths, raw_arrays

    raw = raw_arrays(schedule, p, m, v)
    ones = np.ones((1, p * v))
    ex = execute(stage_programs(schedule, p, m, v), ones, ones, np.zeros(p * v), np.zeros(p * v))
    want = [float(ex.end[("B" if kind else "F", int(k), int(c))][0]) for kind, k, c in zip(raw.kind, raw.mb, raw.chunk)]
    assert depths(raw.pred, raw.dep, raw.start).tolist() == want


def test_a_deadlocked_program_is_caught():
    """Two stages each waiting for the other's second op: no order runs them."""
    from ultracluster.layouts.programs import depths

    with pytest.raises(AssertionError, match="deadlocked"):
        depths(np.array([-1, 0, -1, 2]), np.array([3, -1, 1, -1]), np.array([0, 2, 4]))


def test_rows_with_the_same_inputs_get_the_same_bits_as_alone():
    """Rows repeated (as layouts the pipeline cannot tell apart are) are run once; each row's times are those it
    gets timed alone."""
    rng = np.random.default_rng(11)
    p, v, rows = 4, 2, 3
    fwd = rng.uniform(0.5, 1.5, (rows, p * v))
    bwd = 2 * fwd
    sf, sb, sl = sends(rng, rows, p * v, 2)
    pick = np.array([2, 0, 2, 1, 0, 2])
    ms = np.array([8, 16, 8, 16, 16, 16])
    pt = pipeline_times("interleaved", p, v, ms, fwd[pick], bwd[pick], sf[pick], sb[pick], sl[pick])
    for r, (i, m) in enumerate(zip(pick, ms)):
        alone = pipeline_times("interleaved", p, v, np.array([m]), fwd[i:i + 1], bwd[i:i + 1], sf[i:i + 1],
                               sb[i:i + 1], sl[i:i + 1])
        assert np.array_equal(pt.stage_end[r], alone.stage_end[0])
        assert np.array_equal(pt.last_b_end[r], alone.last_b_end[0])
    assert not np.array_equal(pt.stage_end[0], pt.stage_end[5])      # the same times, more microbatches


def balanced(rng, rows, p, v, spread):
    """Every stage one light and one heavy chunk, its total within `spread` of the others' (as serial exchanges
    leave them: an interleaved stage's two chunks differ, their sums do not): a transient of hundreds of
    microbatches, so rows run longer and longer programs before they settle."""
    c = np.arange(p * v)
    heavy = (c % (2 * p) >= p // 2) & (c % (2 * p) < p + p // 2)
    fwd = (1.0 + 0.43 * heavy) * (1.0 + spread * rng.standard_normal((rows, p * v)))
    return fwd, 1.87 * fwd * (1.0 + spread * rng.standard_normal((rows, p * v)))


@pytest.mark.parametrize("schedule,p,v,spread,with_sends", [
    ("1f1b", 16, 1, 1e-4, False), ("1f1b", 16, 1, 1e-3, True), ("interleaved", 4, 2, 1e-4, False),
    ("interleaved", 8, 2, 1e-3, True), ("interleaved", 16, 2, 1e-4, False), ("interleaved", 8, 4, 1e-3, True)])
def test_runs_carried_on_block_by_block_are_the_longer_programs_bits(monkeypatch, schedule, p, v, spread,
                                                                      with_sends):
    """Rows that have not settled carry on from their short run (`layouts.stepping`) instead of running the longer
    program from its first op: every op from the same operands, so the same bits, rows of every length alike."""
    from ultracluster.layouts import schedules

    rng = np.random.default_rng(p * 10 + v)
    chunks, P = p * v, p if schedule == "interleaved" else 1
    ms = [P * g for g in (4, 16, 37, 64)] + ([300, 1024] if P == 1 else [])
    rows = len(ms)
    fwd, bwd = balanced(rng, rows, p, v, spread)
    sf, sb, sl = sends(rng, rows, chunks, 3) if with_sends else (np.zeros((rows, chunks)),) * 3
    carried = []
    real = schedules._carry_on
    monkeypatch.setattr(schedules, "_carry_on", lambda *a: carried.append(a[4].size) or real(*a))
    got = pipeline_times(schedule, p, v, np.array(ms), fwd, bwd, sf, sb, sl)
    monkeypatch.setattr(schedules, "CARRY_ON", False)
    want = pipeline_times(schedule, p, v, np.array(ms), fwd, bwd, sf, sb, sl)
    assert sum(carried) > 0
    for a, b in ((got.stage_end, want.stage_end), (got.last_b_end, want.last_b_end),
                 (got.last_b_start, want.last_b_start), (got.evaluated_microbatches, want.evaluated_microbatches)):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("schedule,p,v", [("1f1b", 2, 1), ("1f1b", 8, 1), ("1f1b", 64, 1), ("interleaved", 2, 4),
                                          ("interleaved", 8, 3), ("interleaved", 16, 2)])
def test_a_longer_program_is_the_short_one_with_blocks_inserted(schedule, p, v):
    """What `stepping` relies on, read off the engine's programs: the program of m0 + kP microbatches is m0's with
    k blocks inserted (`spliced`), and its settled check reads the blocks `cycle_blocks` says, as far back as
    `repeats` of the longer program has them."""
    from ultracluster.layouts.programs import cycle_blocks, repeats
    from ultracluster.layouts.schedules import run_lengths
    from ultracluster.layouts.stepping import spliced

    P = p if schedule == "interleaved" else 1
    for m0 in sorted({run_lengths(schedule, p, m, v)[0] for m in (1000 * P, 1000 * P + 3 * (P == 1))}):
        r0 = repeats(schedule, p, m0, v)
        assert r0 is not None
        for k in (1, 2, 5, 17, 40):
            m = m0 + k * P
            r = repeats(schedule, p, m, v)
            assert spliced(schedule, p, v, m0, m)
            assert (r.reach, r.blocks.shape[0]) == (r0.reach, cycle_blocks(r0.run + k, r0.reach, p))
        assert not spliced(schedule, p, v, m0, m0 + P + 1) or P == 1
