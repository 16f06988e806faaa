"""The operator library format: validation with paths, scenario libraries that add and override."""
import pytest

from ultracluster import load_scenario
from ultracluster.chip import chunk_times
from ultracluster.cluster import build_cluster
from ultracluster.errors import ScenarioError
from ultracluster.operators import library_for, load_library, parse_library

BASE = {
    "name": "ops", "model": {"preset": "llama2-7b", "layers": 4},
    "training": {"seq_len": 2048, "global_batch": 8}, "parallelism": {"tp": 8, "pp": 1},
    "cluster": {"instance": "trn1.32xlarge", "instances": 1},
}


def test_builtin_library_has_the_transformer_operators():
    names = {o.name for o in load_library()}
    assert {"qkv_proj", "attention_core", "out_proj", "mlp_up", "mlp_down", "swiglu", "gelu", "norm_attn",
            "rotary", "residual_attn", "embedding_lookup", "lm_head", "cross_entropy", "adamw_fp32_master",
            "adamw_bf16_sr"} <= names


def test_the_packaged_library_reads_as_the_bounded_loader_reads_it(tmp_path):
    """The shipped library goes through libyaml's parser (`read_packaged_yaml`, fast); it must give the very
    document the bounded loader gives, with its rules: `1e-6` a float, a repeated key an error."""
    from ultracluster.operators import LIBRARY_DIR
    from ultracluster.yaml_input import InputError, read_packaged_yaml, read_yaml_file

    shipped = LIBRARY_DIR / "transformer.yaml"
    assert read_packaged_yaml(shipped) == read_yaml_file(shipped)
    rules = tmp_path / "rules.yaml"
    rules.write_text("a: 1e-6\nb: [2, 3.5, x, null, true]\nc: {d: '1e-6'}\n")
    assert read_packaged_yaml(rules) == read_yaml_file(rules) == {"a": 1e-6, "b": [2, 3.5, "x", None, True],
                                                                   "c": {"d": "1e-6"}}
    twice = tmp_path / "twice.yaml"
    twice.write_text("a: 1\na: 2\n")
    for read in (read_packaged_yaml, read_yaml_file):
        with pytest.raises(InputError) as err:
            read(twice)
        assert "line 2, column 1: found duplicate key 'a'" in err.value.given


def test_bad_library_reports_every_problem_with_its_path():
    doc = {"operators": [
        {"name": "a", "where": "layr", "forward": {"tensor": "2*T*h"}},
        {"name": "b", "where": "layer", "forward": {"tensr": 1, "bytes": "T*import"}},
        {"name": "c", "where": "layer", "forward": {"bytes": "__import__('os')"}, "matmul": {"m": "T"}},
    ]}
    with pytest.raises(ScenarioError) as err:
        parse_library(doc, "custom.yaml")
    paths = {p.path for p in err.value.problems}
    assert {"operators[0].where", "operators[1].forward.tensr", "operators[1].forward.bytes",
            "operators[2].forward.bytes", "operators[2].matmul"} <= paths


def test_scenario_library_overrides_an_operator(tmp_path):
    # a custom attention kernel twice as efficient in TensorE work
    (tmp_path / "fast_attention.yaml").write_text("""
operators:
  - name: attention_core
    where: layer
    recompute: selective
    matmul: {m: T, k: d, n: S}
    forward:  {tensor: 2*T*S*hq*d*causal, bytes: (T*(hq + 2*hkv)*d + T*hq*d)*e}
    backward: {tensor: 5*T*S*hq*d*causal, bytes: 2*(T*(hq + 2*hkv)*d + 2*T*hq*d)*e}
    saved: T*(hq + 2*hkv)*d*e + T*hq*d*e
  - name: my_extra_norm
    where: layer
    forward: {vector: 5*Ts*h, bytes: 2*Ts*h*e}
""")
    scen = tmp_path / "s.yaml"
    import yaml
    scen.write_text(yaml.safe_dump({**BASE, "operators": ["fast_attention.yaml"]}))
    custom = load_scenario(scen)
    plain = load_scenario(BASE)
    assert custom.operators[0]["operators"][0]["name"] == "attention_core"   # inlined for the actors
    names = [o.name for o in library_for(custom)]
    assert names.count("attention_core") == 1 and "my_extra_norm" in names
    t_custom = chunk_times(custom, build_cluster(custom, 1)).forward_s.sum()
    t_plain = chunk_times(plain, build_cluster(plain, 1)).forward_s.sum()
    assert t_custom != pytest.approx(t_plain)


def test_scenario_library_errors_name_the_scenario_field(tmp_path):
    (tmp_path / "bad.yaml").write_text("operators:\n  - {name: x, where: nowhere, forward: {bytes: T}}\n")
    with pytest.raises(ScenarioError) as err:
        load_scenario({**BASE, "operators": [str(tmp_path / "bad.yaml"), str(tmp_path / "missing.yaml")]})
    paths = [p.path for p in err.value.problems]
    assert "operators[0]: operators[0].where" in paths
    assert "operators[1]" in paths


def test_gpt_uses_layernorm_and_learned_positions_llama_rmsnorm_and_rotary():
    from ultracluster.operators import applicable
    gpt = load_scenario({**BASE, "model": {"preset": "gpt3-6.7b", "layers": 4}})
    llama = load_scenario(BASE)
    g = {o.name for o in applicable(library_for(gpt), gpt)}
    l_ = {o.name for o in applicable(library_for(llama), llama)}
    assert {"layernorm_attn", "layernorm_mlp", "layernorm_final", "position_embedding", "gelu"} <= g
    assert not {"rotary", "norm_attn", "swiglu"} & g
    assert {"norm_attn", "norm_mlp", "norm_final", "rotary", "swiglu"} <= l_
    assert not {"layernorm_attn", "position_embedding", "gelu"} & l_
    # LayerNorm does more VectorE work than RMSNorm; both are HBM-bound here, so the time does not drop
    from ultracluster.cluster import build_cluster as bc
    from ultracluster.operators import evaluate, shape_variables
    ln = load_scenario({**BASE, "model": {**BASE["model"], "norm": "layernorm"}})
    work = {}
    for name, sc in (("ln", ln), ("rms", llama)):
        ops = applicable(library_for(sc), sc)
        work[name] = evaluate(ops, "layer", "forward", shape_variables(sc, bc(sc, 1).layout))["vector"].sum()
    assert work["ln"] > work["rms"]
    assert chunk_times(ln, bc(ln, 1)).forward_s.sum() >= chunk_times(llama, bc(llama, 1)).forward_s.sum()
