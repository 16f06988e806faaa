"""Small scenarios the planner tests search: a dense model with room for every kind of layout (pipelined,
interleaved, context parallel, ZeRO 0/1/3) on two trn1.32xlarge, the same on trn2 (lnc 1 and 2), and a small
mixture of experts (expert parallelism)."""
import copy

DENSE = {
    "name": "plan-small",
    "model": {"layers": 16, "hidden": 1024, "heads": 16, "kv_heads": 4, "ffn": 2816, "mlp": "swiglu", "vocab": 32000},
    "training": {"seq_len": 2048, "global_batch": 64, "micro_batch": 1, "recompute": "selective", "steps": 2,
                 "warmup_steps": 1},
    "parallelism": {"tp": 8, "pp": 2},
    "cluster": {"instance": "trn1.32xlarge", "instances": 2},
    "emulation": {"instances_per_actor": 1, "payload_scale": 1.0e-4},
}


def variant(**sections) -> dict:
    d = copy.deepcopy(DENSE)
    for key, value in sections.items():
        d[key] = {**d.get(key, {}), **value} if isinstance(value, dict) else value
    return d
