"""Model presets: preset name -> model shape (the ``model:`` keys of a scenario), each from a public config.

A scenario's ``model.preset`` fills every shape field it does not give explicitly. Shapes are the public
configs' numbers; ``source`` names the config. Llama and Mixtral: SwiGLU MLP, untied embeddings
(``tie_word_embeddings: false``). GPT-3: GELU MLP, ffn = 4 x hidden, GPT-2 BPE vocabulary of 50,257, embeddings
tied to the output layer (NeMo/Megatron ``share_embeddings_and_output_weights`` defaults to true: aws-neuron/
neuronx-nemo-megatron ``nemo/nemo/collections/nlp/models/language_modeling/megatron/gpt_model.py``).
"""

from __future__ import annotations

from typing import Any


def _llama(config: str, layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, vocab: int) -> dict[str, Any]:
    return {
        "layers": layers, "hidden": hidden, "heads": heads, "kv_heads": kv_heads, "ffn": ffn, "mlp": "swiglu",
        "vocab": vocab, "tied_embeddings": False, "norm": "rmsnorm", "position": "rotary",
        "source": f"{config} config.json (num_hidden_layers {layers}, hidden_size {hidden}, num_attention_heads "
        f"{heads}, num_key_value_heads {kv_heads}, intermediate_size {ffn}, vocab_size {vocab}, "
        "hidden_act silu, tie_word_embeddings false; RMSNorm, rotary position embeddings)",
    }


def _gpt3(source: str, layers: int, hidden: int, heads: int) -> dict[str, Any]:
    return {
        "layers": layers, "hidden": hidden, "heads": heads, "kv_heads": heads, "ffn": 4 * hidden, "mlp": "gelu",
        "vocab": 50257, "tied_embeddings": True, "norm": "layernorm", "position": "learned",
        "source": f"{source} (n_layers {layers}, d_model {hidden}, n_heads {heads}); ffn 4 x d_model and "
        "GPT-2 BPE vocab 50257 as in neuronx-nemo-megatron test.sh (FFN_HS=$(($HS*4)), gpt2-vocab.json); "
        "tied embeddings: Megatron GPTModel share_embeddings_and_output_weights=True; LayerNorm and learned "
        "absolute position embeddings (Brown et al. 2020 follow GPT-2; Megatron position_embedding_type "
        "learned_absolute)",
    }


_NEMO = "aws-neuron/neuronx-nemo-megatron nemo/examples/nlp/language_modeling"

PRESETS: dict[str, dict[str, Any]] = {
    "llama2-7b": _llama("meta-llama/Llama-2-7b-hf", 32, 4096, 32, 32, 11008, 32000),
    "llama2-13b": _llama("meta-llama/Llama-2-13b-hf", 40, 5120, 40, 40, 13824, 32000),
    "llama2-70b": _llama("meta-llama/Llama-2-70b-hf", 80, 8192, 64, 8, 28672, 32000),
    "llama3.1-8b": _llama("meta-llama/Llama-3.1-8B", 32, 4096, 32, 8, 14336, 128256),
    "llama3.1-70b": _llama("meta-llama/Llama-3.1-70B", 80, 8192, 64, 8, 28672, 128256),
    "llama3.1-405b": _llama("meta-llama/Llama-3.1-405B", 126, 16384, 128, 8, 53248, 128256),
    "gpt3-6.7b": _gpt3("Brown et al. 2020, Table 2.1, GPT-3 6.7B; " + _NEMO + "/gpt_6.7b.sh", 32, 4096, 32),
    "gpt3-23b": _gpt3(_NEMO + "/gpt_23b.sh (HS=8192, N_LAYERS=28, N_AH=64)", 28, 8192, 64),
    "gpt3-46b": _gpt3(_NEMO + "/gpt_46b.sh (HS=8192, N_LAYERS=56, N_AH=64)", 56, 8192, 64),
    "gpt3-175b": _gpt3("Brown et al. 2020, Table 2.1, GPT-3 175B; " + _NEMO + "/gpt_175b.sh", 96, 12288, 96),
    "mixtral-8x7b": {
        **_llama("mistralai/Mixtral-8x7B-v0.1", 32, 4096, 32, 8, 14336, 32000),
        "moe": {"experts": 8, "top_k": 2},
    },
}
PRESETS["mixtral-8x7b"]["source"] += "; num_local_experts 8, num_experts_per_tok 2"
PRESETS["mixtral-8x22b"] = {
    **_llama("mistral-community/Mixtral-8x22B-v0.1", 56, 6144, 48, 8, 16384, 32000),
    "moe": {"experts": 8, "top_k": 2},
}
PRESETS["mixtral-8x22b"]["source"] += "; num_local_experts 8, num_experts_per_tok 2"


def preset_names() -> list[str]:
    """Names of the model presets, in catalog order."""
    return list(PRESETS)
