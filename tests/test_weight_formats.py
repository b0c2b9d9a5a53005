"""Weight formats: the bytes costcalc counts equal the bytes of the tensors each checkpoint format stores.

The tensors are built here, apart from costcalc's code: by transformers' own quantized modules on the
meta device where it has them (``FP8Linear``: fp8 per block and per tensor; gpt-oss's MXFP4 blocks and
scales, whose layout ``_convert_moe_packed_tensors`` dequantizes back to the matrix), else written from
the format's specification (NVFP4 from ModelOpt's export as vLLM loads it, GPTQ, AWQ, compressed-tensors'
pack-quantized). Then whole models: shrunken DeepSeek-V3 and gpt-oss configs built by transformers on the
meta device, each parameter stored by the checkpoint's rules (fast), and the real configs by arithmetic on
their fields. Biases, norms and gpt-oss's attention sinks are not matrices: costcalc counts matrices only
(docs/cost-model.md), and so do these sums.
"""
import json
import math
from pathlib import Path

import pytest

from cli_run import run
from costcalc import devices, hf, memory, presets, weights
from costcalc.errors import CostcalcError
from costcalc.evaluate import Query
from costcalc.roofline import Machine, Precision

CONFIGS = Path(__file__).resolve().parent / "data" / "hf-configs"
SHAPES = [(256, 128), (300, 200), (7168, 1536), (1536, 24576), (64, 1), (2880, 5760)]   # (in, out): some not divisible
cdiv = lambda a, b: -(-a // b)   # noqa: E731


def stored(tensors) -> int:
    """Bytes of a list of (shape, bytes per element)."""
    return sum(math.prod(shape) * size for shape, size in tensors)


# --- one matrix, format by format ---------------------------------------------------------------------

def _fp8_linear(fan_in, fan_out, block, scale_fmt="float"):
    import torch
    from transformers.integrations.finegrained_fp8 import FP8Linear

    with torch.device("meta"):
        module = FP8Linear(fan_in, fan_out, block_size=block, scale_fmt=scale_fmt)
    return sum(p.numel() * p.element_size() for name, p in module.named_parameters() if name != "bias")


@pytest.mark.parametrize("fan_in, fan_out", SHAPES)
def test_fp8_formats_store_what_transformers_fp8linear_holds(fan_in, fan_out):
    pytest.importorskip("transformers")
    assert weights.parse("fp8-block128").bytes(fan_in, fan_out) == _fp8_linear(fan_in, fan_out, (128, 128))
    assert weights.parse("fp8-block64x128").bytes(fan_in, fan_out) == _fp8_linear(fan_in, fan_out, (64, 128))
    assert weights.parse("fp8-tensor").bytes(fan_in, fan_out) == _fp8_linear(fan_in, fan_out, None)
    assert weights.parse("fp8-block128-ue8m0").bytes(fan_in, fan_out) == \
        _fp8_linear(fan_in, fan_out, (128, 128), "ue8m0")


@pytest.mark.parametrize("fan_in, fan_out", [(64, 8), (2880, 16), (96, 3)])
def test_mxfp4_blocks_and_scales_dequantize_to_the_matrix(fan_in, fan_out):
    """gpt-oss's checkpoint: ``*_blocks`` uint8 [E, out, in/32, 16] and ``*_scales`` uint8 [E, out, in/32];
    transformers turns them back into the [E, in, out] matrix, so this layout is the matrix's."""
    torch = pytest.importorskip("torch")
    from transformers.integrations.mxfp4 import _convert_moe_packed_tensors

    blocks = torch.zeros(1, fan_out, fan_in // 32, 16, dtype=torch.uint8)
    scales = torch.full((1, fan_out, fan_in // 32), 127, dtype=torch.uint8)
    assert _convert_moe_packed_tensors(blocks, scales).shape == (1, fan_in, fan_out)
    assert weights.parse("mxfp4").bytes(fan_in, fan_out) == blocks.numel() + scales.numel()


@pytest.mark.parametrize("fan_in, fan_out", SHAPES)
def test_the_other_checkpoint_formats_store_their_tensors(fan_in, fan_out):
    i, o = fan_in, fan_out
    # ModelOpt NVFP4: weight uint8 [out, in/2], weight_scale e4m3 [out, in/16], weight_scale_2 and input_scale fp32
    nvfp4 = [((o, cdiv(i, 2)), 1), ((o, cdiv(i, 16)), 1), ((), 4), ((), 4)]
    assert weights.parse("nvfp4").bytes(i, o) == stored(nvfp4)
    for bits in (4, 8):
        pack = 32 // bits
        for g in (32, 128):
            groups = cdiv(i, g)
            # GPTQ: qweight int32 [in/pack, out], qzeros int32 [groups, out/pack], scales fp16 [groups, out], g_idx int32 [in]
            gptq = [((cdiv(i, pack), o), 4), ((groups, cdiv(o, pack)), 4), ((groups, o), 2), ((i,), 4)]
            assert weights.parse(f"gptq-int{bits}-g{g}").bytes(i, o) == stored(gptq)
            # compressed-tensors pack-quantized: weight_packed int32 [out, in/pack], weight_scale bf16 [out, groups],
            # weight_shape int64 [2]; asymmetric: weight_zero_point int32 [out/pack, groups]
            ct = [((o, cdiv(i, pack)), 4), ((o, groups), 2), ((2,), 8)]
            assert weights.parse(f"ct-int{bits}-g{g}").bytes(i, o) == stored(ct)
            assert weights.parse(f"ct-int{bits}-g{g}-asym").bytes(i, o) == stored(ct + [((cdiv(o, pack), groups), 4)])
        gptq_channel = [((cdiv(i, pack), o), 4), ((1, cdiv(o, pack)), 4), ((1, o), 2), ((i,), 4)]
        assert weights.parse(f"gptq-int{bits}-gchannel").bytes(i, o) == stored(gptq_channel)
    # AWQ (gemm): qweight int32 [in, out/8], qzeros int32 [in/g, out/8], scales fp16 [in/g, out]
    awq = [((i, cdiv(o, 8)), 4), ((cdiv(i, 128), cdiv(o, 8)), 4), ((cdiv(i, 128), o), 2)]
    assert weights.parse("awq-int4-g128").bytes(i, o) == stored(awq)


def test_the_generic_dtypes_keep_their_rates():
    assert weights.parse("bf16").bytes(300, 200) == 300 * 200 * 2
    assert weights.parse("fp8").bytes(300, 200) == 300 * 200
    assert weights.parse("int4").bytes(256, 128, group_size=64) == 256 * 128 * (4 + 16 / 64) / 8


@pytest.mark.parametrize("name", ["fp7", "fp8-block0", "gptq-int3-g128", "gptq-int4-g0", "awq-int4-g0", "nvfp4x", "",
                                  "BF16", "fp8-block128x0", "ct-int4-g" + "9" * 30, None, 4])
def test_a_bad_format_name_is_one_error(name):
    with pytest.raises(CostcalcError, match="weight format"):
        weights.parse(name)


def _kinds():
    from costcalc.blocks import parse

    keys = {g.arch for spec in presets.load_all() for g in spec.groups}
    keys |= {"mla.moe", "mla_q.moe_shared_gate", "gqa.moe_plain_shared", "gqa+mamba2.dense", "kda.moe_shared",
             "mamba1.none", "shortconv.dense", "lightning.moe", "gqa-gated.moe_shared_gate", "none.moe",
             "gqa-keqv.moe_shared", "window-dv.moe", "gqa-hgated.dense", "swa.moe_shared", "hca.moe", "csa.moe_shared"}
    keys |= {spec.mtp.block.key for spec in presets.load_all() if spec.mtp is not None}   # mtp:<block>
    return [parse(k) for k in sorted(keys)]


def test_a_block_names_its_matrices_as_the_core_builds_them():
    from costcalc.core.linear import block

    for kind in _kinds():
        assert kind.matrices() == tuple(p.name for p in block(kind.with_form("naive")) if p.weight), kind.key


# --- whole models: shrunken configs built by transformers ----------------------------------------------

SMALL_V3 = {"model_type": "deepseek_v3", "hidden_size": 320, "num_hidden_layers": 3, "num_attention_heads": 4,
            "num_key_value_heads": 4, "intermediate_size": 700, "moe_intermediate_size": 200, "n_routed_experts": 4,
            "n_shared_experts": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 1, "q_lora_rank": 192,
            "kv_lora_rank": 160, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 96, "vocab_size": 1000,
            "n_group": 1, "topk_group": 1, "tie_word_embeddings": False,
            "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                    "weight_block_size": [128, 128]}}
SMALL_OSS = {"model_type": "gpt_oss", "hidden_size": 320, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 192, "num_local_experts": 4,
             "num_experts_per_tok": 2, "vocab_size": 1000, "sliding_window": 16, "tie_word_embeddings": False,
             "layer_types": ["sliding_attention", "full_attention"],
             "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
                 "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}}


def _meta_model(config):
    from hf_models import build

    return build({k: v for k, v in config.items() if k != "quantization_config"}, experts=False)[0]


def _checkpoint_bytes(model, rule) -> int:
    """Every matrix parameter of the model, stored by ``rule(name, shape)`` -> bytes (None: not a matrix)."""
    total = 0
    for name, p in model.named_parameters():
        got = rule(name, tuple(p.shape))
        total += got or 0
    return total


def _fp8_block(fan_in, fan_out):
    return fan_in * fan_out + cdiv(fan_out, 128) * cdiv(fan_in, 128) * 4


def _deepseek_fp8_rule(name, shape):
    """DeepSeek-V3's fp8 checkpoint: every linear in e4m3 with its fp32 128x128 scales; the router
    (``mlp.gate``), the embedding and the LM head in bf16; experts stored one matrix each (gate and up apart)."""
    if len(shape) < 2 or "norm" in name:
        return None
    if name.endswith(("mlp.gate.weight", "embed_tokens.weight", "lm_head.weight")):
        return math.prod(shape) * 2
    if name.endswith("experts.gate_up_proj"):             # [E, 2I, H]: gate [I, H] and up [I, H] per expert
        e, two_i, h = shape
        return e * 2 * _fp8_block(h, two_i // 2)
    if name.endswith("experts.down_proj"):                # [E, H, I]
        e, h, i = shape
        return e * _fp8_block(i, h)
    fan_out, fan_in = shape
    return _fp8_block(fan_in, fan_out)


def _mxfp4(fan_in, fan_out):
    return fan_out * cdiv(fan_in, 32) * 16 + fan_out * cdiv(fan_in, 32)


def _gpt_oss_rule(name, shape):
    """gpt-oss's checkpoint: experts in MXFP4 blocks and scales; attention, router, embedding and LM head bf16."""
    if len(shape) < 2 or "norm" in name or name.endswith(("bias", "sinks")):
        return None
    if name.endswith("experts.gate_up_proj"):             # [E, H, 2I] (in, out)
        e, h, two_i = shape
        return e * _mxfp4(h, two_i)
    if name.endswith("experts.down_proj"):                # [E, I, H]
        e, i, h = shape
        return e * _mxfp4(i, h)
    return math.prod(shape) * 2


@pytest.mark.parametrize("config, rule", [(SMALL_V3, _deepseek_fp8_rule), (SMALL_OSS, _gpt_oss_rule)],
                         ids=["deepseek_v3-fp8", "gpt_oss-mxfp4"])
def test_a_shrunken_quantized_model_holds_its_checkpoint_bytes(config, rule, tmp_path):
    pytest.importorskip("transformers")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    spec = hf.load(path, "small")
    expected = _checkpoint_bytes(_meta_model(config), rule)
    h200 = Machine(devices.load("h200"))
    row = memory.fit(Query(spec, "decode", memory.SERVING, Precision(), h200), 1, 16)
    assert row["weight_bytes_resident"] == expected
    assert row["weight_dtype_source"] == "quantization_config"


def _decode_weight_bytes(spec, mla="auto"):
    from costcalc import calc

    precision = Precision(routing="worst")            # every expert read: the whole model but its embedding
    row = calc.rows(calc.table(spec, "decode", mla=mla, precision=precision, batch=[64], context=[100]))[0]
    return row["weight_bytes"]


@pytest.mark.parametrize("mla", ["naive", "absorbed"])
def test_a_decode_step_that_touches_every_expert_reads_every_matrix_in_its_format(mla):
    """Absorbed MLA reads kv_b_proj as two slices: in kv_b_proj's format they add up to its bytes."""
    spec = presets.load("deepseek-v3")
    plan = Precision().weights(spec)
    rows, width, fmt = plan.embedding
    assert _decode_weight_bytes(spec, mla) == plan.resident() - fmt.bytes(width, rows)


# --- whole models: the real configs, by arithmetic on their fields -------------------------------------

def _deepseek_v3_checkpoint(c: dict) -> int:
    d, h, V = c["hidden_size"], c["num_attention_heads"], c["vocab_size"]
    nope, rope, v, r_q, r_kv = (c[k] for k in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "q_lora_rank",
                                                "kv_lora_rank"))
    attention = (_fp8_block(d, r_q) + _fp8_block(r_q, h * (nope + rope)) + _fp8_block(d, r_kv + rope)
                 + _fp8_block(r_kv, h * (nope + v)) + _fp8_block(h * v, d))
    swiglu = lambda width: 2 * _fp8_block(d, width) + _fp8_block(width, d)   # noqa: E731
    dense = c["first_k_dense_replace"]
    moe = c["num_hidden_layers"] - dense
    E, m_e = c["n_routed_experts"], c["moe_intermediate_size"]
    router = E * d * 2
    blocks = (dense * (attention + swiglu(c["intermediate_size"]))
              + moe * (attention + router + E * swiglu(m_e) + swiglu(c["n_shared_experts"] * m_e)))
    return blocks + 2 * V * d * 2      # the embedding and the untied LM head, bf16


def _gpt_oss_checkpoint(c: dict) -> int:
    d, V, E, m = c["hidden_size"], c["vocab_size"], c["num_local_experts"], c["intermediate_size"]
    q, kv = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
    attention = (d * q + 2 * d * kv + q * d) * 2
    layer = attention + E * d * 2 + E * (_mxfp4(d, 2 * m) + _mxfp4(m, d))
    return c["num_hidden_layers"] * layer + 2 * V * d * 2


@pytest.mark.parametrize("name, checkpoint", [("deepseek-v3", _deepseek_v3_checkpoint),
                                              ("gpt-oss-20b", _gpt_oss_checkpoint),
                                              ("gpt-oss-120b", _gpt_oss_checkpoint)])
def test_a_real_quantized_config_holds_its_checkpoint_bytes(name, checkpoint):
    config = json.loads((CONFIGS / f"{name}.json").read_text())
    for spec in (hf.load(CONFIGS / f"{name}.json", name), presets.load(name)):
        row = memory.fit(Query(spec, "decode", memory.SERVING, Precision(), Machine(devices.load("h200"))), 1, 1)
        assert row["weight_bytes_resident"] == checkpoint(config), spec.name


# --- precedence, labels and the import's rules ---------------------------------------------------------

def _memory_row(capsys, *extra):
    code, out, err = run(capsys, "memory", "-p", "deepseek-v3", "--batch", "1", "--context", "2k", "--device", "h200",
                         "-f", "json", *extra)
    assert code == 0, err
    return json.loads(out)[0]


def test_deepseek_v3_answers_in_its_shipped_fp8_and_says_so(capsys):
    row = _memory_row(capsys)
    assert row["weight_dtype"] == "fp8-block128; bf16: router lm_head embedding"
    assert row["weight_dtype_source"] == "preset"
    # usable: the reserve (0.1) off what an H200 exposes (nvidia-smi: 143771 MiB), not off the datasheet's 141e9
    assert row["usable_bytes"] == math.floor(143771 * 2**20 * 0.9)
    # the smallest layout: no fewer devices than the bytes need (5 in fp8, 10 in bf16). 5 devices: only tp1.pp5
    # (128 heads do not divide by 5), whose 13-layer stage does not fit; 6: tp2.pp3
    assert row["fits_on"] == "tp2.pp3" and math.ceil(row["total_bytes"] / row["usable_bytes"]) == 5
    bf16 = _memory_row(capsys, "--weight-dtype", "bf16")
    assert (bf16["weight_dtype"], bf16["weight_dtype_source"]) == ("bf16", "--weight-dtype")
    assert math.ceil(bf16["total_bytes"] / bf16["usable_bytes"]) == 10
    # 10 and 11 devices: no layout fits (tp2.pp5's and tp1.pp10's, tp1.pp11's largest stages are over); 12: tp4.pp3
    assert bf16["fits_on"] == "tp4.pp3"


def test_an_unquantized_model_is_bf16_by_default():
    row = memory.fit(Query(presets.load("llama-3.1-8b"), "decode", memory.SERVING, Precision(),
                           Machine(devices.load("h100"))), 1, 1)
    assert (row["weight_dtype"], row["weight_dtype_source"]) == ("bf16", "default")


def test_the_override_applies_to_every_module():
    spec = presets.load("gpt-oss-20b")
    plan = Precision("fp8-block128").weights(spec)
    formats = {fmt.name for group in plan.groups for *_, fmt in group.values()}
    assert formats == {"fp8-block128"} and plan.once["lm_head"][2].name == plan.embedding[2].name == "fp8-block128"


def _llama(quantization: dict) -> dict:
    return {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "tie_word_embeddings": False,
            "quantization_config": quantization}


def _import(config):
    return hf.to_preset(config, "q").get("dtypes")


def test_each_method_maps_to_its_format_and_its_modules():
    gptq = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": True, "sym": True}
    assert _import(_llama(gptq)) == {"default": "gptq-int4-g128", "lm_head": "bf16", "embedding": "bf16"}
    assert _import(_llama({**gptq, "lm_head": True})) == {"default": "gptq-int4-g128", "embedding": "bf16"}
    awq = {"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": True, "version": "gemm"}
    assert _import(_llama(awq)) == {"default": "awq-int4-g64", "lm_head": "bf16", "embedding": "bf16"}
    nvfp4 = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
             "exclude_modules": ["lm_head", "model.layers.*.self_attn*"]}
    assert _import(_llama(nvfp4)) == {"default": "bf16", "gate_proj": "nvfp4", "up_proj": "nvfp4",
                                      "down_proj": "nvfp4"}
    ct = {"quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head", "re:.*self_attn.*"],
          "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None, "weights": {
              "num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 32,
              "dynamic": False}}}}
    assert _import(_llama(ct)) == {"default": "bf16", "gate_proj": "ct-int4-g32", "up_proj": "ct-int4-g32",
                                   "down_proj": "ct-int4-g32"}


@pytest.mark.parametrize("quantization, message", [
    ({"quant_method": "bitsandbytes"}, "quant_method 'bitsandbytes' is not a weight format"),
    ({"quant_method": "fp8", "weight_block_size": [128, 128], "surprise": 1}, "key 'surprise' is not understood"),
    ({"quant_method": "fp8", "modules_to_not_convert": ["model.layers.0.mlp"]}, "in some layers or experts only"),
    ({"quant_method": "fp8", "modules_to_not_convert": ["model.decoder.fc9"]}, "names no module costcalc counts"),
    ({"quant_method": "fp8", "activation_scheme": "static"}, "activation_scheme 'static'"),
    ({"quant_method": "modelopt", "quant_algo": "FP8"}, "only NVFP4 is read"),
    # a pattern the method's own code would fail to compile: a one-line refusal, never a traceback
    ({"quant_method": "fp8", "modules_to_not_convert": ["("]}, r"'\(' is not a regular expression"),
    ({"quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["re:("], "config_groups": {
        "group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "symmetric": True,
                                                       "strategy": "group", "group_size": 32}}}},
     r"'re:\(' is not a regular expression"),
    ({"quant_method": "fp8", "weight_block_size": [True, True]}, r"weight_block_size must be \[out, in\]"),
    ({"quant_method": "fp8", "weight_block_size": [1 << 40, 128]}, r"weight_block_size must be \[out, in\]"),
    ({"quant_method": "fp8", "weight_block_size": [128, 128], "expert_dtype": ["fp4"]}, "expert_dtype"),
    ({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"group_0": 1}},
     "config_groups.group_0: weights targeting"),
])
def test_what_cannot_be_mapped_is_refused_by_name(quantization, message):
    with pytest.raises(CostcalcError, match=message):
        _import(_llama(quantization))


