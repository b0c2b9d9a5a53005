"""DeepSeek-V4 held against what transformers 5.23 builds and runs (modeling_deepseek_v4).

1. The model transformers builds on meta from a small config has the matrices costcalc counts.
2. The import (costcalc.hf, ``deepseek_v4``) maps the published DeepSeek-V4-Flash file and small configs
   to the layer groups transformers builds; what cannot be expressed is refused in one line.
3. FlopCounterMode (eager attention, batched experts) counts what costcalc's ``full`` convention
   does -- a prefill (no cache, logits at every position), a decode step and a cached chunk after a
   prefill through transformers' own DynamicCache (its rolling window of W-1 keys, its compressed
   entries) -- in total and module by module: transformers runs the dense rectangle of window keys and
   compressed entries with the causal and top-k choices as a mask, and its indexer scores every
   compressed index key. ``causal`` is the ideal kernel's work (tests/test_deepseek_v4.py).

The small config is tests/data/v4-tiny.json's model written as transformers' configuration.
"""
import json
from pathlib import Path

import pytest

from costcalc import calc, hf
from costcalc.errors import CostcalcError
from costcalc.spec import from_dict
from hf_rules import refused  # noqa: E402

DATA = Path(__file__).parent / "data"
SPEC = from_dict(json.loads((DATA / "v4-tiny.json").read_text()), "v4-tiny")
SMALL = dict(model_type="deepseek_v4", hidden_size=64, num_attention_heads=4, head_dim=16, q_lora_rank=24,
             o_groups=2, o_lora_rank=12, sliding_window=8, hc_mult=3,
             compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
             index_n_heads=2, index_head_dim=8, index_topk=3, n_routed_experts=4, num_experts_per_tok=2,
             moe_intermediate_size=32, vocab_size=128, num_hidden_layers=3,
             layer_types=["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"],
             mlp_layer_types=["hash_moe", "moe", "moe"], max_position_embeddings=256)
SEQ = 40      # 10 compressed entries in the csa layer (above index_topk 3), 2 in the hca one


FLASH = json.loads((DATA / "hf-configs" / "deepseek-v4-flash.json").read_text())
PRO = json.loads((DATA / "hf-configs" / "deepseek-v4-pro.json").read_text())


def groups(config: dict) -> list[tuple[int, str, dict]]:
    preset = hf.to_preset(config, "x")
    top = {k: v for k, v in preset.items() if k not in ("name", "title", "layers", "source", "tied_embeddings",
                                                        "arch", "L", "dtypes")}   # formats: test_weight_formats
    if "layers" not in preset:
        return [(preset["L"], preset["arch"], top)]
    return [(g["count"], g["arch"], {**top, **{k: v for k, v in g.items() if k not in ("count", "arch")}})
            for g in preset["layers"]]


# --- the import ----------------------------------------------------------------------------------

def test_the_table_holds_the_configuration_class():
    pytest.importorskip("transformers")
    import dataclasses

    from transformers import PreTrainedConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    cls = CONFIG_MAPPING["deepseek_v4"]
    base = {f.name for f in dataclasses.fields(PreTrainedConfig)}
    fields = {f.name for f in dataclasses.fields(cls) if f.name not in base}
    written = set(json.loads(cls().to_json_string(use_diff=True)))
    table = hf.TABLES["deepseek_v4"]
    assert set(table.rows) == fields | (written - base - {"model_type", "transformers_version"})
    assert not set(table.extra) & set(table.rows)
    assert set(cls.attribute_map) <= set(table.known())


def test_deepseek_v4_flash_maps_to_two_window_21_compressed_sparse_and_20_heavily_compressed_layers():
    attn = dict(d=4096, V=129280, h_q=64, d_h=512, r_q=1024, G_o=8, r_o=1024, W=128, n_hc=4,
                E=256, k=6, m_e=2048, E_s=1, m_s=2048)
    assert groups(FLASH) == [(2, "swa.moe_shared", attn),
                             (21, "csa.moe_shared", {**attn, "R_c": 4, "h_I": 64, "d_I": 128, "k_I": 512}),
                             (20, "hca.moe_shared", {**attn, "R_c": 128})]
    assert hf.to_preset(FLASH, "x")["tied_embeddings"] is False


