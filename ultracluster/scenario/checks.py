"""Cross-field rules: validated scenario sections -> list of ``Problem`` (arithmetic that cannot hold).

Each rule is a pure function over the sections that parsed (a section that failed validation is passed
as None and the rules needing it are skipped), so one pass reports as much as possible. A layout that is
well formed but cannot run (does not fit in HBM, ...) is not a problem here: the memory model reports it
as an infeasible result.
"""

from __future__ import annotations

from typing import Any

from ultracluster.cluster.catalog import (INSTANCES, ULTRASERVERS, largest_cluster, largest_cluster_text,
                                          ranks_per_instance, ultraserver_of)
from ultracluster.errors import Problem
from ultracluster.step.counts import microbatches

from .schema import ClusterSpec, FaultsSpec, ModelSpec, ParallelismSpec, TrainingSpec


def check(
    model: ModelSpec | None,
    training: TrainingSpec | None,
    parallelism: ParallelismSpec | None,
    cluster: ClusterSpec | None,
    *,
    dp_given: bool = True,
    faults: FaultsSpec | None = None,
) -> list[Problem]:
    """Runs every cross-field rule on the sections that parsed.

    Args:
        model: the ``model`` section, or None if it did not parse.
        training: the ``training`` section, or None.
        parallelism: the ``parallelism`` section, or None.
        cluster: the ``cluster`` section, or None.
        dp_given: whether the scenario gave ``parallelism.dp``; if not, ``dp`` was derived (or, when ranks are
            not divisible by tp*pp*cp, holds a placeholder that the rules ignore).
        faults: the ``faults`` section, or None (absent or did not parse).

    Returns:
        Every problem found, in section order.
    """
    problems = []
    if model is not None:
        problems += check_model(model)
    if cluster is not None:
        problems += check_cluster(cluster)
    if training is not None and cluster is not None:
        problems += check_precision(training, cluster)
    if training is not None and training.budget_tokens is not None and training.budget_steps is not None:
        problems.append(Problem("training.budget_steps", training.budget_steps,
                                f"absent with training.budget_tokens {training.budget_tokens:g} (the budget in "
                                f"tokens or in steps, not both)"))
    if parallelism is not None:
        problems += check_layout(model, training, parallelism, cluster, dp_given=dp_given)
    if faults is not None and cluster is not None:
        problems += check_degraded(faults, cluster)
    return problems


# What the emulator answers in reasonable time and memory. A run replays every microbatch of every pipeline chunk
# of every step (about 84 us a pass, a chunk's forward and backward of one microbatch, on one core: smoke.yaml with
# 262,144 microbatches per replica and pp 2, 44 s a step), so a run's steps and passes are bounded (at most about 3
# minutes of replay); the sizes are
# bounded well above any published model (Llama 3.1 405B: 126 layers, hidden 16,384, ffn 53,248, vocab 128,256;
# Rainier-131k's 131,072-token sequences) so that no product of them leaves float64's exact integers.
MAX_REPLAYED_STEPS = 10_000               # training.steps + warmup_steps
MAX_PASSES = 1 << 21                      # (steps + warmup) x microbatches per replica x pp x virtual_stages
SIZE_BOUNDS = {                           # key -> (most, what it counts)
    "model.layers": (4096, "layers"),
    "model.hidden": (1 << 20, "elements per token"),
    "model.heads": (1 << 16, "heads"),
    "model.kv_heads": (1 << 16, "heads"),
    "model.ffn": (1 << 22, "elements per token"),
    "model.vocab": (1 << 24, "tokens"),
    "model.moe.experts": (1 << 16, "experts"),
    "training.seq_len": (1 << 22, "tokens"),
    "training.global_batch": (1 << 20, "sequences per step"),
    "training.micro_batch": (1 << 20, "sequences"),
    "training.steps": (MAX_REPLAYED_STEPS, "replayed steps"),
    "training.warmup_steps": (MAX_REPLAYED_STEPS, "replayed steps"),
    "parallelism.virtual_stages": (4096, "chunks per stage"),
    "storage.prefetch_steps": (MAX_REPLAYED_STEPS, "steps"),
    "checkpoint.every_steps": (1 << 40, "steps"),
    "training.budget_steps": (1 << 40, "optimizer steps"),
    "seed": ((1 << 63) - 1, "(a 64-bit seed)"),
    "emulation.instances_per_actor": (1 << 20, "instances (more than any cluster of the catalog holds)"),
}
LONG_RUN = "for the goodput of hours of training, replay a few steps and add --hours H"