def test_a_pattern_naming_the_layers_past_the_decoder_is_the_mtp_modules_and_changes_nothing():
    """DeepSeek's checkpoints name their MTP module as the layer after the last (model.layers.61 of V3)."""
    fp8 = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    assert _import(_llama({**fp8, "modules_to_not_convert": ["model.layers.2"]})) == _import(_llama(fp8))
    with pytest.raises(CostcalcError, match="in some layers or experts only"):
        _import(_llama({**fp8, "modules_to_not_convert": ["model.layers.1"]}))


def test_a_narrow_table_of_several_models_still_says_each_ones_weight_formats(capsys):
    code, out, err = run(capsys, "memory", "-p", "deepseek-v3,llama-3.1-8b", "-t", "8k", "-d", "h200")
    out = " ".join(out.split())          # notes are wrapped to the terminal's width
    assert code == 0 and "weight_dtype of deepseek-v3: fp8-block128; bf16: router lm_head embedding (preset)" in out
    assert "weight_dtype of llama-3.1-8b: bf16 (default)" in out


def test_a_dtypes_key_that_names_no_module_is_an_error():
    spec = presets.load("llama-3.1-8b").to_dict()
    spec["dtypes"] = {"experts": "mxfp4"}
    from costcalc.spec import from_dict

    with pytest.raises(CostcalcError, match="'experts', which is no weight of this model"):
        Precision().weights(from_dict(spec, "preset file 'x'"))
    spec["dtypes"] = {"attention": "bf16"}       # a term of products without weights (QK^T, AV)
    with pytest.raises(CostcalcError, match="'attention', which is no weight of this model"):
        Precision().weights(from_dict(spec, "preset file 'x'"))


