"""What a plan says of each layout against the evidence (searched in this process, no replays): every row's
`extrapolated` and `mfu_implausible` as `run` gives them, the 80 % interval of the rows that can rank equal to the
run's for the same layout, ranking by the pessimistic end (`--rank-by`) exact although it prices only the rows
that can rank, each row against the scenario's own layout, and the newcomer's 70B plan on 32 trn1."""
from __future__ import annotations

import numpy as np
import pytest

from ultracluster import load_scenario
from ultracluster.cli import main
from ultracluster.layouts import ranking
from ultracluster.layouts.space import SearchSpace
from ultracluster.runner import predict
from ultracluster.plan import plan
from ultracluster.layouts.intervals import LayoutEvidence
from ultracluster.plan.output import scenario_dict
from ultracluster.uncertainty import evidence, half_width, mfu_best

SEVEN_B = {"name": "plan-7b-iv", "model": {"preset": "llama2-7b"},
           "training": {"seq_len": 4096, "global_batch": 64, "steps": 1, "warmup_steps": 0},
           "parallelism": {"tp": 8}, "cluster": {"instance": "trn1.32xlarge", "instances": 2}}
SMALL = SearchSpace(micro_batches=(1, 2), virtual_stages=(2,))
# the plan times the interval's corners with the last microbatch's gradient sends timed alone, as its search
# does; the run shares their links with the first gradient buckets (docs/plan.md, "Where it is exact"): over the
# 70B sweep that moves a bound by 2e-7 relative
INTERVAL_RTOL = 1e-5


@pytest.fixture(scope="module")
def seven_b():
    return load_scenario(SEVEN_B)


@pytest.fixture(scope="module")
def low_and_all(seven_b):
    """The default plan (pessimistic end, only the rows that can rank priced) and one that prices every
    eligible row's interval (the optimistic end needs them all)."""
    return plan(seven_b, SMALL, replay=False, top=4), plan(seven_b, SMALL, replay=False, top=4, rank_by="high")


def test_a_plan_rows_interval_and_flags_are_the_runs(seven_b, low_and_all):
    result, _ = low_and_all
    t = result.table
    rows = t[t["rank"].notna() | t["scenario_layout"] | (t["pareto"] & t["step_time_high_s"].notna())]
    assert len(rows) >= 5
    flagged = 0
    for _, r in rows.head(6).iterrows():
        s = predict(load_scenario(scenario_dict(seven_b, r, "check")), intervals=True)
        # the interval is the run's around each one's point: the fast path's, within its approximations (1 %,
        # docs/plan.md), and the run's replayed step
        assert s["step_time_s"] == pytest.approx(r["step_time_s"], rel=0.01)
        for end in ("step_time_low_s", "step_time_high_s"):
            assert r[end] / r["step_time_s"] == pytest.approx(s[end] / s["step_time_s"], rel=INTERVAL_RTOL)
        assert r["tokens_per_s_low"] / r["tokens_per_s"] == pytest.approx(s["tokens_per_s_low"] / s["tokens_per_s"],
                                                                          rel=INTERVAL_RTOL)
        assert [a for a in r["extrapolated"].split(",") if a] == s["extrapolated"]
        # the same rule on each one's MFU (the fast path's and the run's differ as their steps do)
        best = mfu_best("trainium")
        assert bool(r["mfu_implausible"]) == (r["mfu"] > best)
        if (r["mfu"] > best) == (s["mfu"] > best):
            assert bool(r["mfu_implausible"]) == s["mfu_implausible"]
        flagged += bool(r["mfu_implausible"])
    assert 0 < flagged < 6
    # the flags are on every row, the interval on the rows that can rank
    assert t["extrapolated"].notna().all() and t["mfu_implausible"].dtype == bool
    assert (t["extrapolated"] == "").any() and t.loc[t["tp"] < 4, "extrapolated"].str.contains("tp").all()
    assert t["step_time_high_s"].isna().any()


def test_ranking_by_the_pessimistic_end_is_exact_while_timing_few_rows(low_and_all):
    low, every = low_and_all
    assert low.summary["rank_by"] == "low" and every.summary["rank_by"] == "high"
    t_all = every.table
    eligible = ranking.eligible(t_all, "tokens_per_s", None)
    assert t_all.loc[eligible, "step_time_high_s"].notna().all()                   # `high` timed every one
    assert low.summary["intervals_timed"] < eligible.sum() / 4                     # `low` only those that can rank
    assert low.summary["intervals_priced"] == low.summary["intervals_timed"]       # the old name, for one release
    # the same ranking computed from every row's interval
    full = ranking.ranked(t_all, "tokens_per_s", None, "low")
    assert [r["label"] for r in low.top] == full["layout"].head(4).tolist()
    assert [r["label"] for r in low.summary["best_per_type"]] == \
        full.drop_duplicates("instance")["layout"].tolist()
    for r in low.top:                                                            # what ranked it, beside the point
        assert r["rank_value"] == pytest.approx(r["tokens_per_s_low"]) and r["rank_value"] < r["tokens_per_s"]
    values = [r["rank_value"] for r in low.top]
    assert values == sorted(values, reverse=True)
    high = [r["label"] for r in every.top]
    assert high == ranking.ranked(t_all, "tokens_per_s", None, "high")["layout"].head(4).tolist()
    assert [r["rank_value"] for r in every.top] == pytest.approx([r["tokens_per_s_high"] for r in every.top])


