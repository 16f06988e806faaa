"""Actors sized to the machine: a run starts no more shard actors than the Ray cluster takes (its CPUs, and its
memory over each actor's measured footprint), folding more instances per actor when it must, which never
changes a result; an explicit `emulation.instances_per_actor` raised to fit says so in one line."""
from __future__ import annotations

import logging
import math

import pytest

from ultracluster import load_scenario, run
from ultracluster.actors import launch
from ultracluster.shards import worker as shard
from ultracluster.shards.local import local_shards
from ultracluster.cluster import Capacity, build_cluster, fold
from ultracluster.units import GIB, MIB


def smoke(scenarios_dir, instances: int, per_actor="1", *more: str):
    """smoke.yaml on `instances` instances (one replica per 16 ranks: the global batch follows)."""
    return load_scenario(scenarios_dir / "smoke.yaml", [f"cluster.instances={instances}",
                                                        f"training.global_batch={2 * instances}",
                                                        f"emulation.instances_per_actor={per_actor}", *more])


def test_an_actor_costs_its_measured_base_and_copies_of_its_payload(scenarios_dir):
    small = smoke(scenarios_dir, 4)
    big = smoke(scenarios_dir, 4, "1", "emulation.payload_scale=0.1")
    grown = shard.actor_bytes(big) - shard.actor_bytes(small)
    payloads = 8 * (shard.payload_elements(big, build_cluster(big, 4))
                    - shard.payload_elements(small, build_cluster(small, 4)))
    assert grown == pytest.approx(shard.ACTOR_PAYLOAD_COPIES * payloads) and payloads > 100 * MIB
    assert shard.actor_bytes(small) == pytest.approx(shard.ACTOR_BASE_BYTES + 10 * 8 * shard.payload_elements(
        small, build_cluster(small, 1)))


def test_the_cluster_takes_16_actors_per_cpu_and_their_footprints_within_half_its_memory():
    assert Capacity(cpus=2, memory_bytes=64 * GIB).max_actors(200 * MIB) == 32            # CPUs bound it
    assert Capacity(cpus=64, memory_bytes=10 * GIB).max_actors(1 * GIB) == 5              # memory bounds it
    assert Capacity(cpus=64, memory_bytes=1 * GIB).max_actors(4 * GIB) == 1               # never none


def test_an_explicit_setting_that_starts_too_many_actors_is_raised_with_one_note(scenarios_dir):
    sc = smoke(scenarios_dir, 256)
    need = shard.actor_bytes(sc)
    f = fold(sc, Capacity(cpus=2, memory_bytes=64 * GIB, where="this machine"), need)
    assert (f.instances_per_actor, f.actors) == (8, 32)
    assert "\n" not in f.note and f.note.startswith(
        "note: emulation.instances_per_actor 1 would start 256 actors, more than this machine takes (32: 2 CPUs, "
        "64.0 GiB free, ")
    assert f.note.endswith("folding 8 instances per actor instead (32 actors, the same results)")
    fits = fold(sc, Capacity(cpus=16, memory_bytes=1024 * GIB), need)                    # 256 actors fit
    assert (fits.instances_per_actor, fits.actors, fits.note) == (1, 256, None)
    assert fold(sc, None) == fits                                                        # in-process: no bound
    few = fold(smoke(scenarios_dir, 256, "64"), Capacity(cpus=2, memory_bytes=64 * GIB), need)
    assert (few.instances_per_actor, few.actors, few.note) == (64, 4, None)              # already fewer: kept


def test_memory_folds_auto_too_and_an_ultraserver_is_never_split(scenarios_dir):
    sc = load_scenario(scenarios_dir / "rainier-131k.yaml")                   # 8,192 trn2u in UltraServers of 4
    need = shard.actor_bytes(sc)
    tight = Capacity(cpus=8, memory_bytes=2.5 * need)                         # room for 2 actors (half of it: 1.25)
    assert tight.max_actors(need) == 1
    assert fold(sc, tight, need).actors == 1 and fold(sc, Capacity(cpus=8, memory_bytes=1e15), need).actors == 16
    raised = fold(load_scenario(scenarios_dir / "rainier-131k.yaml", ["emulation.instances_per_actor=1"]),
                  Capacity(cpus=3, memory_bytes=1e15), need)                 # at most 48 actors
    assert raised.instances_per_actor % 4 == 0 and raised.actors <= 48
    assert raised.instances_per_actor == 4 * math.ceil(2048 / 48) and raised.note


def test_a_run_on_ray_starts_no_more_actors_than_the_cluster_takes_and_gives_the_same_numbers(
        ray_session, scenarios_dir, monkeypatch, caplog):
    """Real actors on the session's Ray, told it takes 4 actors (its memory, over the measured footprint):
    48 instances asked at one per actor run on 4 actors of 12, with one note, and the summary is the in-process
    summary of one actor per instance."""
    sc = smoke(scenarios_dir, 48, "1", "training.steps=1")
    need = shard.actor_bytes(sc)
    monkeypatch.setattr(launch, "cluster_capacity", lambda: Capacity(cpus=2, memory_bytes=8 * need + 1))
    with caplog.at_level(logging.WARNING, logger="ultracluster.emulate"):
        rep = run(sc)
    notes = [r.getMessage() for r in caplog.records if "instances_per_actor" in r.getMessage()]
    assert len(notes) == 1 and "would start 48 actors" in notes[0] and "12 instances per actor" in notes[0]
    assert rep.emulation["actors"] == 4
    alone = run(sc, shards_factory=local_shards)                # 48 in-process shards: no bound
    assert alone.emulation["actors"] == 48
    keys = [k for k, v in rep.summary.items() if isinstance(v, (int, float)) and k != "ray_nodes"]
    assert {k: rep.summary[k] for k in keys} == {k: alone.summary[k] for k in keys}
