"""Failures on a Ray cluster: a shard actor killed mid-run ends the run with an error naming its shard and
instances (exit 4, finished steps kept); a placement group that cannot be placed is a clear error, not a
hang; placement asks for `ultracluster_shard` (never `neuron_cores`) or the CPU-less fallback."""
import time
from contextlib import contextmanager

import pandas as pd
import pytest

from ultracluster import load_scenario, runner
from ultracluster.actors import launch
from ultracluster.cli import main
from ultracluster.cluster import build_cluster
from ultracluster.errors import EXIT_RUNTIME, ActorError, ScenarioError


def test_a_killed_actor_stops_the_run_naming_its_shard_and_keeping_finished_steps(
        ray_session, scenarios_dir, tmp_path, monkeypatch, capsys):
    """`ultracluster run` on the real actors of the shared local Ray; the actor of shard 1 is killed with
    `ray.kill` after two steps (warm-up + 1) have finished."""
    killed = []

    @contextmanager
    def launch_then_kill(scenario, cluster, address=None):
        with launch.launch_actors(scenario, cluster, address) as shards:
            shard_steps = shards.shard_steps

            def shard_steps_killing_on_third_step(step):
                if step == 2:
                    ray_session.kill(shards.actors[1])
                    killed.append(cluster.shards[1])
                return shard_steps(step)

            shards.shard_steps = shard_steps_killing_on_third_step
            yield shards

    monkeypatch.setattr(runner, "launch_actors", launch_then_kill)
    out = tmp_path / "run"
    rc = main(["run", str(scenarios_dir / "smoke.yaml"), "--out", str(out), "--quiet",
               "--set", "training.steps=4", "--set", "emulation.instances_per_actor=1"])
    err = capsys.readouterr().err
    assert killed and rc == EXIT_RUNTIME
    shard = killed[0]
    assert f"the actor for shard 1 (instances {shard.first_instance}-{shard.first_instance + shard.instances - 1})" \
        " died" in err
    assert "ray.kill" in err and "Traceback" not in err
    steps = pd.read_csv(out / "steps.csv")
    assert steps["step"].tolist() == [0, 1]
    assert not (out / "summary.json").exists()


def test_dead_actors_are_all_named():
    msg = launch.dead_actor_message([("shard 0 (instances 0-3)", "node died"), ("shard 2 (instances 8-11)", "x")])
    assert msg.startswith("2 actors died: shard 0 (instances 0-3) (node died); shard 2 (instances 8-11) (x)")


def test_bundles_use_our_resource_when_the_cluster_offers_enough_else_a_cpu_less_fallback():
    assert launch.shard_bundles(3, {"CPU": 2, "ultracluster_shard": 3}) == [{"ultracluster_shard": 1}] * 3
    fallback = launch.shard_bundles(4, {"CPU": 2, "ultracluster_shard": 3, "neuron_cores": 64})
    assert len(fallback) == 4
    for b in fallback:
        assert b == launch.FALLBACK_BUNDLE and "CPU" not in b and "neuron_cores" not in b


def test_an_unplaceable_placement_group_is_a_clear_error_not_a_hang(ray_session):
    """The shared local Ray has no `ultracluster_shard`: a group asking for it can never be placed."""
    t0 = time.monotonic()
    with pytest.raises(ActorError) as err:
        launch.place_shards([{"ultracluster_shard": 1}] * 3, timeout_s=1.0)
    assert time.monotonic() - t0 < 15
    msg = str(err.value)
    assert "could not place 3 shard actors within 1 s" in msg
    assert "{'ultracluster_shard': 1}" in msg and "SPREAD" in msg
    assert not [pg for pg in ray_session.util.placement_group_table().values() if pg["state"] == "PENDING"]


def test_actors_spread_with_a_placement_group_on_the_shared_ray(ray_session, scenarios_dir):
    sc = load_scenario(scenarios_dir / "smoke.yaml", ["emulation.instances_per_actor=1"])
    cl = build_cluster(sc, 1)
    with launch.launch_actors(sc, cl) as shards:
        assert shards.nodes == 1 and len(shards.node_ids) == len(cl.shards)
        assert shards.placement.startswith(str(launch.FALLBACK_BUNDLE))   # no ultracluster_shard here
        table = ray_session.util.placement_group_table()
        ours = [pg for pg in table.values() if pg["state"] == "CREATED" and pg["strategy"] == "SPREAD"]
        assert any(len(pg["bundles"]) == len(cl.shards) for pg in ours)
    assert not [pg for pg in ray_session.util.placement_group_table().values() if pg["state"] == "CREATED"]


def test_placement_timeout_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv(launch.PLACEMENT_TIMEOUT_ENV, "7.5")
    assert launch.placement_timeout_s() == 7.5
    monkeypatch.setenv(launch.PLACEMENT_TIMEOUT_ENV, "soon")
    with pytest.raises(ScenarioError) as err:
        launch.placement_timeout_s()
    assert err.value.problems[0].path == launch.PLACEMENT_TIMEOUT_ENV
    monkeypatch.delenv(launch.PLACEMENT_TIMEOUT_ENV)
    assert launch.placement_timeout_s() == launch.PLACEMENT_TIMEOUT_S


def test_auth_hint_says_what_to_set_in_one_line(monkeypatch, tmp_path):
    """The hint `ultracluster` prints when a cluster refuses it for want of its token (the refusal itself is run
    against a real token-authenticated cluster in test_cluster_multinode.py), for each way the token is missing."""
    from ultracluster.actors.launch import auth_hint

    monkeypatch.setenv("HOME", str(tmp_path))                     # no ~/.ray/auth_token here
    for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(k, raising=False)
    said = auth_hint("10.0.0.5:6379")
    assert "\n" not in said and said.startswith("the Ray cluster at 10.0.0.5:6379 requires its authentication token")
    assert "set RAY_AUTH_MODE=token (it is unset) and the cluster's token in RAY_AUTH_TOKEN_PATH=FILE" in said
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert "RAY_AUTH_MODE is token but no token was found" in auth_hint("h:1")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", "/etc/ray/token")
    assert "the token from RAY_AUTH_TOKEN_PATH=/etc/ray/token is not the cluster's" in auth_hint("h:1")


def test_a_missing_token_is_found_before_any_call_into_ray(monkeypatch, tmp_path):
    """Ray's order (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token): what Ray's token loader would abort on
    is said first (`actors.auth.token_missing`); a local Ray makes its own token, but not from an unreadable file."""
    from ultracluster.actors.auth import token_missing

    monkeypatch.setenv("HOME", str(tmp_path))
    for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(k, raising=False)
    assert token_missing("h:1") is None                              # no token mode: Ray's to answer
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert "no token was found" in token_missing("h:1") and token_missing(None) is None
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("\n")              # empty: no token
    assert "~/.ray/auth_token is empty" in token_missing("h:1")
    (tmp_path / ".ray" / "auth_token").write_text("abc\n")
    assert token_missing("h:1") is None
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "absent"))
    for address in ("h:1", None):
        assert "absent cannot be read (No such file or directory)" in token_missing(address)
    (tmp_path / "empty").write_text("")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "empty"))
    assert "is empty" in token_missing("h:1")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "xyz")                      # first in Ray's order
    assert token_missing("h:1") is None