def test_each_row_against_the_scenarios_own_layout(low_and_all):
    result, _ = low_and_all
    t = result.table
    own = t[t["scenario_layout"]].iloc[0]
    assert own["vs_scenario"] == "the scenario's own layout"
    assert result.summary["scenario_layout"]["label"] == own["layout"]
    n = 0
    for _, r in t[t["step_time_high_s"].notna() & ~t["scenario_layout"]].iterrows():
        pct = 100 * (own["step_time_s"] / r["step_time_s"] - 1)
        assert r["vs_scenario_pct"] == pytest.approx(pct)
        apart = r["step_time_high_s"] < own["step_time_low_s"] or r["step_time_low_s"] > own["step_time_high_s"]
        word = "faster" if pct > 0 else "slower"
        expect = f"({'intervals apart: a finding' if apart else 'intervals overlap: not a finding'})"
        assert r["vs_scenario"].endswith(expect) and (word in r["vs_scenario"] or "as fast" in r["vs_scenario"])
        n += 1
    assert n >= 4
    assert all(r["vs_scenario"] for r in result.top)


def test_a_scenario_layout_that_does_not_fit_is_said_so():
    sc = load_scenario({**SEVEN_B, "name": "plan-7b-tp1", "parallelism": {"tp": 1}})
    result = plan(sc, SearchSpace(tp=(1, 8), micro_batches=(1,), virtual_stages=(2,)), replay=False, top=2)
    own = result.summary["scenario_layout"]
    assert own["feasible"] is False and own["comparison"].startswith("the scenario's own layout does not fit: ")
    assert result.top and all(r["vs_scenario"] is None for r in result.top)
    from ultracluster.plan import format_plan
    assert own["comparison"] in format_plan(result)


def test_a_bad_rank_by_is_one_line_and_exit_2(scenarios_dir, tmp_path, capsys):
    rc = main(["plan", str(scenarios_dir / "smoke.yaml"), "--rank-by", "pessimistic", "--out", str(tmp_path / "p")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert err[0].startswith("error: --rank-by: given 'pessimistic'; allowed: one of: low (the pessimistic end")
    assert not (tmp_path / "p").exists()


def test_the_newcomers_70b_winner_is_ranked_by_its_slow_end_alone(scenarios_dir):
    """Llama-3.1-70B, seq 8192, 1,024 sequences per step on 32 trn1.32xlarge with NeuronX Distributed (the
    scenario's stack): every layout is one NxD runs, the winner is the eligible row with the best pessimistic end
    whatever its MFU flag, no unpriced row could have beaten it, and the scenario's own layout ranks no better."""
    base = load_scenario(scenarios_dir / "llama3.1-70b-trn1-32.yaml")
    result = plan(base, replay=False, top=3)
    t = result.table
    assert set(t["stack"]) == {"neuronx-distributed"} and not ((t["zero"] == 3) & (t["pp"] > 1)).any()
    win = result.top[0]
    assert result.summary["rank_by"] == "low" and win["stack"] == "neuronx-distributed"
    assert win["rank_value"] == pytest.approx(win["tokens_per_s_low"])
    elig = t[ranking.eligible(t, "tokens_per_s", None)]
    priced = elig[elig["tokens_per_s_low"].notna()]
    assert win["tokens_per_s_low"] == pytest.approx(priced["tokens_per_s_low"].max())      # no row demoted
    # every row left unpriced could not have beaten it: even its point at its own half-width without the factors
    # (the fit's and the releases', widened by its extrapolated axes and an unseen cell) is below the winner's
    again = t.copy()
    LayoutEvidence(base).flags(again)
    unpriced = again[ranking.eligible(again, "tokens_per_s", None) & again["tokens_per_s_low"].isna()]
    assert len(unpriced) > 100
    assert (unpriced["tokens_per_s"] * np.exp(-half_width(evidence(), unpriced["_axes"].to_numpy(),
                                                          unpriced["_growth"].to_numpy()))
            < win["tokens_per_s_low"]).all()
    own = result.summary["scenario_layout"]
    assert own["feasible"] and own["standing"].startswith("ranks #")
    assert win["tokens_per_s_low"] >= own["tokens_per_s_low"]
