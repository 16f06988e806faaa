"""Operator library (top-level `operators/*.yaml`) + model shapes → engine work and HBM bytes per rank.

The library is data: each operator gives TensorE/VectorE/ScalarE FLOPs, HBM bytes and saved activation bytes as
arithmetic expressions over the shape variables documented in `operators/transformer.yaml`, compiled once and
evaluated on numpy arrays, so one call times every pipeline chunk (or every configuration of a sweep) at once.
"""
from __future__ import annotations

import ast
import json
import operator as _op
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from .errors import Problem, ScenarioError
from .yaml_input import InputError, read_packaged_yaml, read_yaml_file   # bounded: a regular file under the cap

LIBRARY_DIR = Path(__file__).resolve().parent / "operators_library"   # wheel installs: pyproject ships it here
if not LIBRARY_DIR.is_dir():   # a source checkout or an editable install: the top-level operators/
    LIBRARY_DIR = Path(__file__).resolve().parent.parent / "operators"
ENGINES = ("tensor", "vector", "scalar", "gpsimd", "bytes")
MATMUL_DIMS = ("m", "k", "n")
VARIABLES = frozenset("T Ts S h d hq hkv f up V e w g causal causal_f P drop E Er topk imb".split())
SWITCHES = ("tensor_structure", "fusion", "engine_clock_rates", "flash_attention", "attention_serial", "stage_ends", "tp_overlap", "dp_overlap",
            "step_costs")
WHERE = ("layer", "embedding", "head", "optimizer")
_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: _op.add, ast.Sub: _op.sub, ast.Mult: _op.mul, ast.Div: _op.truediv, ast.Pow: _op.pow,
}


MAX_DEPTH = 100   # syntax-tree levels of one expression (the shipped library's deepest: 10)


def _depth(tree: ast.AST) -> int:
    """How deep an expression's operators nest (iteratively: never the recursion it guards against)."""
    deepest, todo = 0, [(tree, 1)]
    while todo:
        node, d = todo.pop()
        deepest = max(deepest, d)
        todo += [(child, d + 1) for child in ast.iter_child_nodes(node)]
    return deepest


def _compile(expr: object, path: str, problems: list[Problem]) -> Callable[[Mapping[str, Any]], Any]:
    """Compile an arithmetic expression over VARIABLES into a function of a variable mapping.

    It computes in float64 (numpy scalars or arrays, never Python floats) with numpy's floating-point errors
    silenced, so that it never raises: a division by zero gives inf or NaN, an overflow inf, a negative base to a
    fractional power NaN (never a complex number). `check_library` refuses such values at the scenario's own
    shapes; the planner makes a layout where they appear infeasible (`bad_work`)."""
    allowed = f"an arithmetic expression (+ - * / **, numbers, parentheses) over {', '.join(sorted(VARIABLES))}"
    if isinstance(expr, (int, float)) and not isinstance(expr, bool):
        return lambda v, c=np.float64(expr): c
    if not isinstance(expr, str):
        problems.append(Problem(path, expr, allowed))
        return lambda v: 0.0
    try:
        tree = ast.parse(expr, mode="eval").body
    except (SyntaxError, ValueError):
        problems.append(Problem(path, expr, allowed))
        return lambda v: 0.0
    except (RecursionError, MemoryError):      # CPython's parser gives up on deep nesting this way
        problems.append(Problem(path, expr, f"{allowed}, nested at most {MAX_DEPTH} deep"))
        return lambda v: 0.0
    if _depth(tree) > MAX_DEPTH:               # evaluated by nested calls: Python's recursion limit is 1,000
        problems.append(Problem(path, expr, f"{allowed}, nested at most {MAX_DEPTH} deep"))
        return lambda v: 0.0

    def build(node: ast.AST) -> Callable[[Mapping[str, Any]], Any]:
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            f, a, b = _BINOPS[type(node.op)], build(node.left), build(node.right)
            return lambda v: f(a(v), b(v))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            a = build(node.operand)
            return lambda v: -a(v)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            try:
                return lambda v, c=np.float64(node.value): c
            except OverflowError:       # an integer literal beyond float64
                return lambda v: np.float64(np.inf)
        if isinstance(node, ast.Name) and node.id in VARIABLES:
            return lambda v, n=node.id: np.asarray(v[n], dtype=np.float64)
        raise ValueError(ast.unparse(node))

    try:
        fn = build(tree)
    except ValueError as bad:
        problems.append(Problem(path, expr, f"{allowed}; `{bad}` is not one"))
        return lambda v: 0.0

    def safe(v: Mapping[str, Any], fn=fn) -> Any:
        with np.errstate(all="ignore"):
            return fn(v)
    return safe


