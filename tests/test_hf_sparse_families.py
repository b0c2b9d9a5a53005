"""The sparse-attention families (deepseek_v32, glm_moe_dsa: DeepSeek Sparse Attention) held against
transformers 5.23's classes and what they build and run.

1. Each family's table holds its configuration class's keys (as tests/test_hf_transformers.py holds
   every family's).
2. The published configs (tests/data/hf-configs/deepseek-v3.2.json, glm-5.json) and small ones map to
   ``mla_q-sparse`` layer groups with the indexer's sizes h_I, d_I, k_I; what cannot be expressed
   (GLM's ``shared`` indexer layers, no query LoRA, another layer type) is refused in one line.
3. The model transformers builds on meta from a small config has the matrices the mapped sizes say:
   held against a count written out here (runs with transformers alone), and against costcalc's
   total_params (needs the sparse block).
4. FlopCounterMode's count of one prefill (eager attention, batched experts, logits at every
   position) equals costcalc's ``full`` prefill with all logits: the indexer over the whole S x S
   rectangle, the expanded MLA over every key (the top-k becomes a mask). Needs the sparse block.

The checks that call costcalc's calculator on a ``-sparse`` block are skipped until the sparse block
kind (costcalc.blocks, vocab h_I d_I k_I) is present; the rest run now.
"""
import json

import pytest

from costcalc import hf
from hf_rules import CONFIGS, refused



FAMILIES = ("deepseek_v32", "glm_moe_dsa")
MLA = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, intermediate_size=96, vocab_size=128,
           q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=12,
           moe_intermediate_size=32, n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2,
           index_n_heads=4, index_head_dim=8, index_topk=6, max_position_embeddings=256)
SMALL = {
    # one dense layer, then two MoE layers (first_k_dense_replace)
    "deepseek_v32": dict(MLA, model_type="deepseek_v32", num_hidden_layers=3, first_k_dense_replace=1, n_group=1,
                         topk_group=1),
    # dense, MoE, dense by mlp_layer_types (which wins over first_k_dense_replace); every layer its own indexer
    "glm_moe_dsa": dict(MLA, model_type="glm_moe_dsa", num_hidden_layers=3, mlp_layer_types=["dense", "sparse", "dense"],
                        index_n_heads=2, index_head_dim=6, n_shared_experts=2),
}


def groups(config: dict) -> list[tuple[int, str, dict]]:
    """(count, arch, every size) of each group the import writes, shared sizes folded back in."""
    preset = hf.to_preset(config, "x")
    top = {k: v for k, v in preset.items() if k not in ("name", "title", "layers", "arch", "L", "tied_embeddings",
                                                        "source", "V", "d", "mtp", "dtypes")}
    if "layers" not in preset:
        return [(preset["L"], preset["arch"], top)]
    return [(g["count"], g["arch"], {**top, **{k: v for k, v in g.items() if k not in ("count", "arch")}})
            for g in preset["layers"]]


# --- 1. the tables --------------------------------------------------------------------------------

@pytest.mark.parametrize("family", FAMILIES)
def test_each_sparse_table_holds_its_configuration_class(family):
    pytest.importorskip("transformers")
    import dataclasses

    from transformers import PreTrainedConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cls = CONFIG_MAPPING[family]
    base = {f.name for f in dataclasses.fields(PreTrainedConfig)}
    fields = {cls.attribute_map.get(f.name, f.name) for f in dataclasses.fields(cls) if f.name not in base}
    written = set(json.loads(cls().to_json_string(use_diff=True)))
    table = hf.TABLES[family]
    assert set(table.rows) == fields | (written - base - {"model_type", "transformers_version"})
    assert not set(table.extra) & set(table.rows)
    assert set(cls.attribute_map) <= set(table.known())
    assert {"index_n_heads", "index_head_dim", "index_topk"} <= {k for k, row in table.rows.items() if row.role == "used"}


# --- 2. the layer groups --------------------------------------------------------------------------

MLA_V32 = dict(h_q=128, r_kv=512, d_nope=128, d_rope=64, d_v=128, r_q=1536)
MLA_GLM5 = dict(h_q=64, r_kv=512, d_nope=192, d_rope=64, d_v=256, r_q=2048)
MOE = dict(E=256, k=8, m_e=2048, E_s=1, m_s=2048)


def test_deepseek_v32_maps_to_sparse_mla_layers_dense_first():
    config = json.loads((CONFIGS / "deepseek-v3.2.json").read_text())
    index = dict(h_I=64, d_I=128, k_I=2048)
    assert groups(config) == [(3, "mla_q-sparse.dense", {**MLA_V32, **index, "m": 18432}),
                              (58, "mla_q-sparse.moe_shared", {**MLA_V32, **index, **MOE})]
    preset = hf.to_preset(config, "x")
    assert (preset["d"], preset["V"], preset["tied_embeddings"]) == (7168, 129280, False)


