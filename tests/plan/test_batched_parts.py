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