def test_deepseek_v4_pro_maps_to_31_heavily_compressed_and_30_compressed_sparse_layers():
    attn = dict(d=7168, V=129280, h_q=128, d_h=512, r_q=1536, G_o=16, r_o=1024, W=128, n_hc=4,
                E=384, k=6, m_e=3072, E_s=1, m_s=3072)
    assert groups(PRO) == [(31, "hca.moe_shared", {**attn, "R_c": 128}),
                           (30, "csa.moe_shared", {**attn, "R_c": 4, "h_I": 64, "d_I": 128, "k_I": 1024})]


def test_the_file_as_transformers_rewrites_it_and_the_small_config_read_the_same():
    pytest.importorskip("transformers")
    from hf_models import rewrite

    assert groups(rewrite(FLASH)) == groups(FLASH)
    assert groups(rewrite(PRO)) == groups(PRO)
    assert groups(rewrite(SMALL)) == groups(SMALL)
    tiny = from_dict(hf.to_preset(SMALL, "v4-tiny"), "v4-tiny")
    assert [(g.count, g.block, dict(g.sizes)) for g in tiny.groups] == \
        [(g.count, g.block, dict(g.sizes)) for g in SPEC.groups]


def test_the_legacy_keys_and_the_default_schedule_read_as_transformers_reads_them():
    bare = {k: v for k, v in SMALL.items() if k not in ("layer_types", "compress_rates", "mlp_layer_types")}
    ratios = {**bare, "compress_ratios": [0, 4, 128, 0, 0], "compress_rate_hca": 16, "num_hash_layers": 1}
    assert [(c, a) for c, a, _ in groups(ratios)] == [(1, "swa.moe_shared"), (1, "csa.moe_shared"),
                                                       (1, "hca.moe_shared")]
    assert groups(ratios)[2][2]["R_c"] == 16 and groups(ratios)[1][2]["R_c"] == 4
    # neither layer_types nor compress_ratios: two heavily compressed, then hca and csa alternating
    default = groups({**bare, "num_hidden_layers": 5})
    assert [(c, a) for c, a, _ in default] == [(4, "hca.moe_shared"), (1, "csa.moe_shared")]
    assert default[0][2]["R_c"] == 128
    pytest.importorskip("transformers")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    built = CONFIG_MAPPING["deepseek_v4"](**{k: v for k, v in {**bare, "num_hidden_layers": 5}.items()
                                            if k != "model_type"})
    assert built.layer_types.count("compressed_sparse_attention") == 1


def test_what_cannot_be_expressed_is_refused_in_one_line():
    refused({**FLASH, "compress_ratios": [0, 0, 64] + [4] * 43}, "compress_ratios", "0, 4 or 128")
    refused({**FLASH, "compress_ratios": [0, 0, 4]}, "compress_ratios")
    refused({**SMALL, "layer_types": ["full_attention"] * 3}, "layer_types")
    refused({**SMALL, "mlp_layer_types": ["dense"] * 3}, "mlp_layer_types")
    refused({**FLASH, "num_key_value_heads": 8}, "num_key_value_heads", "one K=V head")
    refused({**FLASH, "o_groups": 7}, "o_groups (7) must divide")
    refused({k: v for k, v in FLASH.items() if k != "index_topk"}, "needs field 'index_topk'")
    refused({k: v for k, v in FLASH.items() if k != "hc_mult"}, "needs field 'hc_mult'")
    refused({**FLASH, "compress_rates": {"full_attention": 4}}, "compress_rates")
    refused({**FLASH, "dspark_layers": 3}, "dspark_layers")
    # a model without compressed sparse layers needs no indexer sizes
    hca = {k: v for k, v in SMALL.items() if not k.startswith("index_")}
    assert [a for _, a, _ in groups({**hca, "layer_types": ["sliding_attention"] * 3})] == ["swa.moe_shared"]