def test_glm_5_maps_to_sparse_mla_layers_dense_first():
    config = json.loads((CONFIGS / "glm-5.json").read_text())
    index = dict(h_I=32, d_I=128, k_I=2048)
    assert groups(config) == [(3, "mla_q-sparse.dense", {**MLA_GLM5, **index, "m": 12288}),
                              (75, "mla_q-sparse.moe_shared", {**MLA_GLM5, **index, **MOE})]


def test_small_configs_map_layer_by_layer():
    mla = dict(h_q=4, r_kv=16, d_nope=8, d_rope=4, d_v=12, r_q=24)
    moe = dict(E=4, k=2, m_e=32)
    assert groups(SMALL["deepseek_v32"]) == [
        (1, "mla_q-sparse.dense", {**mla, "h_I": 4, "d_I": 8, "k_I": 6, "m": 96}),
        (2, "mla_q-sparse.moe_shared", {**mla, "h_I": 4, "d_I": 8, "k_I": 6, **moe, "E_s": 1, "m_s": 32})]
    assert groups(SMALL["glm_moe_dsa"]) == [
        (2, "mla_q-sparse.dense", {**mla, "h_I": 2, "d_I": 6, "k_I": 6, "m": 96}),
        (1, "mla_q-sparse.moe_shared", {**mla, "h_I": 2, "d_I": 6, "k_I": 6, **moe, "E_s": 2, "m_s": 32})]


def test_the_class_default_of_three_dense_layers_and_the_rewritten_config_read_the_same():
    config = {k: v for k, v in SMALL["deepseek_v32"].items() if k != "first_k_dense_replace"}
    config["num_hidden_layers"] = 5
    assert [(c, a) for c, a, _ in groups(config)] == [(3, "mla_q-sparse.dense"), (2, "mla_q-sparse.moe_shared")]
    pytest.importorskip("transformers")
    from hf_models import rewrite

    for name in ("deepseek-v3.2", "glm-5"):
        original = json.loads((CONFIGS / f"{name}.json").read_text())
        assert groups(rewrite(original)) == groups(original), name


def test_what_cannot_be_expressed_is_refused_in_one_line():
    glm = json.loads((CONFIGS / "glm-5.json").read_text())
    # GLM-5.2's index sharing: every 4th layer from layer 3 on runs the indexer, the others reuse it
    refused({**glm, "index_topk_freq": 4, "index_skip_topk_offset": 3}, "layer 3", "'shared'", "does not model")
    refused({**glm, "index_topk_pattern": "F" * 77 + "S"}, "layer 77", "'shared'")
    refused({**glm, "indexer_types": ["full"] * 77 + ["shared"]}, "layer 77", "'shared'")
    assert groups({**glm, "index_topk_freq": 1, "indexer_types": ["full"] * 78}) == groups(glm)
    v32 = json.loads((CONFIGS / "deepseek-v3.2.json").read_text())
    refused({**v32, "q_lora_rank": None}, "'q_lora_rank' must be a number")
    refused({k: v for k, v in v32.items() if k != "q_lora_rank"}, "needs field 'q_lora_rank'")
    refused({**v32, "layer_types": ["full_attention"] * 61}, "indexed_attention")
    refused({**v32, "mlp_layer_types": ["dense"] * 60}, "mlp_layer_types")
    refused({**v32, "index_head_dim": 32}, "index_head_dim (32) must be at least qk_rope_head_dim (64)")
    refused({k: v for k, v in v32.items() if k != "index_topk"}, "needs field 'index_topk'")
    refused({**v32, "indexer_types": ["full"] * 61}, "'indexer_types'", "not understood")   # GLM's key only
    refused({**v32, "num_key_value_heads": 1}, "num_key_value_heads")


def test_mtp_layers_are_apart_from_the_decoder_and_quantization_sets_only_the_weight_formats():
    v32 = json.loads((CONFIGS / "deepseek-v3.2.json").read_text())
    bare = {k: v for k, v in v32.items() if k not in ("num_nextn_predict_layers", "quantization_config")}
    assert groups(bare) == groups({**v32, "num_nextn_predict_layers": 3})     # the decoder's layers: unchanged
    assert "mtp" not in hf.to_preset(bare, "x")
    assert hf.to_preset({**v32, "num_nextn_predict_layers": 3}, "x")["mtp"] == {"count": 3}   # the last layer's kind
    assert "dtypes" not in hf.to_preset(bare, "x") and hf.to_preset(v32, "x")["dtypes"]["default"] == "fp8-block128"
    for family in FAMILIES:
        known = hf.TABLES[family].known()
        assert known["num_nextn_predict_layers"].role == "used" and "not built" in known["num_nextn_predict_layers"].reason
        assert known["quantization_config"].role == "used"     # weight formats (docs/hf-import.md): bytes, not FLOPs


