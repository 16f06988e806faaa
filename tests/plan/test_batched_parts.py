"""What the fast path computes differently from `run`: each stage's peak activations read off the held-microbatch
vectors of a short program (`batched_parts.program_counts`) where `run` walks the executed one, and a layout's numbers that do
not depend on the batch it is priced in. The parts themselves are one implementation (`memory`, `chip`,
`replay.comm`), which `run` calls with a batch of one; tests/plan/test_steps_vs_run.py checks the whole step."""
import numpy as np
import pandas as pd
import pytest

from ultracluster.layouts import steps
from ultracluster.layouts.ranking import evaluate_block
from ultracluster.layouts.space import SearchSpace, enumerate_layouts


def test_in_flight_vectors_give_the_executed_schedules_peak(dense):
    """The planner reads each stage's peak activations off the held-microbatch vectors of a short program; `run`
    (`memory.in_flight_peak`) off those of the executed one; both equal the walk of the executed program (each
    forward adds its chunk's bytes, its backward frees them), written out here."""
    from ultracluster.memory import in_flight_peak
    from ultracluster.replay.schedule import stage_programs

    rng = np.random.default_rng(3)
    for schedule, p, m, v in (("1f1b", 4, 64, 1), ("interleaved", 4, 64, 2), ("interleaved", 3, 30, 3),
                              ("gpipe", 3, 7, 1), ("gpipe", 8, 300, 1), ("1f1b", 64, 1024, 1), ("1f1b", 8, 5, 1),
                              ("interleaved", 8, 256, 4)):
        act = rng.uniform(1.0, 5.0, p * v)
        counts = steps.program_counts(schedule, p, m, v)
        for s, prog in enumerate(stage_programs(schedule, p, m, v)):
            want = max(0.0, np.cumsum([act[c] if kind == "F" else -act[c] for kind, _, c in prog]).max())
            assert in_flight_peak(prog, act) == pytest.approx(want, rel=1e-12)
            assert (counts[s] @ act[s::p]).max() == pytest.approx(want, rel=1e-12)


def test_blocks_do_not_change_any_number(dense):
    """The numbers of a layout depend on it alone: priced in one piece or in many, the same bits (what makes a
    plan the same on one node or many)."""
    table = enumerate_layouts(dense, SearchSpace(micro_batches=(1, 2), virtual_stages=(2,)))
    whole = evaluate_block(dense, None, {p: "batched" for p in steps.PARTS}, table, steps.Evaluator(dense))
    parts = pd.concat([evaluate_block(dense, None, {p: "batched" for p in steps.PARTS}, table.iloc[lo:lo + 97],
                                      steps.Evaluator(dense)) for lo in range(0, len(table), 97)])
    pd.testing.assert_frame_equal(whole, parts, check_exact=True)


def test_one_layout_under_many_calibrations_is_each_row_s_own():
    """Rows that are one layout under several calibrations (an interval's settings) time the step's comm pieces
    once for all (`batched_parts._units`); rows of layouts that differ in any column (here the micro-batch) each
    their own: a table of both, in one evaluation, gives each row what it gives alone."""
    from ultracluster import load_scenario
    from ultracluster.layouts.setting_times import layout_step_times, one_step
    from ultracluster.layouts.space import own_row

    one = one_step(load_scenario("scenarios/mixtral-8x7b-trn2.yaml"))
    row = own_row(one)
    rows = pd.DataFrame([row, {**row, "micro_batch": 2 * row["micro_batch"]}])
    cal = steps.Evaluator(one).calibration
    cals = [cal, cal.with_(efa_efficiency=0.3), cal.with_(tensor_efficiency=0.5, reduce_step_s=1e-4)]
    which = np.array([[0, 1, 2], [2, 1, 0]])
    both = layout_step_times(one, rows, cals, which)
    settings = [layout_step_times(one, rows.iloc[[i]], cals, which[i:i + 1])[0] for i in range(2)]
    for i in range(2):
        for j in range(3):
            alone = layout_step_times(one, rows.iloc[[i]], [cals[which[i, j]]], np.zeros((1, 1), dtype=int))
            assert both[i, j] == alone[0, 0] == settings[i][j]