def test_mtp_and_dspark_are_ignored_and_the_storage_keys_set_formats_not_layers():
    bare = {k: v for k, v in FLASH.items() if not k.startswith("dspark") and k not in (
        "num_nextn_predict_layers", "quantization_config", "expert_dtype", "n_shared_experts")}
    assert groups(bare) == groups(FLASH) == groups({**FLASH, "n_shared_experts": 2})
    known = hf.TABLES["deepseek_v4"].known()
    for key in ("num_nextn_predict_layers", "dspark_target_layer_ids", "n_shared_experts"):
        assert known[key].role == "ignored", key
    for key in ("expert_dtype", "quantization_config"):    # the weight formats (tests/test_weight_formats.py)
        assert known[key].role == "used", key
    experts = lambda config: hf.to_preset(config, "x").get("dtypes", {}).get("experts")   # noqa: E731
    assert "dtypes" not in hf.to_preset(bare, "x")
    assert experts(FLASH) == "fp4-block1x32-ue8m0"
    # as 5.23 moves it: top level or inside quantization_config; fp8 (the default) or absent: as the rest
    inside = {k: v for k, v in FLASH.items() if k != "expert_dtype"}
    assert experts({**inside, "quantization_config": {**FLASH["quantization_config"], "expert_dtype": "fp4"}}) == \
        "fp4-block1x32-ue8m0"
    assert experts(inside) is None and experts({**FLASH, "expert_dtype": "fp8"}) is None
    refused({**FLASH, "expert_dtype": "int4"}, "expert_dtype", "'int4'", "fp8 or fp4")


@pytest.mark.parametrize("name, config", [("deepseek-v4-flash", FLASH), ("deepseek-v4-pro", PRO)])
def test_the_preset_is_the_imported_file(name, config):
    from costcalc import presets

    try:
        spec = presets.load(name)
    except CostcalcError:
        pytest.skip("presets of this tree are not installed (costcalc.preset_data maps elsewhere)")
    imported = from_dict(hf.to_preset(config, name), "x")
    assert [(g.count, g.block, dict(g.sizes)) for g in spec.groups] == \
        [(g.count, g.block, dict(g.sizes)) for g in imported.groups]


@pytest.mark.slow
@pytest.mark.parametrize("config", [FLASH, PRO], ids=["flash", "pro"])
def test_transformers_builds_the_published_models_with_the_matrices_costcalc_counts(config):
    pytest.importorskip("transformers")
    from hf_models import build, matrix_params

    built, family = build(config, experts=True)
    assert calc.parameters(from_dict(hf.to_preset(config, "x"), "x"))["total_params"] == matrix_params(built, family)


# --- what transformers builds and runs -------------------------------------------------------------

def model():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    torch.manual_seed(0)
    fields = {k: v for k, v in SMALL.items() if k != "model_type"}
    return AutoModelForCausalLM.from_config(CONFIG_MAPPING["deepseek_v4"](**fields), attn_implementation="eager",
                                            experts_implementation="batched_mm").eval()


def test_transformers_builds_the_matrices_costcalc_counts():
    pytest.importorskip("transformers")
    from hf_models import build, matrix_params

    built, family = build(SMALL, experts=True)
    assert calc.parameters(SPEC)["total_params"] == matrix_params(built, family)


def counted(run):
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        run()
    return counter