# --- 3. parameters of what transformers builds -----------------------------------------------------

def mapped_matrices(config: dict) -> int:
    """The matrices the mapped sizes describe: MLA with a query LoRA, the indexer's three
    projections, SwiGLU FFNs / routed + shared experts / router, embedding and untied LM head."""
    preset = hf.to_preset(config, "x")
    d, V = preset["d"], preset["V"]
    total = 2 * V * d
    for count, arch, s in groups(config):
        attn = (d * s["r_q"] + s["r_q"] * s["h_q"] * (s["d_nope"] + s["d_rope"]) + d * (s["r_kv"] + s["d_rope"])
                + s["r_kv"] * s["h_q"] * (s["d_nope"] + s["d_v"]) + s["h_q"] * s["d_v"] * d)
        indexer = s["r_q"] * s["h_I"] * s["d_I"] + d * s["d_I"] + d * s["h_I"]
        if arch.endswith(".dense"):
            ffn = 3 * d * s["m"]
        else:
            ffn = 3 * d * s["m_e"] * (s["E"] + s["E_s"]) + s["E"] * d
        total += count * (attn + indexer + ffn)
    return total


def meta_matrices(config: dict) -> int:
    pytest.importorskip("torch")
    from hf_models import build, matrix_params

    model, family = build(config, experts=True)
    return matrix_params(model, family)


@pytest.mark.parametrize("family", FAMILIES)
def test_transformers_builds_the_matrices_the_mapped_sizes_say(family):
    pytest.importorskip("transformers")
    config = SMALL[family]
    assert meta_matrices(config) == mapped_matrices(config)


@pytest.mark.parametrize("family", FAMILIES)
def test_total_params_equal_what_transformers_builds(family):
    from costcalc import calc
    from costcalc.spec import from_dict

    pytest.importorskip("transformers")
    config = SMALL[family]
    spec = from_dict(hf.to_preset(config, "small"), "small")
    assert calc.parameters(spec)["total_params"] == meta_matrices(config) == mapped_matrices(config)


# --- 4. prefill FLOPs under ``full`` ----------------------------------------------------------------

SEQ = 16      # above index_topk (6): the top-k mask is not all-true


def counted_prefill(family: str):
    """transformers' small model of the family run over SEQ tokens on the CPU (real weights: the
    indexer's top-k and the mask scatter read values), logits at every position: (output, counter)."""
    pytest.importorskip("torch")
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    fields = {k: v for k, v in SMALL[family].items() if k != "model_type"}
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(CONFIG_MAPPING[family](**fields), attn_implementation="eager",
                                             experts_implementation="batched_mm").eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = model(input_ids=torch.randint(0, 128, (1, SEQ)), use_cache=False, logits_to_keep=0)
    return out, counter


@pytest.mark.parametrize("family", FAMILIES)
def test_full_prefill_with_all_logits_equals_flop_counter(family):
    from costcalc import calc
    from costcalc.spec import from_dict

    config = SMALL[family]
    out, counter = counted_prefill(family)
    assert tuple(out.logits.shape[:2]) == (1, SEQ)
    spec = from_dict(hf.to_preset(config, "small"), "small")
    row = calc.prefill(spec, SEQ, 1, "full", logits="all")
    assert row["total_flops"] == counter.get_total_flops()
    assert row.get("indexer_flops") and row.get("indexer_proj_flops")


@pytest.mark.parametrize("family", FAMILIES)
def test_the_indexer_transformers_runs_costs_its_projections_and_the_whole_rectangle(family):
    """Without the calculator: each layer's indexer module counts 2 S (r_q h_I d_I + d d_I + d h_I)
    for wq_b, wk, weights_proj and 2 h_I (d_I + 1) per (query, key) pair of the S x S rectangle
    (q.k per head, then the weighted head sum) -- what ``full`` must count."""
    config = SMALL[family]
    _, counter = counted_prefill(family)
    per_module = {path: sum(c.values()) for path, c in counter.get_flop_counts().items() if path.endswith(".indexer")}
    d = config["hidden_size"]
    r_q, h_I, d_I = config["q_lora_rank"], config["index_n_heads"], config["index_head_dim"]
    expected = 2 * SEQ * (r_q * h_I * d_I + d * d_I + d * h_I) + 2 * h_I * (d_I + 1) * SEQ * SEQ
    assert len(per_module) == config["num_hidden_layers"]
    assert set(per_module.values()) == {expected}
