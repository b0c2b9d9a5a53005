"""Parameter counts against what each model's publisher states, and the HF config import.

Tolerance: a stated figure is rounded to its last digit, so ours must lie within half a
unit of that digit; on top of that 0.1% of the figure, because costcalc counts matrices
only (norms and biases are left out: gpt-oss-120b's expert biases, the largest, are 0.03%).
A publisher that writes sizes rounded down (``"rounded": "down"``: the size in a model's name)
is held to [figure, figure + one unit). What a figure includes besides the blocks is said by
``total_includes`` / ``active_includes`` (``embedding``, ``lm_head``; by default a total has
both; ``mtp``: the multi-token-prediction modules, ``mtp_params``; ``mtp_copies``: the embedding and
LM head a checkpoint stores again per MTP module, 2 d V each); a part costcalc does not model
(``vision_encoder``) makes the figure an upper bound.
"""
import json
import re
from pathlib import Path

import pytest

from costcalc import calc, hf, presets
from costcalc.errors import CostcalcError

CONFIGS = Path(__file__).resolve().parent / "data" / "hf-configs"
SLACK = 0.001


def stated_value(text: str, significant: bool = False) -> tuple[float, float]:
    """``"46.7B"`` -> (46.7e9, 0.05e9): the value and half a unit of its last digit
    (``"6857302016"``, an exact count: half a parameter). ``significant``: the figure is rounded to
    its significant digits, so trailing zeros are not (``"230B"`` -> half of 10B; ``"1T"`` -> 0.5T)."""
    number, unit = re.fullmatch(r"([\d.]+)([TBM]?)", text).groups()
    scale = {"T": 1e12, "B": 1e9, "M": 1e6, "": 1}[unit]
    decimals = len(number.split(".")[1]) if "." in number else 0
    if significant and not decimals:
        decimals = -(len(number) - len(number.rstrip("0")))
    return float(number) * scale, 0.5 * 10**-decimals * scale


def close(ours: int, text: str, rounded: str = "nearest", bound: bool = False) -> bool:
    value, half = stated_value(text, significant=rounded == "significant")
    if bound:               # the figure includes parts costcalc does not model
        return ours <= value + half + SLACK * value
    if rounded == "down":
        return value - SLACK * value <= ours < value + 2 * half + SLACK * value
    return abs(ours - value) <= half + SLACK * value


MODELLED = ("embedding", "lm_head", "mtp", "mtp_copies")


def modelled(part: str, spec) -> bool:
    """A part a stated figure includes that costcalc counts (MTP modules only where the spec has them)."""
    return part in MODELLED and (not part.startswith("mtp") or spec is None or spec.mtp is not None)


def counted(got: dict, blocks: int, includes: list[str], spec=None) -> int:
    parts = dict(got)
    if spec is not None and spec.mtp is not None:   # the copies a DeepSeek-style checkpoint stores per module
        parts["mtp_copies_params"] = spec.mtp.count * 2 * spec["d"] * spec["V"]
    return blocks + sum(parts[f"{part}_params"] for part in includes if modelled(part, spec))


PUBLISHED = [n for n in presets.names() if n != "toy"]


def test_every_published_preset_states_its_counts():
    for name in PUBLISHED:
        stated = presets.load(name).stated
        assert "total_params" in stated and "source" in stated, name
    assert not presets.load("toy").stated        # the tutorial's toy is not a published model


@pytest.mark.parametrize("name", PUBLISHED)
def test_total_and_active_parameters_match_the_publisher(name):
    spec = presets.load(name)
    got = calc.parameters(spec)
    stated = spec.stated
    rounded = stated.get("rounded", "nearest")
    if "total_includes" in stated:
        includes = stated["total_includes"]
        total = counted(got, got["block_params"], [p for p in includes if p != "lm_head" or not spec.tied_embeddings],
                        spec)
        bound = any(not modelled(part, spec) for part in includes)
    else:
        total, bound = got["total_params"], False
    assert close(total, stated["total_params"], rounded, bound), (total, stated["total_params"])
    if "active_params" in stated:
        includes = stated["active_includes"]
        active = counted(got, got["block_active_params"], includes)
        assert close(active, stated["active_params"], rounded), (active, stated["active_params"])
    else:   # a dense model runs all of its block weights
        assert got["block_active_params"] == got["block_params"]


def test_parameter_parts_add_up():
    for spec in presets.load_all():
        got = calc.parameters(spec)
        head = 0 if spec.tied_embeddings else got["lm_head_params"]
        assert got["total_params"] == got["block_params"] + got["embedding_params"] + head
        assert got["active_params"] == got["block_active_params"] + got["lm_head_params"]
        assert got["block_active_params"] <= got["block_params"]
        assert got["block_active_params"] == calc.executed_linear_params(spec)