# --- DeepSeek-V4: fp8 everywhere transformers converts, fp4 routed experts (expert_dtype) ---------------

def _fp4_experts(hidden, inter, experts, scale_fmt):
    """transformers' FP8Experts with expert_dtype="fp4" on meta: int8 [E, 2I, H/2] and [E, I/2... ] weights, a
    scale per row per 32 inputs (``_alloc_expert_proj``, ``min_sf_out=2`` on the fused gate_up)."""
    import types

    import torch
    from transformers.integrations.finegrained_fp8 import FP8Experts

    config = types.SimpleNamespace(hidden_size=hidden, num_experts=experts, moe_intermediate_size=inter,
                                   hidden_act="silu")
    with torch.device("meta"):
        module = FP8Experts(config, block_size=(128, 128), scale_fmt=scale_fmt, expert_dtype="fp4")
    return sum(p.numel() * p.element_size() for _, p in module.named_parameters())


@pytest.mark.parametrize("hidden, inter", [(4096, 2048), (7168, 3072), (200, 48), (64, 2), (160, 18)])
@pytest.mark.parametrize("scale_fmt", ["ue8m0", "float"])
def test_fp4_experts_store_what_transformers_fp8experts_holds(hidden, inter, scale_fmt):
    pytest.importorskip("transformers")
    fmt = weights.parse("fp4-block1x32" + ("-ue8m0" if scale_fmt == "ue8m0" else ""))
    # gate and up (H -> I each, fused in one [2I, H/2] tensor) and down (I -> H), 3 experts
    assert 3 * (2 * fmt.bytes(hidden, inter) + fmt.bytes(inter, hidden)) == \
        _fp4_experts(hidden, inter, 3, scale_fmt)


