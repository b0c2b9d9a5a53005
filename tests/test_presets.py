import json

import pytest

from costcalc import presets
from costcalc.errors import CostcalcError

REQUIRED = ["toy", "llama-2-7b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b",
            "qwen2.5-7b", "mixtral-8x7b", "olmoe-1b-7b", "qwen3-30b-a3b",
            "mistral-7b-v0.1", "qwen3-8b", "qwen2.5-72b", "llama-2-70b", "qwen3-235b-a22b", "deepseek-v3",
            "gpt-oss-20b", "gpt-oss-120b", "gemma-2-9b", "gemma-3-12b", "qwen1.5-moe-a2.7b"]


def test_required_presets_present():
    assert set(REQUIRED) <= set(presets.names())


@pytest.mark.parametrize("name", presets.names())
def test_every_preset_loads_and_states_its_source(name):
    spec = presets.load(name)
    assert spec.name == name
    assert spec.source, f"{name} has no source"
    assert sum(g.count for g in spec.groups) == spec["L"]
    for g in spec.groups:
        if "d_h" in g.sizes:
            assert g.numbers()["d_q"] == g.sizes["h_q"] * g.sizes["d_h"]


# Field-by-field against real config.json copies (tests/data/hf-configs).
HF = {
    "llama-3.1-8b": {"L": "num_hidden_layers", "d": "hidden_size", "h_q": "num_attention_heads",
                     "h_kv": "num_key_value_heads", "m": "intermediate_size", "V": "vocab_size"},
    "mixtral-8x7b": {"L": "num_hidden_layers", "d": "hidden_size", "h_q": "num_attention_heads",
                     "h_kv": "num_key_value_heads", "m_e": "intermediate_size",
                     "E": "num_local_experts", "k": "num_experts_per_tok", "V": "vocab_size"},
    "qwen3-30b-a3b": {"L": "num_hidden_layers", "d": "hidden_size", "h_q": "num_attention_heads",
                      "h_kv": "num_key_value_heads", "d_h": "head_dim", "m_e": "moe_intermediate_size",
                      "E": "num_experts", "k": "num_experts_per_tok", "V": "vocab_size"},
}


@pytest.mark.parametrize("name", sorted(HF))
def test_presets_match_shared_hf_configs(name, shared_configs):
    config = json.loads((shared_configs / f"{name}.json").read_text())
    spec = presets.load(name)
    for key, field in HF[name].items():
        assert spec[key] == config[field], (name, key)


@pytest.fixture
def shared_configs():
    from pathlib import Path
    return Path(__file__).resolve().parent / "data" / "hf-configs"


def test_unknown_preset_suggests_nearest():
    with pytest.raises(CostcalcError, match="did you mean llama-3.1-8b"):
        presets.load("llama-3.1-8")


GOOD = {"name": "x", "arch": "moe", "L": 2, "d": 8, "h_q": 4, "h_kv": 2, "d_h": 2, "V": 10,
        "E": 4, "k": 2, "m_e": 8}


def test_preset_file(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(GOOD))
    assert presets.load_file(path).sizes["E"] == 4
    path.write_text("{not json")
    with pytest.raises(CostcalcError, match="not valid JSON"):
        presets.load_file(path)
    with pytest.raises(CostcalcError, match="cannot read preset file"):
        presets.load_file(tmp_path / "absent.json")