def test_presets_show_json_carries_the_counts(capsys):
    from costcalc.cli import main

    assert main(["presets", "show", "deepseek-v3", "--format", "json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    got = calc.parameters(presets.load("deepseek-v3"))
    for key in ("total_params", "active_params", "embedding_params", "lm_head_params"):
        assert row[key] == got[key]
    assert row["layers[1]"].startswith("3 x mla_q.dense") and row["layers[2]"].startswith("58 x mla_q.moe_shared")


# --- HF config import ---------------------------------------------------------------

CONFIG_FILES = sorted(p.stem for p in CONFIGS.glob("*.json"))


@pytest.mark.parametrize("name", CONFIG_FILES)
def test_importing_a_config_gives_the_preset(name):
    imported = hf.load(CONFIGS / f"{name}.json", name)
    preset = presets.load(name)
    assert [(g.count, g.arch, dict(g.sizes)) for g in imported.groups] == \
           [(g.count, g.arch, dict(g.sizes)) for g in preset.groups]
    assert imported.tied_embeddings == preset.tied_embeddings
    assert imported.dtypes == preset.dtypes          # the weight formats its quantization_config gives
    for seq in (1, 4096, 131072):
        assert calc.prefill(imported, seq, 2)["total_flops"] == calc.prefill(preset, seq, 2)["total_flops"]
    assert calc.decode(imported, 70000)["total_flops"] == calc.decode(preset, 70000)["total_flops"]
    assert calc.parameters(imported) == calc.parameters(preset)


def test_every_family_is_covered_by_a_real_config():
    families = {json.loads((CONFIGS / f"{n}.json").read_text())["model_type"] for n in CONFIG_FILES}
    assert {"llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v3",
            "gpt_oss", "gemma2", "gemma3", "deepseek_v2", "phi3", "phimoe", "granite", "granitemoe", "olmo2", "olmo3",
            "starcoder2", "gemma", "cohere", "gpt_neox", "glm4", "glm4_moe", "ernie4_5_moe", "exaone4", "smollm3",
            "seed_oss", "apertus", "llama4", "gptj", "phi", "stablelm", "nemotron", "ministral", "ernie4_5", "helium",
            "olmo", "gpt_bigcode", "opt", "bloom", "mpt", "cohere2", "glm", "hunyuan_v1_dense", "dots1",
            "hunyuan_v1_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe", "kimi_linear", "minimax",
            "kimi_k2", "kimi_k25", "minimax_m2", "qwen3_vl_moe"} <= families


def structure(name):
    return [(g.count, g.arch) for g in presets.load(name).groups]


def test_layer_structures_read_from_the_configs():
    assert structure("deepseek-v3") == [(3, "mla_q.dense"), (58, "mla_q.moe_shared")]
    assert structure("gpt-oss-20b") == [(12, "window.moe"), (12, "gqa.moe")]
    assert structure("gemma-2-9b") == [(21, "window.dense"), (21, "gqa.dense")]
    assert structure("gemma-3-12b") == [(40, "window.dense"), (8, "gqa.dense")]
    assert structure("mistral-7b-v0.1") == [(32, "window.dense")]
    assert structure("deepseek-v2-lite") == [(1, "mla.dense"), (26, "mla.moe_shared")]
    assert structure("qwen1.5-moe-a2.7b") == [(24, "gqa.moe_shared_gate")]
    assert presets.load("gemma-3-12b").groups[0].sizes["W"] == 1024


def variant(name: str, **changes) -> dict:
    config = json.loads((CONFIGS / f"{name}.json").read_text())
    config.update(changes)
    return config


def test_sparse_steps_and_dense_first_layers():
    qwen = hf.to_preset(variant("qwen3-30b-a3b", decoder_sparse_step=2, mlp_only_layers=[1]), "x")
    groups = [(g["count"], g["arch"]) for g in qwen["layers"]]
    # every second layer is MoE, but layer 1 is listed in mlp_only_layers: 25 dense, 23 MoE
    assert groups == [(25, "gqa.dense"), (23, "gqa.moe")]
    ds = hf.to_preset(variant("deepseek-v3", first_k_dense_replace=10), "y")
    assert [(g["count"], g["arch"]) for g in ds["layers"]] == [(10, "mla_q.dense"), (51, "mla_q.moe_shared")]


@pytest.mark.parametrize("change, message", [
    ({"model_type": "rwkv"}, "model_type 'rwkv' is not supported"),
    ({"num_mtp_heads": 3}, "field 'num_mtp_heads' (llama) is not understood"),
    ({"num_attention_heads": None}, "needs field 'num_attention_heads'"),
    ({"hidden_size": "4096"}, "must be a positive integer"),
    ({"layer_types": ["full_attention"]}, None),   # llama has no layer types: not understood
    ({"sliding_window": 4096}, "field 'sliding_window' (llama) is not understood"),
])
def test_import_refuses_to_guess(change, message):
    config = variant("llama-3.1-8b", **change)
    with pytest.raises(CostcalcError, match=re.escape(message) if message else "'layer_types' .* not understood"):
        spec = hf.to_preset(config, "x")
        from costcalc.spec import from_dict
        from_dict(spec, "x")


def test_a_window_on_a_family_that_has_none_is_refused():
    with pytest.raises(CostcalcError, match="'sliding_window' .olmoe. is not understood"):
        hf.to_preset(variant("olmoe-1b-7b", sliding_window=4096), "x")
    hf.to_preset(variant("olmoe-1b-7b", sliding_window=None), "x")     # null says nothing


def test_gemma_without_head_dim_is_an_error_not_a_guess():
    config = variant("gemma-2-9b")
    del config["head_dim"]
    with pytest.raises(CostcalcError, match="needs field 'head_dim'"):
        hf.to_preset(config, "x")


def test_presets_import_writes_a_preset_that_loads(tmp_path, capsys):
    from costcalc.cli import main

    target = tmp_path / "g.json"
    assert main(["presets", "import", str(CONFIGS / "gpt-oss-120b.json"), "--name", "g", "-o", str(target)]) == 0
    assert "116.79B parameters" in capsys.readouterr().err
    spec = presets.load_file(target)
    assert [(g.count, g.arch) for g in spec.groups] == structure("gpt-oss-120b")
    assert main(["prefill", "--config", str(CONFIGS / "gpt-oss-120b.json"), "--seq", "8", "-f", "json"]) == 0
    via_config = json.loads(capsys.readouterr().out)[0]["total_flops"]
    assert via_config == calc.prefill(presets.load("gpt-oss-120b"), 8)["total_flops"]