def test_fp4_experts_are_not_mxfp4_where_32_does_not_divide_a_row():
    """The same bytes as gpt-oss's MXFP4 where 32 divides the inputs (V4's widths), not otherwise: MXFP4
    pads each row to whole blocks of 32 (16 bytes each), FP8Experts packs the row as it is."""
    fp4, mx = weights.parse("fp4-block1x32-ue8m0"), weights.parse("mxfp4")
    assert fp4.bytes(4096, 2048) == mx.bytes(4096, 2048)
    assert fp4.bytes(200, 48) == 48 * 100 + 48 * 7 != mx.bytes(200, 48) == 48 * 7 * 16 + 48 * 7


SMALL_V4 = {"model_type": "deepseek_v4", "hidden_size": 200, "num_attention_heads": 4, "head_dim": 64,
            "q_lora_rank": 96, "o_groups": 2, "o_lora_rank": 128, "sliding_window": 8, "hc_mult": 2,
            "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
            "index_n_heads": 2, "index_head_dim": 32, "index_topk": 3, "n_routed_experts": 4,
            "num_experts_per_tok": 2, "moe_intermediate_size": 48, "vocab_size": 128, "num_hidden_layers": 3,
            "layer_types": ["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"],
            "mlp_layer_types": ["hash_moe", "moe", "moe"], "max_position_embeddings": 256,
            "tie_word_embeddings": False, "expert_dtype": "fp4",
            "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                    "scale_fmt": "ue8m0", "weight_block_size": [128, 128]}}


def _v4_quantized(config):
    """The model transformers 5.23 builds for a V4 config, with its fp8 quantizer's modules in place (the
    pre-quantized load path: FP8Linear, FP8GroupedLinear, FP8Experts with the moved expert_dtype), on meta."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.quantizers.auto import AutoHfQuantizer, AutoQuantizationConfig

    built = CONFIG_MAPPING["deepseek_v4"](**{k: v for k, v in config.items() if k != "model_type"})
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(built, dtype=torch.bfloat16)
    quantizer = AutoHfQuantizer.from_config(AutoQuantizationConfig.from_dict(built.quantization_config),
                                            pre_quantized=True)
    quantizer._process_model_before_weight_loading(model)
    return model


def _loaded_bytes(model) -> int:
    """Each matrix tensor as a bf16 load holds it: its own dtype, fp32 for ``_keep_in_fp32_modules_strict``
    (the hyper-connections); the compressors' learned position biases [R_c, width] are added, not multiplied."""
    strict = set(model._keep_in_fp32_modules_strict)
    total = 0
    for name, p in model.named_parameters():
        if p.ndim < 2 or name.endswith("position_bias"):
            continue
        total += p.numel() * (4 if strict & set(name.split(".")) else p.element_size())
    return total


def _resident(spec) -> int:
    row = memory.fit(Query(spec, "decode", memory.SERVING, Precision(), Machine(devices.load("h200"))), 1, 16)
    return row["weight_bytes_resident"]


def test_a_shrunken_deepseek_v4_holds_what_transformers_fp8_quantizer_builds(tmp_path):
    """128 divides neither the hidden size (200) nor the experts' width (48): every ceil is exercised. (The
    grouped o_a_proj's rank is 128: transformers holds one [G_o r_o, in] FP8 weight whose 128-row scale blocks
    would straddle two groups otherwise, where costcalc counts G_o matrices; V4's published ranks are 1024.)"""
    pytest.importorskip("transformers")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(SMALL_V4))
    assert _resident(hf.load(path, "small")) == _loaded_bytes(_v4_quantized(SMALL_V4))