@dataclass(frozen=True)
class Operator:
    """One library operator with its compiled work expressions."""

    name: str
    where: str
    recompute: str | None
    mlp: str | None
    master_weights: str | None
    moe: bool | None
    norm: str | None
    position: str | None
    forward: Mapping[str, Callable[[Mapping[str, Any]], Any]]
    backward: Mapping[str, Callable[[Mapping[str, Any]], Any]]
    saved: Callable[[Mapping[str, Any]], Any]
    matmul: Mapping[str, Callable[[Mapping[str, Any]], Any]] | None = None   # m, k, n of its largest matmul
    fuse: tuple[str, ...] = ()       # kernels it may run inside, first existing one wins
    hides_tp: bool = False           # its backward hides the tensor-parallel collectives of its block
    serial: bool = False             # its engines wait for each other (a dependency chain per tile)
    attention: str | None = None     # exists only for this training.attention
    saved_selective: Callable[[Mapping[str, Any]], Any] | None = None   # kept under selective recompute
    switch: str | None = None        # exists only while this calibration switch is on
    precision: tuple[str, ...] | None = None   # exists only at these training precisions (MX quantize)
    evicts: bool = True              # its matmul outputs leave PSUM by a copy of their own (`chip.psum_evictions`)


def parse_library(doc: object, source: str) -> list[Operator]:
    """Validate and compile an operator library document; every problem is reported at once."""
    problems: list[Problem] = []
    if not isinstance(doc, dict) or not isinstance(doc.get("operators"), list):
        raise ScenarioError([Problem("operators", type(doc).__name__, "a mapping with an `operators` list")], source)
    ops: list[Operator] = []
    keys = {"name", "where", "recompute", "mlp", "master_weights", "moe", "norm", "position", "forward", "backward", "saved",
            "matmul", "fuse", "hides_tp", "switch", "serial", "precision", "attention", "saved_selective", "evicts"}
    for i, raw in enumerate(doc["operators"]):
        at = f"operators[{i}]"
        if not isinstance(raw, dict):
            problems.append(Problem(at, raw, "a mapping"))
            continue
        for k in sorted(set(raw) - keys):
            problems.append(Problem(f"{at}.{k}", raw[k], f"no such key; allowed keys: {', '.join(sorted(keys))}"))
        name = raw.get("name")
        if not isinstance(name, str) or not name:
            problems.append(Problem(f"{at}.name", name if name is not None else "<missing>", "a non-empty string"))
        where = raw.get("where")
        if where not in WHERE:
            problems.append(Problem(f"{at}.where", where if where is not None else "<missing>", f"one of: {', '.join(WHERE)}"))
        for key, allowed in (("recompute", ("selective", "mlp")), ("mlp", ("swiglu", "gelu")), ("master_weights", ("fp32", "none")),
                             ("norm", ("rmsnorm", "layernorm")), ("position", ("rotary", "learned")),
                             ("attention", ("flash", "materialized"))):
            if key in raw and raw[key] not in allowed:
                problems.append(Problem(f"{at}.{key}", raw[key], f"one of: {', '.join(allowed)}"))
        precision = raw.get("precision")
        precision = [precision] if isinstance(precision, str) else precision
        if precision is not None and (not isinstance(precision, list) or not precision
                                      or any(p not in PRECISION_BYTES for p in precision)):
            problems.append(Problem(f"{at}.precision", raw.get("precision"),
                                    f"a training precision or a list of them: {', '.join(PRECISION_BYTES)}"))
            precision = None
        for flag in ("moe", "hides_tp", "serial", "evicts"):
            if flag in raw and not isinstance(raw[flag], bool):
                problems.append(Problem(f"{at}.{flag}", raw[flag], "true or false"))
        fuse = raw.get("fuse", [])
        fuse = [fuse] if isinstance(fuse, str) else fuse
        if not isinstance(fuse, list) or not all(isinstance(f, str) and f for f in fuse):
            problems.append(Problem(f"{at}.fuse", raw.get("fuse"), "an operator name or a list of operator names"))
            fuse = []
        if "switch" in raw and raw["switch"] not in SWITCHES:
            problems.append(Problem(f"{at}.switch", raw["switch"], f"one of: {', '.join(SWITCHES)}"))
        phases = {}
        for phase in ("forward", "backward"):
            work = raw.get(phase, {} if phase == "backward" else None)
            if not isinstance(work, dict):
                problems.append(Problem(f"{at}.{phase}", work if work is not None else "<missing>",
                                        f"a mapping of {', '.join(ENGINES)} to expressions"))
                work = {}
            for k in sorted(set(work) - set(ENGINES)):
                problems.append(Problem(f"{at}.{phase}.{k}", work[k], f"one of: {', '.join(ENGINES)}"))
            phases[phase] = {e: _compile(work.get(e, 0), f"{at}.{phase}.{e}", problems) for e in ENGINES}
        matmul = raw.get("matmul")
        if matmul is not None and (not isinstance(matmul, dict) or set(matmul) != set(MATMUL_DIMS)):
            problems.append(Problem(f"{at}.matmul", matmul, "a mapping with exactly m, k and n (expressions)"))
            matmul = None
        ops.append(Operator(name=str(name), where=str(where), recompute=raw.get("recompute"), mlp=raw.get("mlp"),
                            master_weights=raw.get("master_weights"), moe=raw.get("moe"), norm=raw.get("norm"),
                            position=raw.get("position"), forward=phases["forward"],
                            backward=phases["backward"], saved=_compile(raw.get("saved", 0), f"{at}.saved", problems),
                            matmul={d: _compile(matmul[d], f"{at}.matmul.{d}", problems) for d in MATMUL_DIMS}
                            if matmul else None, fuse=tuple(fuse), hides_tp=bool(raw.get("hides_tp", False)),
                            serial=bool(raw.get("serial", False)), attention=raw.get("attention"),
                            saved_selective=_compile(raw["saved_selective"], f"{at}.saved_selective", problems)
                            if "saved_selective" in raw else None,
                            switch=raw.get("switch"), evicts=bool(raw.get("evicts", True)),
                            precision=tuple(precision) if precision is not None else None))
    names = [o.name for o in ops]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        problems.append(Problem("operators", dup, "unique operator names"))
    if problems:
        raise ScenarioError(problems, source)
    return ops


