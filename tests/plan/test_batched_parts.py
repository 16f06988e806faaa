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


def test_a_degraded_layouts_comm_and_its_parts_in_one_pass_are_each_part_timed_alone():
    """An interval's settings of a degraded run: `batched_comm(slow=True)` runs the comm's pieces once over the
    settings of the layout and of each degraded part (each part's collectives on its own links); every field is
    what timing the layout, and each part on its own Evaluator (`Evaluator.slow`), gives: the same bits."""
    import dataclasses

    from ultracluster import load_scenario
    from ultracluster.cluster import build_cluster
    from ultracluster.layouts import batched_parts as bp
    from ultracluster.layouts.setting_times import _settings_table, degraded_parts_of, one_step
    from ultracluster.layouts.space import own_row

    one = one_step(load_scenario("scenarios/llama2-70b-tp32pp4-trn2-64.yaml",
                                 ["faults.degraded=[{instances: [1], efa_nics: 4}, {instances: [1], neuronlink_scale: 0.5}]"]))
    cal = build_cluster(one, 1).calibration
    cals = [cal, cal.with_(efa_efficiency=0.3), cal.with_(tensor_efficiency=0.5), cal.with_(launch_s_trn2=4e-5)]

    def parts():
        pr = steps.Evaluator(one, calibrations=tuple(cals), shared_last_sends=True, degraded=degraded_parts_of(one))
        table = _settings_table(own_row(one), pr.add_calibrations(cals))
        rows = steps.RowView(table)
        sh, srow = bp.shapes(pr, table, rows)
        g = bp.pipe_rows(pr, table)[0]
        return pr, rows, sh, srow, g, np.arange(g.rows.size)

    pr, *args = parts()
    merged, has, slows = bp.batched_comm(pr, *args, slow=True)
    pr, *args = parts()
    alone, has_alone = bp.batched_comm(pr, *args)
    parts_alone = [bp.batched_comm(s, *args)[0] for s in pr.slow()]
    assert len(slows) == len(parts_alone) == 2 and np.array_equal(has, has_alone)
    for got, want in zip([merged] + slows, [alone] + parts_alone):
        for f in dataclasses.fields(got):
            a, b = getattr(got, f.name), getattr(want, f.name)
            assert (a is None and b is None) or np.array_equal(a, b), f.name
    assert not np.array_equal(slows[0].dp_bucket_s, merged.dp_bucket_s)     # the degraded links slowed a part


def test_rows_alike_but_one_column():
    """`RowView.alike`: rows that agree in every column but one (an interval's settings of one layout), as their
    named tuples compare; a column the table holds one value in (`Columns.one_value`) is not read."""
    from ultracluster.layouts.columns import Columns

    table = pd.DataFrame({"tp": [8, 8, 8], "x": [0.5, 0.5, 0.5], "cal": [0, 1, 2], "pp": [1, 1, 2]})
    rows = steps.RowView(table)
    assert rows.alike([0, 1], "cal") and not rows.alike([0, 1, 2], "cal") and rows.alike([2], "cal")
    for x in ([1.0, 2.0, 1.0], [float("nan")] * 3):        # (a missing value is not one: NaN != NaN)
        other = steps.RowView(table.assign(x=x))
        assert not other.alike([0, 1], "cal") and not other[0]._replace(cal=0) == other[1]._replace(cal=0)
    cols = Columns({c: table[c].to_numpy() for c in table.columns}, one_value=frozenset({"tp", "pp"}))
    assert steps.RowView(cols).alike([0, 1, 2], "cal")        # pp is not read: the table says it holds one value


