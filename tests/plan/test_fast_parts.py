"""Each part the fast path batches equals the replay's own function on every sampled layout: HBM per stage
(`memory.stage_memory`), chunk times (`chip.chunk_times`), the communication plan (`replay.engine.plan_comm`).
When the model changes and a batched part no longer matches, this test names the part (and `plan` falls back
to the function itself for it, see test_plan_falls_back_to_the_replay_functions)."""
import numpy as np
import pandas as pd
import pytest

from ultracluster.layouts import fast
from ultracluster.layouts.search import evaluate_chunk, sample_rows
from ultracluster.layouts.space import SearchSpace, enumerate_layouts


def spread(table: pd.DataFrame, n: int, seed: int = 0) -> pd.DataFrame:
    """n rows of the table: every pipeline schedule, cp and ZeRO stage represented, the rest at random."""
    picks = set(sample_rows(table, most=20))
    rng = np.random.default_rng(seed)
    picks |= set(rng.choice(len(table), size=min(n, len(table)), replace=False).tolist())
    return table.iloc[sorted(picks)]


@pytest.mark.parametrize("name", ["dense", "dense_trn2", "moe"])
def test_batched_parts_equal_the_replay_functions(name, request):
    base = request.getfixturevalue(name)
    table = spread(enumerate_layouts(base), 24)
    pr = fast.Pricer(base, shared_last_sends=True)
    assert fast.compare_parts(pr, table) == {"memory": None, "chunks": None, "comm": None}


def test_in_flight_vectors_give_the_executed_schedules_peak(dense):
    """The memory part reads each stage's peak activations off the held-microbatch vectors of a short program;
    `memory.in_flight_peak` walks the full one."""
    from ultracluster.memory import in_flight_peak
    from ultracluster.replay.schedule import stage_programs

    rng = np.random.default_rng(3)
    for schedule, p, m, v in (("1f1b", 4, 64, 1), ("interleaved", 4, 64, 2), ("interleaved", 3, 30, 3),
                              ("gpipe", 3, 7, 1), ("gpipe", 8, 300, 1), ("1f1b", 64, 1024, 1), ("1f1b", 8, 5, 1),
                              ("interleaved", 8, 256, 4)):
        act = rng.uniform(1.0, 5.0, p * v)
        counts = fast._counts(schedule, p, m, v)
        for s, prog in enumerate(stage_programs(schedule, p, m, v)):
            want = in_flight_peak(prog, act)
            assert (counts[s] @ act[s::p]).max() == pytest.approx(want, rel=1e-12)


def test_chunks_do_not_change_any_number(dense):
    """The numbers of a layout depend on it alone: priced in one piece or in many, the same bits (what makes a
    plan the same on one node or many)."""
    table = enumerate_layouts(dense, SearchSpace(micro_batches=(1, 2), virtual_stages=(2,)))
    whole = evaluate_chunk(dense, None, {p: "batched" for p in fast.PARTS}, table, fast.Pricer(dense))
    parts = pd.concat([evaluate_chunk(dense, None, {p: "batched" for p in fast.PARTS}, table.iloc[lo:lo + 97],
                                      fast.Pricer(dense)) for lo in range(0, len(table), 97)])
    pd.testing.assert_frame_equal(whole, parts, check_exact=True)


def test_plan_falls_back_to_the_replay_functions(dense):
    """A part whose batched form disagrees is evaluated with the replay's function, and the numbers follow it."""
    table = enumerate_layouts(dense, SearchSpace(micro_batches=(1,), recompute=("selective",), zero=(1,)))
    batched = fast.evaluate(fast.Pricer(dense, shared_last_sends=True), table)
    functions = fast.evaluate(fast.Pricer(dense, sources={p: "per layout" for p in fast.PARTS}), table)
    ok = batched["feasible"].to_numpy()
    assert ok.any()
    np.testing.assert_array_equal(batched["feasible"], functions["feasible"])
    np.testing.assert_allclose(batched["hbm_peak_gib"], functions["hbm_peak_gib"], rtol=1e-9)
    np.testing.assert_allclose(batched["step_time_s"][ok], functions["step_time_s"][ok], rtol=1e-9)