@lru_cache(maxsize=8)
def load_library(path: str | None = None) -> tuple[Operator, ...]:
    """Load an operator library YAML (default: the shipped `operators/transformer.yaml`)."""
    p = Path(path) if path else LIBRARY_DIR / "transformer.yaml"
    try:
        doc = read_yaml_file(p) if path else read_packaged_yaml(p)     # ours: libyaml's parser (same document)
    except InputError as err:
        allowed = err.allowed if err.in_document else f"an operator library: {err.allowed}"
        raise ScenarioError([Problem("(file)", err.given, allowed)], str(p)) from None
    return tuple(parse_library(doc, str(p)))


def library_for(scenario) -> tuple[Operator, ...]:
    """The built-in library with the scenario's own libraries applied: same name replaces, new name adds."""
    return _merged(json.dumps(list(scenario.operators), sort_keys=True, default=str))


@lru_cache(maxsize=16)
def _merged(docs_json: str) -> tuple[Operator, ...]:
    ops = {o.name: o for o in load_library()}
    for i, doc in enumerate(json.loads(docs_json)):
        for o in parse_library(doc, f"operators[{i}]"):
            ops[o.name] = o
    return tuple(ops.values())


# --------------------------------------------------------------------------------------------------------
# Model shapes → variables, parameters and FLOPs

# MXFP8 / MXFP4 (OCP microscaling, T3): 1 byte or half a byte per element plus one 8-bit scale per 32
# elements along the contraction dimension.
MX_SCALE_BYTES = 1 / 32
PRECISION_BYTES = {"bf16": 2, "fp8": 1, "fp32": 4, "mxfp8": 1 + MX_SCALE_BYTES, "mxfp4": 0.5 + MX_SCALE_BYTES}
MX_PRECISIONS = ("mxfp8", "mxfp4")


def weight_bytes(training) -> float:
    """Bytes of a stored weight: fp32 training keeps fp32 weights, bf16 and fp8 training bf16 ones."""
    return 4.0 if training.precision == "fp32" else 2.0