def _at(raw: dict[str, Any], key: str) -> Any:
    node: Any = raw
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def check_bounds(raw: dict[str, Any]) -> list[Problem]:
    """The bounds of every count a resolved scenario dict gives (checked first, before the schema and the rules, so
    that a count beyond them is the problem reported, never one derived from it): the catalog's largest cluster of
    the instance type (as `plan` bounds --instances), SIZE_BOUNDS, the replayed steps and the passes they hold.
    Values of the wrong type are left to the schema."""
    problems = []
    cluster = raw.get("cluster") if isinstance(raw.get("cluster"), dict) else {}
    spec = INSTANCES.get(cluster.get("instance")) if isinstance(cluster.get("instance"), str) else None
    n = cluster.get("instances")
    if spec is not None and type(n) is int and n > largest_cluster(spec):
        problems.append(Problem("cluster.instances", n, largest_cluster_text(spec)))
    for key, (most, what) in SIZE_BOUNDS.items():
        value = _at(raw, key)
        if type(value) is int and value > most:
            hint = f"; {LONG_RUN}" if key in ("training.steps", "training.warmup_steps") else ""
            problems.append(Problem(key, value, f"at most {most:,} {what}{hint}"))
    t, par = raw.get("training"), raw.get("parallelism")
    if problems or not isinstance(t, dict) or not isinstance(par, dict):
        return problems
    steps, warmup = t.get("steps", 3), t.get("warmup_steps", 1)
    if type(steps) is not int or type(warmup) is not int:
        return problems               # the schema names the value of the wrong type
    if steps + warmup > MAX_REPLAYED_STEPS:
        problems.append(Problem("training.steps", steps, f"steps + warmup_steps ({warmup}) at most "
                                                         f"{MAX_REPLAYED_STEPS:,} replayed steps; {LONG_RUN}"))
        return problems
    gb, mb, dp = t.get("global_batch"), t.get("micro_batch", 1), par.get("dp")
    pp, v = par.get("pp", 1), par.get("virtual_stages", 1)
    if all(type(x) is int and x >= 1 for x in (steps, warmup + 1, gb, mb, dp, pp, v)):
        m = max(1, gb // (dp * mb))
        passes = (steps + warmup) * m * pp * v
        if passes > MAX_PASSES:
            problems.append(Problem("training.global_batch", gb, (
                f"at most {MAX_PASSES:,} microbatch passes replayed in a run: (steps + warmup_steps) x microbatches "
                f"per replica (global_batch / (dp x micro_batch)) x pp x virtual_stages = {steps + warmup:,} x {m:,} x "
                f"{pp} x {v} = {passes:,}; a smaller global_batch or fewer steps ({LONG_RUN})")))
    return problems


def check_degraded(faults: FaultsSpec, cluster: ClusterSpec) -> list[Problem]:
    """Degraded instances exist in the cluster; their NICs are at most the instance's."""
    spec = INSTANCES[cluster.instance]
    problems = []
    for i, d in enumerate(faults.degraded):
        path = f"faults.degraded[{i}]"
        if isinstance(d.instances, int) and d.instances > cluster.instances:
            problems.append(Problem(f"{path}.instances", d.instances,
                                    f"a count of at most cluster.instances ({cluster.instances})"))
        elif isinstance(d.instances, list) and max(d.instances) >= cluster.instances:
            bad = [x for x in d.instances if x >= cluster.instances]
            problems.append(Problem(f"{path}.instances", bad if len(bad) > 1 else bad[0],
                                    f"instance ids 0 .. {cluster.instances - 1} (cluster.instances is "
                                    f"{cluster.instances})"))
        if d.efa_nics is not None and d.efa_nics > spec.efa_nics:
            problems.append(Problem(f"{path}.efa_nics", d.efa_nics,
                                    f"1 .. {spec.efa_nics} ({spec.name} has {spec.efa_nics} EFA NICs)"))
        if d.efa_nics is None and d.neuronlink_scale is None:
            problems.append(Problem(path, "neither efa_nics nor neuronlink_scale",
                                    "efa_nics, neuronlink_scale or both (what is degraded)"))
    return problems


def check_precision(training: TrainingSpec, cluster: ClusterSpec) -> list[Problem]:
    """The precision needs a TensorE rate on the chip: MXFP8/MXFP4 exist only on Trainium3 (NeuronCore-v4)."""
    chip = INSTANCES[cluster.instance].chip
    if training.precision in chip.dense_flop_per_s:
        return []
    mx = [n for n, s in INSTANCES.items() if training.precision in s.chip.dense_flop_per_s]
    return [Problem("training.precision", training.precision,
                    f"one of {', '.join(chip.dense_flop_per_s)} on {cluster.instance} ({chip.name}, {chip.core_version} "
                    f"has no {training.precision} matmul; it runs on {', '.join(mx)})")]


def check_model(model: ModelSpec) -> list[Problem]:
    """Attention heads split the hidden size; KV heads group the query heads; top_k <= experts; the router's
    imbalance at most experts / top_k."""
    problems = []
    if model.hidden % model.heads:
        problems.append(Problem("model.heads", model.heads, f"a divisor of model.hidden ({model.hidden})"))
    if model.heads % model.kv_heads:
        problems.append(Problem("model.kv_heads", model.kv_heads, f"a divisor of model.heads ({model.heads})"))
    if model.moe is not None and model.moe.top_k > model.moe.experts:
        problems.append(Problem("model.moe.top_k", model.moe.top_k, f"at most model.moe.experts ({model.moe.experts})"))
    elif model.moe is not None and model.moe.imbalance > model.moe.experts / model.moe.top_k:
        # the busiest expert receives every token at most: tokens x top_k assignments over `experts` experts have
        # a mean of tokens x top_k / experts, so busiest / mean <= experts / top_k (the same bound holds per rank)
        problems.append(Problem("model.moe.imbalance", model.moe.imbalance, (
            f"at most model.moe.experts / top_k = {model.moe.experts / model.moe.top_k:g} (every token routed to "
            f"the busiest expert)")))
    return problems


def check_cluster(cluster: ClusterSpec) -> list[Problem]:
    """Logical NeuronCore sizes the instance supports; UltraServers only from the instance types that join one
    (trn2u: 4 per UltraServer; trn3.48xlarge: 4, Gen1; trn3gen2.16xlarge: 36, Gen2)."""
    spec = INSTANCES[cluster.instance]
    problems = []
    if cluster.lnc not in spec.allowed_lnc:
        why = (
            "the logical NeuronCore configuration exists only on Trainium2 and Trainium3"
            if spec.allowed_lnc == (1,)
            else "1 or 2 physical NeuronCores per logical NeuronCore"
        )
        allowed = " or ".join(map(str, spec.allowed_lnc))
        problems.append(Problem("cluster.lnc", cluster.lnc, f"{allowed} on {spec.name}: {why}"))
    us = ultraserver_of(spec)
    if cluster.ultraserver and us is None:
        joining = ", ".join(ULTRASERVERS)
        problems.append(
            Problem(
                "cluster.ultraserver",
                True,
                f"false on {spec.name}: only {joining} instances join into UltraServers",
            )
        )
    elif cluster.ultraserver and us is not None and cluster.instances % us.instances:
        problems.append(
            Problem(
                "cluster.instances",
                cluster.instances,
                f"a multiple of {us.instances} with cluster.ultraserver ({us.instances} {spec.name} per {us.name})",
            )
        )
    elif not cluster.ultraserver and spec.switched and spec.ultraserver_default:
        problems.append(
            Problem(
                "cluster.ultraserver",
                False,
                f"true on {spec.name}: the Gen2 server exists only inside its UltraServer (trn3.48xlarge runs "
                "stand-alone)",
            )
        )
    if cluster.network.calibration == "trn2-nccom-examples" and spec.chip.name != "trainium2":
        problems.append(
            Problem(
                "cluster.network.calibration",
                cluster.network.calibration,
                f"default on {spec.name}: trn2-nccom-examples changes only Trainium2 factors",
            )
        )
    return problems


def _ranks(cluster: ClusterSpec | None) -> tuple[int, str] | None:
    """Ranks of the cluster and how they are counted, or None when the cluster or its lnc is bad."""
    if cluster is None or cluster.lnc not in INSTANCES[cluster.instance].allowed_lnc:
        return None
    spec = INSTANCES[cluster.instance]
    ranks = cluster.instances * ranks_per_instance(spec, cluster.lnc)
    return ranks, f"{cluster.instances} instances x {spec.neuron_cores} NeuronCores / lnc {cluster.lnc} = {ranks}"


def check_layout(
    model: ModelSpec | None,
    training: TrainingSpec | None,
    par: ParallelismSpec,
    cluster: ClusterSpec | None,
    *,
    dp_given: bool = True,
) -> list[Problem]:
    """Parallel degrees against the ranks, the model's shape, the batch and the sequence; see ``check``."""
    problems = []
    model_parallel = par.tp * par.pp * par.cp
    dp: int | None = par.dp
    counted = _ranks(cluster)
    if counted is not None:
        ranks, how = counted
        if dp_given and model_parallel * par.dp != ranks:
            problems.append(
                Problem(
                    "parallelism",
                    f"tp {par.tp} x pp {par.pp} x cp {par.cp} x dp {par.dp} = {model_parallel * par.dp}",
                    f"tp*pp*cp*dp = ranks = {how}",
                )
            )
        elif not dp_given and ranks % model_parallel:
            dp = None
            problems.append(
                Problem(
                    "parallelism",
                    f"tp {par.tp} x pp {par.pp} x cp {par.cp} = {model_parallel} (dp not given)",
                    f"tp*pp*cp dividing ranks = {how}, so that dp = ranks / (tp*pp*cp) is whole",
                )
            )
    elif not dp_given:
        dp = None  # derived from a cluster that did not parse: a placeholder

    if model is not None:
        if model.heads % par.tp:
            problems.append(Problem("parallelism.tp", par.tp, f"a divisor of model.heads ({model.heads})"))
        if model.kv_heads % par.tp and par.tp % model.kv_heads:
            problems.append(
                Problem(
                    "parallelism.tp",
                    par.tp,
                    f"a divisor or a multiple of model.kv_heads ({model.kv_heads}); "
                    "KV heads are split over the TP group or replicated across it",
                )
            )
        if par.pp > model.layers:
            problems.append(Problem("parallelism.pp", par.pp, f"at most model.layers ({model.layers})"))
        elif par.pp_schedule == "interleaved" and par.pp * par.virtual_stages > model.layers:
            problems.append(
                Problem(
                    "parallelism.virtual_stages",
                    par.virtual_stages,
                    f"pp x virtual_stages at most model.layers ({model.layers}); pp is {par.pp}",
                )
            )
        problems += _check_experts(model, par, dp)

    if par.pp_schedule == "interleaved":
        if par.pp < 2:
            problems.append(Problem("parallelism.pp", par.pp, "at least 2 with pp_schedule interleaved"))
        if par.virtual_stages < 2:
            problems.append(
                Problem("parallelism.virtual_stages", par.virtual_stages, "at least 2 with pp_schedule interleaved")
            )
    elif par.virtual_stages > 1:
        problems.append(
            Problem(
                "parallelism.virtual_stages",
                par.virtual_stages,
                f"1 with pp_schedule {par.pp_schedule} (virtual stages need pp_schedule interleaved)",
            )
        )
    if par.sequence_parallel and par.tp == 1:
        problems.append(
            Problem(
                "parallelism.sequence_parallel",
                True,
                "false when tp is 1: sequence parallelism splits activations over the tensor-parallel group",
            )
        )

    if training is not None:
        if training.zero1 != (training.zero >= 1):
            problems.append(
                Problem(
                    "training.zero1",
                    training.zero1,
                    f"{str(training.zero >= 1).lower()} with training.zero {training.zero} (zero1 says whether the "
                    "optimizer state is sharded: true for zero 1 to 3), or left out",
                )
            )
        if dp is not None and training.global_batch % (dp * training.micro_batch):
            problems.append(
                Problem(
                    "training.global_batch",
                    training.global_batch,
                    f"a multiple of dp x micro_batch = {dp} x {training.micro_batch} = {dp * training.micro_batch}",
                )
            )
        elif dp is not None and par.pp_schedule == "interleaved" and par.pp > 1 and \
                microbatches(training.global_batch, dp, training.micro_batch) % par.pp:
            # Megatron's interleaved 1F1B runs microbatches in groups of pp: a count that is not a multiple of pp
            # is refused there, and the executed schedule would run extra microbatches
            m = microbatches(training.global_batch, dp, training.micro_batch)
            problems.append(
                Problem(
                    "training.global_batch",
                    training.global_batch,
                    f"with pp_schedule interleaved, microbatches per replica (global_batch / (dp x micro_batch) = "
                    f"{m}) a multiple of pp ({par.pp})",
                )
            )
        if training.seq_len % par.cp:
            problems.append(Problem("training.seq_len", training.seq_len, f"a multiple of parallelism.cp ({par.cp})"))
        if par.sequence_parallel and training.seq_len % par.tp:
            problems.append(
                Problem(
                    "training.seq_len",
                    training.seq_len,
                    f"a multiple of parallelism.tp ({par.tp}) with sequence_parallel",
                )
            )
    return problems


def _check_experts(model: ModelSpec, par: ParallelismSpec, dp: int | None) -> list[Problem]:
    """Expert parallelism needs a MoE model; ep divides dp and the experts."""
    if par.ep == 1:
        return []
    if model.moe is None:
        return [Problem("parallelism.ep", par.ep, "1 without model.moe (expert parallelism needs experts)")]
    problems = []
    if dp is not None and dp % par.ep:
        problems.append(Problem("parallelism.ep", par.ep, f"a divisor of parallelism.dp ({dp})"))
    if model.moe.experts % par.ep:
        problems.append(Problem("parallelism.ep", par.ep, f"a divisor of model.moe.experts ({model.moe.experts})"))
    return problems