def test_a_prefill_is_what_full_counts_module_by_module():
    import torch

    m = model()
    with torch.no_grad():
        counter = counted(lambda: m(input_ids=torch.randint(0, 128, (1, SEQ)), use_cache=False, logits_to_keep=0))
    row = calc.prefill(SPEC, SEQ, 1, "full", logits="all")
    assert row["total_flops"] == counter.get_total_flops()
    flops = {path.removeprefix("DeepseekV4ForCausalLM.").removeprefix("model."): sum(c.values())
             for path, c in counter.get_flop_counts().items()}
    ops = calc.operators(SPEC, "prefill", "full", "all", seq=SEQ, batch=1)
    hyper = sum(v for k, v in ops.items() if k.endswith((".fn", ".comb")))
    layers = [f"layers.{i}" for i in range(3)]
    # each module's own count, its children's taken out: the layer's own is the two comb mixes
    comb = sum(flops[l] - flops[f"{l}.attn_hc"] - flops[f"{l}.self_attn"] - flops[f"{l}.ffn_hc"] - flops[f"{l}.mlp"]
               for l in layers)
    assert hyper == comb + sum(flops[f"{l}.attn_hc"] + flops[f"{l}.ffn_hc"] for l in layers)
    assert ops["hc_head"] == flops["hc_head"] and ops["lm_head"] == flops["lm_head"]
    scorer = flops["layers.1.self_attn.compressor.indexer.scorer"] - \
        flops["layers.1.self_attn.compressor.indexer.scorer.weights_proj"]
    assert ops["indexer"] == scorer
    named = ("q_a_proj", "q_b_proj", "kv_proj", "o_a_proj", "o_b_proj")
    for op in named:
        assert ops[op] == sum(flops[f"{l}.self_attn.{op}"] for l in layers), op
    for op in ("compressor.kv_proj", "compressor.gate_proj"):
        assert ops[op] == flops[f"layers.1.self_attn.{op}"] + flops[f"layers.2.self_attn.{op}"], op
    for op in ("kv_proj", "gate_proj", "q_b_proj"):
        assert ops[f"indexer.{op}"] == flops[f"layers.1.self_attn.compressor.indexer.{op}"], op
    assert ops["indexer.weights_proj"] == flops["layers.1.self_attn.compressor.indexer.scorer.weights_proj"]
    # attention: each self_attn less its projections, its compressor's and its indexer's
    own = sum(flops[f"{l}.self_attn"] - sum(flops[f"{l}.self_attn.{op}"] for op in named) for l in layers)
    own -= flops["layers.1.self_attn.compressor"] + flops["layers.2.self_attn.compressor"]
    assert ops["attention"] == own
    assert ops["router"] == sum(flops[f"{l}.mlp.gate"] for l in layers)       # hash layers run it too
    assert ops["experts.gate_proj"] + ops["experts.up_proj"] + ops["experts.down_proj"] == \
        sum(flops[f"{l}.mlp.experts"] for l in layers)


@pytest.mark.parametrize("past, new", [(SEQ, 1), (37, 1), (SEQ, 9), (35, 13)])
def test_a_cached_step_or_chunk_is_what_full_counts(past, new):
    import torch
    from transformers import DynamicCache

    m = model()
    cache = DynamicCache(config=m.config)
    ids = torch.randint(0, 128, (1, past + new))
    with torch.no_grad():
        m(input_ids=ids[:, :past], past_key_values=cache, use_cache=True)
        counter = counted(lambda: m(input_ids=ids[:, past:], past_key_values=cache, use_cache=True, logits_to_keep=1))
    row = calc.decode(SPEC, past, 1, "full") if new == 1 else calc.cached_prefill(SPEC, new, past, 1, "full")
    assert row["total_flops"] == counter.get_total_flops()
    assert calc.cached_prefill(SPEC, new, past, 1, "causal")["attention_flops"] < row["attention_flops"]


@pytest.mark.parametrize("past", [5, 16, 37])
def test_the_cache_transformers_keeps_is_the_window_and_one_entry_per_rate(past):
    """After a prefill of T: each layer's window holds min(T, W-1) keys of d_h (the step adds its own),
    its compressor floor(T / R_c) entries of d_h, a csa indexer as many of d_I -- the keys and entries
    costcalc's memory counts (min(T, W) window keys: the next step's own included)."""
    import torch
    from transformers import DynamicCache

    m = model()
    cache = DynamicCache(config=m.config)
    with torch.no_grad():
        m(input_ids=torch.randint(0, 128, (1, past)), past_key_values=cache, use_cache=True)
    rates = SMALL["compress_rates"]
    for layer, kind in zip(cache.layers, SMALL["layer_types"]):
        assert tuple(layer.keys.shape[-2:]) == (min(past, SMALL["sliding_window"] - 1), SMALL["head_dim"])
        if kind in rates:
            entries = layer.compressed_kv["compressor"]
            assert tuple(entries.shape[1:]) == (past // rates[kind], SMALL["head_dim"])
        if kind == "compressed_sparse_attention":
            assert tuple(layer.compressed_kv["indexer"].shape[1:]) == (past // rates[kind], SMALL["index_head_dim"])