def optimizer_bytes(training) -> float:
    """Bytes of optimizer state per parameter: fp32 master weights + Adam m, v = 12 B with fp32 master weights,
    bf16 m, v = 4 B without (the ZeRO paper, Rajbhandari et al. 2020). The one rule HBM (`memory`) and
    checkpoints (`storage.traffic`) use."""
    return 12.0 if training.master_weights == "fp32" else 4.0


def grad_bytes(training) -> float:
    """Bytes of a gradient (accumulation buffer, data-parallel reduction): `training.grad_precision` if given, else
    fp32 with fp32 master weights (Megatron-LM; NxD from SDK 2.20) or in fp32 training, else bf16."""
    given = getattr(training, "grad_precision", None)
    fp32 = given == "fp32" if given else "fp32" in (training.master_weights, training.precision)
    return 4.0 if fp32 else 2.0


@dataclass(frozen=True)
class Sharding:
    """What a rank keeps only 1/dp of between uses (ZeRO, Rajbhandari et al. 2020): the one home of the rule.

    Attributes:
        optimizer: optimizer state (ZeRO-1 and up; `training.zero1`).
        gradients: gradients (ZeRO-2 and ZeRO-3): reduce-scattered as ZeRO-1's are, each rank keeping its share.
        weights: parameters, all-gathered layer by layer before forward and again before backward (ZeRO-3).
    """

    optimizer: bool
    gradients: bool
    weights: bool


def sharding(training) -> Sharding:
    """The ZeRO stage of `training.zero` as what is sharded over the data-parallel ranks."""
    zero = training.zero
    return Sharding(optimizer=zero >= 1, gradients=zero >= 2, weights=zero >= 3)