def test_deepseek_v4_modules_are_matched_by_the_names_transformers_gives_them():
    """The indexer lives in its layer's compressor (weights_proj in the indexer's scorer), the hyper-connections
    on the layer; patterns by transformers' rule (should_convert_module: a regex from the start to a module
    boundary, or a suffix) reach them: the whole indexer, its q_b_proj included, then stays bf16."""
    def formats(patterns):
        config = {**SMALL_V4, "quantization_config": {**SMALL_V4["quantization_config"],
                                                      "modules_to_not_convert": patterns}}
        dtypes = hf.to_preset(config, "x")["dtypes"]
        return {op: weights.resolve(dtypes, op, term) for op, term in (
            ("indexer.q_b_proj", "indexer_proj"), ("indexer.weights_proj", "indexer_proj"), ("q_b_proj", "attn_proj"),
            ("attn_hc.fn", "hyper"))}
    plain = formats([])
    assert plain["indexer.q_b_proj"] == plain["q_b_proj"] == "fp8-block128-ue8m0"
    assert formats([r".*self_attn\.compressor\.indexer"]) == {**plain, "indexer.q_b_proj": "bf16"}
    assert formats(["compressor.indexer.scorer.weights_proj", r".*\.attn_hc"]) == plain   # kept as they were


def _deepseek_v4_checkpoint(c: dict) -> int:
    """DeepSeek-V4's tensors by transformers 5.23's rules, from the config's fields: fp8 e4m3 with one ue8m0
    scale per 128x128 block; routed experts fp4 (two a byte) with one ue8m0 scale per row per 32 inputs; the
    compressors' and indexer's kv/gate projections and the indexer's weights_proj bf16 (shipped so:
    ``_keep_in_fp32_modules``), the hyper-connections fp32 (strict), router, embedding and LM head bf16."""
    fp8 = lambda i, o: i * o + cdiv(o, 128) * cdiv(i, 128)           # noqa: E731
    fp4 = lambda i, o: o * i // 2 + o * cdiv(i, 32)                    # noqa: E731
    d, V, hq, dh, rq = (c[k] for k in ("hidden_size", "vocab_size", "num_attention_heads", "head_dim", "q_lora_rank"))
    G, ro, nhc, E, me = (c[k] for k in ("o_groups", "o_lora_rank", "hc_mult", "n_routed_experts",
                                        "moe_intermediate_size"))
    hI, dI = c["index_n_heads"], c["index_head_dim"]
    attention = fp8(d, rq) + fp8(rq, hq * dh) + fp8(d, dh) + fp8(hq * dh // G, G * ro) + fp8(G * ro, d)
    hyper = 2 * 4 * (nhc * d) * nhc * (2 + nhc)
    ffn = 2 * d * E + E * (2 * fp4(d, me) + fp4(me, d)) + 2 * fp8(d, me) + fp8(me, d)
    compressor = {0: 0, 128: 2 * 2 * d * dh, 4: 2 * 2 * d * 2 * dh + 2 * 2 * d * 2 * dI + fp8(rq, hI * dI) + 2 * d * hI}
    layers = sum(attention + hyper + ffn + compressor[r] for r in c["compress_ratios"][:c["num_hidden_layers"]])
    return layers + 4 * nhc * d * nhc + 2 * V * d * 2


@pytest.mark.parametrize("name", ["deepseek-v4-flash", "deepseek-v4-pro"])
def test_deepseek_v4_holds_its_checkpoint_bytes(name):
    config = json.loads((CONFIGS / f"{name}.json").read_text())
    for spec in (hf.load(CONFIGS / f"{name}.json", name), presets.load(name)):
        assert _resident(spec) == _deepseek_v4_checkpoint(config), spec.name


@pytest.mark.slow
@pytest.mark.parametrize("name", ["deepseek-v4-flash", "deepseek-v4-pro"])
def test_deepseek_v4_holds_what_transformers_fp8_quantizer_builds(name):
    pytest.importorskip("transformers")
    config = json.loads((CONFIGS / f"{name}.json").read_text())
    assert _resident(hf.load(CONFIGS / f"{name}.json", name)) == _loaded_bytes(_v4_quantized(config)) == \
        _deepseek_v4_checkpoint(config)


@pytest.mark.parametrize("name, label", [
    ("deepseek-v4-flash", "fp8-block128-ue8m0; fp32: attn_hc.fn ffn_hc.fn hc_head; bf16: router compressor.kv_proj "
                          "compressor.gate_proj indexer.kv_proj indexer.gate_proj indexer.weights_proj lm_head "
                          "embedding; fp4-block1x32-ue8m0: experts"),
    ("kimi-k2-instruct", "fp8-block128; bf16: router lm_head embedding")])
def test_the_new_quantized_presets_answer_in_their_shipped_formats_and_say_so(capsys, name, label):
    code, out, err = run(capsys, "memory", "-p", name, "--batch", "1", "--context", "128k", "--device", "h200",
                         "-f", "json")
    assert code == 0, err
    row = json.loads(out)[0]
    assert (row["weight_dtype"], row["weight_dtype_source"]) == (label, "preset")
    config = json.loads((CONFIGS / f"{name}.json").read_text())
    if name == "deepseek-v4-flash":
        assert row["weight_bytes_resident"] == _deepseek_v4_checkpoint(config)
        usable = devices.load("h200").mem_bytes * 9 / 10          # the default --reserve 0.1
        assert math.ceil(row["total_bytes"] / usable) == 2 and not row["fits"]
        assert row["fits_on"] == "tp2"     # two devices' memory: its heads and experts split over them