def test_an_intervals_settings_of_one_layout_keep_its_memory_row():
    """`steps._memory`: an interval's settings of one layout (every column but `cal` one value) have one HBM row,
    kept by the layout for the next settings: what `batched_memory` gives every row, whatever the calibration."""
    from ultracluster import load_scenario
    from ultracluster.cluster import build_cluster
    from ultracluster.layouts import batched_parts as bp
    from ultracluster.layouts.setting_times import _settings_table, one_step
    from ultracluster.layouts.space import own_row

    one = one_step(load_scenario("scenarios/mixtral-8x7b-trn2.yaml"))
    cal = build_cluster(one, 1).calibration
    pr = steps.Evaluator(one, calibrations=(cal,))
    for cals in ([cal, cal.with_(tensor_efficiency=0.5)], [cal.with_(runtime_reserve_gib=9.0), cal.with_(efa_efficiency=0.2)]):
        table = _settings_table(own_row(one), pr.add_calibrations(cals))
        rows = steps.RowView(table)
        sh, srow = bp.shapes(pr, table, rows)
        pipes = bp.pipe_rows(pr, table)
        got, want = steps._memory(pr, table, sh, srow, pipes), bp.batched_memory(pr, table, sh, srow, pipes)
        assert set(got) == set(want) and all(np.array_equal(got[k], want[k]) for k in want)
    assert sum(k[0] == "memory-row" for k in pr._shared) == 1          # kept once, for the layout


def test_a_setting_of_the_collective_factors_alone_keeps_its_clusters_rates():
    """`Evaluator.cluster` under a further calibration: the rank rates are the first calibration's where only the
    collective factors moved (`chip.rank_rates` reads none), else computed; either way `rank_rates` of its cluster."""
    from ultracluster import chip, load_scenario
    from ultracluster.cluster import build_cluster
    from ultracluster.layouts.setting_times import one_step

    one = one_step(load_scenario("scenarios/llama3.1-8b-128k-cp16-trn2.yaml"))
    cal = build_cluster(one, 1).calibration
    cals = [cal, cal.with_(efa_efficiency=0.3, launch_s_trn2=4e-5), cal.with_(efa_efficiency=0.3, tensor_efficiency=0.5)]
    pr = steps.Evaluator(one, calibrations=tuple(cals))
    c = one.cluster
    infos = [pr.cluster(c.instance, c.instances, c.lnc, i) for i in range(len(cals))]
    assert infos[1].rates is infos[0].rates and infos[2].rates is not infos[0].rates
    for info in infos:
        assert info.rates == chip.rank_rates(info.cluster, one.training.precision)
    assert infos[2].rates.tensor_flop_per_s < infos[0].rates.tensor_flop_per_s


def test_a_setting_equal_to_an_earlier_one_takes_its_index_and_shares_its_rates():
    """`Evaluator.add_calibrations`: a setting equal to an earlier one (an interval's grid point at its factor's
    central value, a copy holding an equal float) is given the first one's index, so a setting of the collective
    factors alone keeps that first cluster's rank rates (`_chip_alike` compares objects)."""
    from ultracluster import load_scenario
    from ultracluster.cluster import build_cluster
    from ultracluster.layouts.setting_times import one_step

    one = one_step(load_scenario("scenarios/llama3.1-8b-128k-cp16-trn2.yaml"))
    cal = build_cluster(one, 1).calibration
    copy = cal.with_(fp8_peak_scale_trn2=float(str(cal.fp8_peak_scale_trn2)))     # equal, another float object
    assert copy == cal and copy.fp8_peak_scale_trn2 is not cal.fp8_peak_scale_trn2
    net = cal.with_(efa_efficiency=0.3)
    pr = steps.Evaluator(one, calibrations=(cal, net, copy))
    assert pr.add_calibrations([copy, net, cal]).tolist() == [0, 1, 0]
    c = one.cluster
    infos = [pr.cluster(c.instance, c.instances, c.lnc, i) for i in (0, 1)]
    assert infos[1].rates is infos[0].rates


def test_distinct_rows_of_one_integer_column_are_factorizes():
    """`batched_parts.distinct_rows` with one integer column to read (an interval's `cal`) finds its codes without
    pandas: the same rows, first rows and dtype as `pd.factorize` then `np.unique` give, whatever the values' order."""
    from ultracluster.layouts.batched_parts import distinct_rows

    rng = np.random.default_rng(1)
    for _ in range(200):
        a = rng.integers(-3, int(rng.integers(1, 20)), size=int(rng.integers(1, 60)))
        which, firsts = distinct_rows(pd.DataFrame({"x": a, "y": np.ones(a.size)}), ("x", "y"))
        _, want_firsts, want = np.unique(pd.factorize(a)[0].astype(np.int64), return_index=True, return_inverse=True)
        assert np.array_equal(which, want.reshape(-1)) and np.array_equal(firsts, want_firsts)
        assert which.dtype == np.int64 and firsts.dtype == want_firsts.dtype