def dp_share(dense, expert, dp: int, ep: int = 1):
    """One rank's 1/dp share of parameters: dense ones over the dp ranks, experts over the dp / ep ranks
    that hold the same experts (arrays or numbers)."""
    return dense / dp + expert / (dp // ep)


# Flash attention's causal tiles of 128 queries x keys: skipped above the diagonal, computed in full on it, so 0.5 +
# tile / (2 S) of the S x S scores (exact when S is a multiple of the tile): 512 keys (QK^T, and the backward), 2048
# in the forward's mask, exp, transposes and PV (`causal_f`: the K/V tile of NKI flash_fwd; operators/transformer.yaml).
FLASH_KEY_TILE, FLASH_FWD_KV_TILE = 512, 2048


def causal_fraction(seq_len: float, flash: bool = True, tile: int = FLASH_KEY_TILE) -> float:
    """Fraction of the S x S score matrix a causal attention kernel computes with key tiles of `tile`."""
    return min(1.0, 0.5 + tile / (2.0 * seq_len)) if flash else 0.5


def shape_variables(scenario, layout, calibration=None) -> dict[str, float]:
    """Per-rank shape variables of the operator library for one microbatch (`calibration`: its switches;
    None: every mechanism on)."""
    m, t = scenario.model, scenario.training
    tp, cp = layout.tp, layout.cp
    sp = scenario.parallelism.sequence_parallel
    T = t.micro_batch * t.seq_len / cp
    return {
        "T": T, "Ts": T / tp if sp else T, "S": float(t.seq_len), "h": float(m.hidden),
        "d": m.hidden / m.heads, "hq": m.heads / tp, "hkv": max(m.kv_heads / tp, 1.0),
        "f": m.ffn / tp, "up": 2.0 if m.mlp == "swiglu" else 1.0, "V": m.vocab / tp,
        "e": 4.0 if t.precision == "fp32" else 2.0, "w": float(PRECISION_BYTES[t.precision]),
        "g": grad_bytes(t), "drop": 1.0 if m.dropout > 0 else 0.0,
        **{c: causal_fraction(t.seq_len, calibration is None or calibration.flash_attention, tile)
           for c, tile in (("causal", FLASH_KEY_TILE), ("causal_f", FLASH_FWD_KV_TILE))}, "P": 0.0,
        "E": float(m.moe.experts) if m.moe else 0.0, "Er": m.moe.experts / scenario.parallelism.ep if m.moe else 1.0,
        "topk": float(m.moe.top_k) if m.moe else 0.0, "imb": float(m.moe.imbalance) if m.moe else 1.0,
    }


def layer_params_split(model, tp: int, ep: int = 1) -> tuple[float, float]:
    """Parameters of one transformer layer held by one rank: (dense, expert). Norms are replicated over
    tensor-parallel ranks; under mixture of experts the rank holds experts / ep experts (each split over
    tp) and the router, and the experts' gradients are reduced over the expert data-parallel group."""
    d = model.hidden / model.heads
    hq, hkv = model.heads / tp, max(model.kv_heads / tp, 1.0)
    up = 2 if model.mlp == "swiglu" else 1
    norms = 2 * model.hidden * (2 if model.norm == "layernorm" else 1)     # gain (+ bias for LayerNorm)
    attn = model.hidden * (hq + 2 * hkv) * d + hq * d * model.hidden + norms
    mlp = (up + 1) * model.hidden * model.ffn / tp
    if model.moe is None:
        return attn + mlp, 0.0
    return attn + model.hidden * model.moe.experts, mlp * model.moe.experts / ep


def chunk_params_split(model, tp: int, layers: np.ndarray, pp: int, ep: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(dense, expert) parameters per rank of each pipeline chunk: its layers, the embedding on chunk 0,
    the LM head and final norm on the last."""
    dense_l, expert_l = layer_params_split(model, tp, ep)
    dense = np.asarray(layers, dtype=float) * dense_l
    dense[0] += model.vocab * model.hidden / tp
    if not (model.tied_embeddings and pp == 1):
        dense[-1] += model.vocab * model.hidden / tp
    dense[-1] += model.hidden * (2 if model.norm == "layernorm" else 1)   # final norm
    return dense, np.asarray(layers, dtype=float) * expert_l


def chunk_params(model, tp: int, layers: np.ndarray, pp: int, ep: int = 1) -> np.ndarray:
    """Parameters per rank of each pipeline chunk (dense and expert)."""
    return sum(chunk_params_split(model, tp, layers, pp, ep))


def matmul_params(model) -> float:
    """Matmul parameters a token uses (attention, MLP or its top_k experts and router, LM head), for the
    MFU formula of docs/design.md: for mixture of experts the active parameters, so MFU stays a fraction."""
    d = model.hidden / model.heads
    up = 2 if model.mlp == "swiglu" else 1
    mlp = (up + 1) * model.hidden * model.ffn
    if model.moe is not None:
        mlp = mlp * model.moe.top_k + model.hidden * model.moe.experts
    per_layer = model.hidden * (model.heads + 2 * model.kv_heads) * d + model.heads * d * model.hidden + mlp
    return model.layers * per_layer + model.vocab * model.hidden


def model_flops_per_step(scenario) -> float:
    """Model FLOPs of one step: 6 x matmul params x tokens for the weights, and for attention the work a
    causal model needs: each token attends to the tokens before it, half of the S x S scores, so
    6 x layers x hidden x seq_len x tokens (forward QK^T and PV 2 x 2 x h x S / 2 per token, backward twice
    that). This is the convention of PaLM's MFU with the causal half; the 12 x ... form found elsewhere counts
    the full, non-causal matrix. Recomputation and kernel overheads are hardware FLOPs (HFU), not model FLOPs.
    """
    m, t = scenario.model, scenario.training
    tokens = scenario.tokens_per_step
    return 6.0 * matmul_params(m) * tokens + 6.0 * m.layers * m.hidden * t.seq_len * tokens


def applicable(ops: tuple[Operator, ...], scenario, calibration=None) -> list[Operator]:
    """The operators that exist for this model and optimizer (and, given a calibration, its switches)."""
    m, t = scenario.model, scenario.training
    return [o for o in ops if (o.mlp in (None, m.mlp)) and (o.master_weights in (None, t.master_weights))
            and (o.moe is None or o.moe == (m.moe is not None)) and o.norm in (None, m.norm)
            and o.position in (None, m.position) and o.attention in (None, t.attention)
            and (o.switch is None or calibration is None or bool(getattr(calibration, o.switch)))
            and (o.precision is None or t.precision in o.precision)]


def evaluate(ops: list[Operator], where: str, phase: str, variables: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Engine work of the `where` operators in one phase, as arrays [n_ops, *shape of variables]."""
    sel = [o for o in ops if o.where == where]
    out = {}
    for e in ENGINES:
        vals = [np.broadcast_to(np.asarray(getattr(o, phase)[e](variables), dtype=float),
                                np.shape(variables["T"])) for o in sel]
        out[e] = np.array(vals, dtype=float).reshape((len(sel),) + np.shape(variables["T"]))
    for d in MATMUL_DIMS:
        vals = [np.broadcast_to(np.asarray(o.matmul[d](variables) if o.matmul else 0.0, dtype=float),
                                np.shape(variables["T"])) for o in sel]
        out[d] = np.array(vals, dtype=float).reshape((len(sel),) + np.shape(variables["T"]))
    out["names"] = np.array([o.name for o in sel])
    out["recompute"] = np.array([o.recompute or "" for o in sel])
    out["hides_tp"] = np.array([o.hides_tp for o in sel], dtype=bool)
    out["serial"], out["evicts"] = (np.array([getattr(o, k) for o in sel], dtype=bool) for k in ("serial", "evicts"))
    names = [o.name for o in sel]
    out["host"] = np.array([next((names.index(f) for f in o.fuse if f in names), i) for i, o in enumerate(sel)],
                           dtype=np.int64)   # the kernel each operator runs inside (itself when not fused)
    return out


# The most work or bytes an expression may give per rank and microbatch: 10^30 FLOPs are 10^15 s at a peta-FLOP/s,
# fifteen orders above any operator of a published model, and far enough below float64's 1.8e308 that no sum,
# product or time made of them overflows.
MAX_WORK = 1e30


def work_values(op: Operator, variables: Mapping[str, Any]):
    """(key, value) of every work figure of an operator at some shapes: forward.ENGINE, backward.ENGINE, matmul.DIM,
    saved, saved_selective (the keys of its library entry)."""
    for phase in ("forward", "backward"):
        for e in ENGINES:
            yield f"{phase}.{e}", getattr(op, phase)[e](variables)
    for d in (MATMUL_DIMS if op.matmul else ()):
        yield f"matmul.{d}", op.matmul[d](variables)
    yield "saved", op.saved(variables)
    if op.saved_selective is not None:
        yield "saved_selective", op.saved_selective(variables)


def bad_work(ops, variables: Mapping[str, Any]) -> tuple[np.ndarray, list]:
    """Where any operator's work figure is not finite, negative or above MAX_WORK, over the shapes of `variables`
    (arrays [K], or numbers: K = 1): ([K] bool, [K] the first such figure in words or None)."""
    shape = np.shape(variables["T"])
    bad = np.zeros(shape, dtype=bool)
    why: list = [None] * int(np.prod(shape, dtype=np.int64))
    for op in ops:
        for key, value in work_values(op, variables):
            x = np.broadcast_to(np.asarray(value, dtype=float), shape)
            wrong = ~(np.isfinite(x) & (x >= 0) & (x <= MAX_WORK))
            for k in np.flatnonzero(wrong & ~bad).tolist():
                why[k] = (f"operator {op.name}: {key} is {np.ravel(x)[k]:g} at this layout's shapes (allowed: a finite "
                          f"number >= 0, at most {MAX_WORK:g})")
            bad |= wrong
    return bad.reshape(-1) if shape else bad.reshape(1), why


def recompute_mode(training, recompute: str | None = None) -> str:
    """`training.recompute` (or a plan row's `recompute`), or "selective_mlp" where it checkpoints the MLP too."""
    mode = recompute or training.recompute
    return "selective_mlp" if mode == "selective" and training.checkpoint_mlp else mode


def saved_bytes(ops: list[Operator], where: str, variables: Mapping[str, Any], recompute: str) -> float:
    """Activation bytes kept per microbatch by the `where` operators under a recompute mode.

    `full` keeps only each layer's input (the first layer operator's saved tensor). `selective` keeps what an
    operator's `saved_selective` says (default its `saved`): the materialized attention drops its S x S scores and
    mask and keeps Q, K, V (Korthikanti et al. 2022's 5as/h term); flash attention stores no S x S matrix anyway."""
    sel = [o for o in ops if o.where == where]      # (np.float64: variables holding arrays give an array)
    if recompute == "full" and where == "layer":
        return np.float64(sel[0].saved(variables))
    if recompute in ("selective", "selective_mlp"):   # the MLP block's `saved_selective` only if checkpointed
        return np.float64(sum((o.saved_selective if o.saved_selective and (o.recompute != "mlp" or recompute !=
                               "selective") else o.saved)(variables) for o in sel))
    return np.float64(sum(o.saved(variables) for o in sel))
