"""Bounded, visible planner work: instance counts beyond the catalog's largest cluster and a --top beyond its
bound exit 2 at once; a search too large for --max-search-minutes is refused before it starts, with its size and
what to narrow; its size is counted without building it; the Ray pieces follow the clusters; the replays'
top-N.yaml never carries a folding meant for another cluster size; the phases show progress."""
from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from ultracluster import load_scenario
from ultracluster.cli import main
from ultracluster.cluster.catalog import INSTANCES, largest_cluster
from ultracluster.layouts import ranking
from ultracluster.plan import MAX_TOP
from ultracluster.plan.output import scenario_dict
from ultracluster.layouts.space import SearchSpace, clusters, count_layouts, enumerate_layouts
from ultracluster.report.progress import WorkProgress

REPO = Path(__file__).resolve().parents[2]


def plan_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`ultracluster plan` in its own process: a hang becomes a failure, and everything it prints is counted."""
    return subprocess.run([sys.executable, "-m", "ultracluster", "plan", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def test_the_largest_clusters_come_from_the_catalog():
    assert largest_cluster(INSTANCES["trn1.32xlarge"]) == 1_875        # 30,000 Trainium chips, 16 per instance
    assert largest_cluster(INSTANCES["trn2.48xlarge"]) == 31_250       # Project Rainier: 500,000 Trainium2 chips
    assert largest_cluster(INSTANCES["trn2u.48xlarge"]) >= 8_192       # the shipped rainier-131k scenario fits


@pytest.mark.parametrize("flags, says", [
    (["--instances", "100000000"], "error: --instances: given 100000000; allowed: instance counts up to 1,875 for "
                                   "trn1.32xlarge (the catalog's largest trainium cluster: 30,000 chips, "
                                   "16 per instance)"),
    (["--instances", "2,1876"], "error: --instances: given 1876; allowed: instance counts up to 1,875"),
    (["--top", "100000"], f"error: --top: given 100000; allowed: an integer from 1 to {MAX_TOP} "),
    (["--max-search-minutes", "0"], "error: --max-search-minutes: given 0.0; allowed: a number of minutes > 0"),
])
def test_out_of_bounds_flags_exit_2_at_once_in_one_line(flags, says, tmp_path):
    done = plan_cli("scenarios/smoke.yaml", "--out", str(tmp_path / "plan"), *flags)
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and done.stderr.count("\n") == 1 and done.stderr.startswith(says), done.stderr
    assert not (tmp_path / "plan").exists()


def test_a_search_too_large_for_its_time_is_refused_before_it_starts_with_what_to_narrow(tmp_path, capsys):
    counts = ",".join(str(n) for n in range(1, 201))
    rc = main(["plan", str(REPO / "scenarios" / "smoke.yaml"), "--instances", counts, "--max-search-minutes", "0.05",
               "--out", str(tmp_path / "plan")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    m = re.search(r"allowed: a search that ends within --max-search-minutes 0.05: this one has ([\d,]+) layouts in "
                  r"its first (\d+) of 200 clusters \(about ([\d,]+) in all\), about .* at ([\d,]+) layouts/s "
                  r"\(\d+ CPUs?\)\. Ask for fewer instance counts \(a few sizes, e\.g\. ([\d,]+)\) or instance "
                  r"types, or allow it with --max-search-minutes (\d+)$", err.strip())
    assert m, err
    layouts, first, total, rate = (int(m.group(i).replace(",", "")) for i in (1, 2, 3, 4))
    assert layouts > 0.05 * 60 * rate and first < 200                     # counted past the budget, then stopped
    assert total == round(layouts * 200 / first)
    suggested = [int(c) for c in m.group(5).split(",")]
    assert 2 <= len(suggested) <= 5 and suggested[0] == 1 and suggested[-1] == 200
    assert int(m.group(6)) >= total / rate / 60
    assert not (tmp_path / "plan").exists()


@pytest.mark.parametrize("name, counts", [("smoke.yaml", (1, 2, 3, 8, 64, 300)),
                                          ("mixtral-8x7b-trn2.yaml", None),
                                          ("llama3.1-405b-trn2-16k.yaml", (64, 1024))])
def test_the_layouts_are_counted_without_building_them(scenarios_dir, name, counts):
    base = load_scenario(scenarios_dir / name)
    space = SearchSpace(instance_counts=counts)
    n, counted = count_layouts(base, space)
    assert len(enumerate_layouts(base, space)) - n in (0, 1)             # enumerate may add the scenario's own
    assert n > 1000 and counted == len(clusters(base, space))
    early, first = count_layouts(base, space, stop_above=10)
    assert n >= early > 10 and first == 1                                # stops once past the bound


def test_ray_pieces_follow_the_clusters_and_cover_the_table_once(scenarios_dir):
    table = enumerate_layouts(load_scenario(scenarios_dir / "smoke.yaml"), SearchSpace(instance_counts=(1, 2, 4, 8)))
    for pieces in (1, 4, 20):
        cut = ranking.blocks(table, pieces)
        assert len(cut) >= pieces
        assert [len(c) for c in cut] == sorted((len(c) for c in cut), reverse=True)
        assert all(len(c[["instance", "instances", "lnc"]].drop_duplicates()) == 1 for c in cut if len(c) > 1)
        rows = np.concatenate([c.index.to_numpy() for c in cut])
        assert np.array_equal(np.sort(rows), table.index.to_numpy())
    clusters_ = len(table[["instance", "instances", "lnc"]].drop_duplicates())
    assert len(ranking.blocks(table, 1)) == clusters_                 # a cluster is never cut for nothing
    for c in ranking.blocks(table, 20):                               # each in pipeline-shape order
        shape = c["pp"].to_numpy() * 100 + c["virtual_stages"].to_numpy()
        assert (np.diff(shape) >= 0).all()


def test_a_top_layout_of_another_cluster_folds_for_its_own_size(scenarios_dir):
    base = load_scenario(scenarios_dir / "smoke.yaml")                # instances_per_actor: 1 on 2 instances
    table = enumerate_layouts(base, SearchSpace(instance_counts=(2, 256)))
    same = table[table["instances"] == 2].iloc[0]
    other = table[table["instances"] == 256].iloc[0]
    assert scenario_dict(base, same, "x")["emulation"]["instances_per_actor"] == 1
    d = scenario_dict(base, other, "y")
    assert d["emulation"]["instances_per_actor"] == "auto" and d["cluster"]["instances"] == 256
    assert load_scenario(d).emulation.instances_per_actor == "auto"
    assert yaml.safe_load(yaml.safe_dump(d))["emulation"]["instances_per_actor"] == "auto"


class FakeClock:
    def __init__(self):
        self.t = 50.0

    def __call__(self) -> float:
        return self.t


def test_progress_off_a_terminal_a_line_per_phase_and_every_ten_seconds_with_the_time_left():
    out, clock = io.StringIO(), FakeClock()
    p = WorkProgress("plan smoke", stream=out, tty=False, clock=clock, every_s=10.0)
    p.phase("evaluating", 40_000)
    clock.t += 4.0
    p.advance(8_000)                                                   # before 10 s: nothing
    clock.t += 6.0
    p.advance(10_000)                                                  # 10 s: 1,000/s, 30,000 left
    clock.t += 5.0
    p.say("plan: a message")
    p.advance(40_000)
    p.phase("replaying", 2)
    clock.t += 30.0
    p.advance(1)
    clock.t += 30.0
    p.advance(2)
    p.finish()
    assert out.getvalue().splitlines() == [
        "plan smoke: evaluating 40,000 layouts",
        "plan smoke: evaluating: 10,000/40,000 layouts (25%), 1,000/s, about 30 s left",
        "plan: a message",
        "plan smoke: evaluating: 40,000 layouts in 15.0 s",
        "plan smoke: replaying 2 layouts",
        "plan smoke: replaying: 1/2 layouts (50%), 30.0 s each, about 30 s left",
        "plan smoke: replaying: 2 layouts in 60.0 s"]


def test_progress_on_a_terminal_is_one_bar_with_the_count_the_rate_and_the_time_left(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    out, clock = io.StringIO(), FakeClock()
    p = WorkProgress("plan smoke", stream=out, tty=True, delay_s=2.0, tick_s=None, clock=clock)
    p.phase("enumerating", 1_000_000)
    assert out.getvalue() == ""                                        # nothing in the first 2 s
    clock.t += 3.0
    p.phase("evaluating", 1_000_000)
    assert out.getvalue().split("\r\033[K")[-1].startswith("plan smoke | evaluating [........................] "
                                                           "0/1,000,000 layouts | estimating ")
    clock.t += 100.0
    p.advance(250_000)
    assert out.getvalue().split("\r\033[K")[-1] == (
        "plan smoke | evaluating [######..................] 250,000/1,000,000 layouts | 2,500/s, about 5.0 min left "
        "| 103.0 s")
    p.say("plan: a message")                                          # the bar is erased first
    assert out.getvalue().endswith("\r\033[Kplan: a message\n")
    p.advance(500_000)                                                # and drawn again
    p.finish()
    assert "\n" not in out.getvalue().replace("plan: a message\n", "") and out.getvalue().endswith("\r\033[K")


def test_a_plan_says_each_phase_with_its_count(ray_session, scenarios_dir, tmp_path, capsys):
    assert main(["plan", str(scenarios_dir / "smoke.yaml"), "--top", "1", "--out", str(tmp_path / "plan")]) == 0
    err = capsys.readouterr().err.splitlines()
    full = tmp_path / "plan" / "plan-full.parquet"                    # every layout priced (plan.csv: the best)
    n = len(pd.read_parquet(full) if full.exists() else pd.read_csv(tmp_path / "plan" / "plan-full.csv.gz"))
    counted, _ = count_layouts(load_scenario(scenarios_dir / "smoke.yaml"))
    assert err[0] == f"plan smoke: enumerating {counted:,} layouts" and n - counted in (0, 1)
    assert f"plan smoke: evaluating {n:,} layouts" in err
    assert any(re.fullmatch(rf"plan smoke: evaluating: {n:,} layouts in \d+\.\d s", line) for line in err)
    assert "plan smoke: replaying 1 layout" in err
    assert re.fullmatch(r"plan smoke: replaying: 1 layout in \d+\.\d s", err[-1])
