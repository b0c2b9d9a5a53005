"""The MTP modules of MiMo-7B, MiMo-V2-Flash and Step-3.5/3.7 (hf.MTP_KEYS, the families' MTP_LAYERS
rules), each held to an independent count written here from the config by its reference code's rules,
and DeepSeek-V4's MTP key, which stays ignored (docs/hf-import.md, "MTP layers").

- MiMo-7B's remote ``modeling_mimo.py``: ``MiMoMTPLayers`` holds ``input_proj = nn.Linear(2 d, d)``,
  ``Qwen2Attention(config, layer_idx=0)`` and ``Qwen2MLP(config)`` (and norms); built below from
  transformers' own Qwen2 classes on the meta device.
- MiMo-V2-Flash, vLLM's ``mimo_v2_flash_mtp.py`` (adapted from SGLang's ``mimo_v2_flash_nextn.py``):
  ``eh_proj`` 2d -> d, ``MiMoV2Attention`` of ``swa_num_attention_heads``, ``swa_num_key_value_heads``,
  ``swa_head_dim``, ``swa_v_head_dim`` and a sliding window, and a dense ``MiMoV2MLP`` of
  ``intermediate_size`` ("MTP layers use dense MLP (not MoE)").
- Step-3.5/3.7, SGLang's ``step3p5_mtp.py`` and vLLM's: ``eh_proj`` 2d -> d and ``Step3p5DecoderLayer``
  of index num_hidden_layers + i: sliding where ``layer_types[i]`` says so, then with
  ``attention_other_setting``'s query heads and groups; MoE only where ``moe_layers_enum`` lists the
  index, else a dense MLP of ``intermediate_size``; ``g_proj`` d -> heads (the head-wise gate). Its
  per-module ``shared_head`` (a norm and a copy of the LM head) is not counted, as DeepSeek's copies are not.
"""
import json
from pathlib import Path

import pytest

from costcalc import calc, hf, presets
from costcalc.errors import CostcalcError
from costcalc.evaluate import Options, Query, table
from costcalc.spec import from_dict
from cli_run import one_error, run

CONFIGS = Path(__file__).resolve().parent / "data" / "hf-configs"


def config(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def total(shapes: dict[str, tuple[int, int]]) -> int:
    return sum(a * b for a, b in shapes.values())


# --- MiMo-V2-Flash -------------------------------------------------------------------------------------

def mimo_v2_flash_module(c: dict) -> dict[str, tuple[int, int]]:
    """One MiMoV2FlashMTPLayer's matrices, (out, in) as nn.Linear stores them, from the config."""
    d, m = c["hidden_size"], c["intermediate_size"]
    h, kv, dh, dv = (c["swa_num_attention_heads"], c["swa_num_key_value_heads"], c["swa_head_dim"],
                     c["swa_v_head_dim"])
    return {"eh_proj": (d, 2 * d), "q_proj": (h * dh, d), "k_proj": (kv * dh, d), "v_proj": (kv * dv, d),
            "o_proj": (d, h * dv), "gate_proj": (m, d), "up_proj": (m, d), "down_proj": (d, m)}


def test_mimo_v2_flash_mtp_modules_are_vllms_sliding_dense_blocks():
    c = config("mimo-v2-flash")
    spec = presets.load("mimo-v2-flash")
    assert spec.mtp.count == c["num_nextn_predict_layers"] == 3
    assert spec.mtp.arch == "mtp:window-dv.dense" and spec.mtp.sizes["W"] == c["sliding_window_size"] + 1
    one = total(mimo_v2_flash_module(c))
    got = calc.parameters(spec)
    assert got["mtp_params"] == 3 * one and got["mtp_active_params"] == one
    assert hf.load(CONFIGS / "mimo-v2-flash.json").mtp == spec.mtp     # the preset is the config's import


# --- Step-3.7-Flash (step3p5) --------------------------------------------------------------------------

def step3p5_module(t: dict, index: int) -> dict[str, tuple[int, int]]:
    """The matrices of Step3p5DecoderLayer(layer_id=index) with eh_proj, from the text config."""
    d, dh = t["hidden_size"], t["head_dim"]
    h, kv = t["num_attention_heads"], t["num_attention_groups"]
    if t["layer_types"][index] == "sliding_attention":
        h, kv = t["attention_other_setting"]["num_attention_heads"], t["attention_other_setting"]["num_attention_groups"]
    out = {"eh_proj": (d, 2 * d), "q_proj": (h * dh, d), "k_proj": (kv * dh, d), "v_proj": (kv * dh, d),
           "o_proj": (d, h * dh), "g_proj": (h, d)}
    if index in {int(i) for i in t["moe_layers_enum"].split(",")}:
        raise AssertionError("Step-3.7's MTP layers are dense by its moe_layers_enum")
    m = t["intermediate_size"]
    return {**out, "gate_proj": (m, d), "up_proj": (m, d), "down_proj": (d, m)}


def test_step_37_mtp_modules_are_the_layers_past_the_decoder():
    t = config("step-3.7-flash")["text_config"]
    n, count = t["num_hidden_layers"], t["num_nextn_predict_layers"]
    assert t["layer_types"][n:] == ["sliding_attention"] * count      # the padded entries: layers 45-47
    modules = [total(step3p5_module(t, n + i)) for i in range(count)]
    spec = presets.load("step-3.7-flash")
    got = calc.parameters(spec)
    assert spec.mtp.count == count and spec.mtp.arch == "mtp:window-hgated.dense"
    assert got["mtp_params"] == sum(modules) and got["mtp_active_params"] == modules[0]
    assert hf.load(CONFIGS / "step-3.7-flash.json").mtp == spec.mtp


STEP = dict(model_type="step3p5", hidden_size=64, num_attention_heads=4, num_attention_groups=2, head_dim=16,
            vocab_size=128, intermediate_size=96, num_hidden_layers=4, sliding_window=8, moe_intermediate_size=32,
            moe_num_experts=4, moe_top_k=2, share_expert_dim=48, num_nextn_predict_layers=2,
            attention_other_setting={"num_attention_heads": 6, "num_attention_groups": 2},
            use_head_wise_attn_gate=True)


@pytest.mark.parametrize("change, arch, h_q", [
    ({"layer_types": ["full_attention"] + ["sliding_attention"] * 5, "moe_layers_enum": "1,2,3"},
     "window-hgated.dense", 6),                                   # padded entries; 4 and 5 not MoE
    ({"layer_types": ["full_attention"] + ["sliding_attention"] * 5, "moe_layers_enum": "1,2,3,4,5"},
     "window-hgated.moe_shared", 6),
    ({"mtp_layer_types": ["full_attention"] * 2, "mtp_mlp_layer_types": ["dense"] * 2}, "gqa-hgated.dense", 4),
    ({}, "gqa-hgated.dense", 4),                                  # no layer_types: full; layers >= 3 MoE: 4, 5 dense
])
def test_step3p5_mtp_kind_follows_the_padded_lists(change, arch, h_q):
    mtp = from_dict(hf.to_preset({**STEP, **change}, "x"), "x").mtp
    assert mtp.count == 2 and mtp.arch == f"mtp:{arch}" and mtp.sizes["h_q"] == h_q


@pytest.mark.parametrize("change, told", [
    ({"mtp_layer_types": ["full_attention", "sliding_attention"]}, "the MTP layers are of different kinds"),
    ({"mtp_layer_types": ["full_attention"]}, "'mtp_layer_types' must list one entry per MTP layer"),
])
def test_step3p5_mtp_layers_costcalc_cannot_express_are_refused(change, told):
    with pytest.raises(CostcalcError, match=told):
        hf.to_preset({**STEP, **change}, "x")


# --- MiMo-7B (remote code) -----------------------------------------------------------------------------

MIMO = dict(model_type="mimo", hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96,
            vocab_size=128, num_hidden_layers=3, num_nextn_predict_layers=1)


def mimo_mtp_layer_params(c: dict) -> int:
    """MiMoMTPLayers' matrices as its remote code builds them from transformers' Qwen2 classes (meta)."""
    torch = pytest.importorskip("torch")
    from transformers import Qwen2Config
    from transformers.models.qwen2.modeling_qwen2 import Qwen2Attention, Qwen2MLP

    q = Qwen2Config(**{k: v for k, v in c.items() if k not in ("model_type", "num_nextn_predict_layers")})
    with torch.device("meta"):
        parts = [torch.nn.Linear(2 * q.hidden_size, q.hidden_size, bias=False), Qwen2Attention(q, layer_idx=0),
                 Qwen2MLP(q)]
    return sum(p.numel() for part in parts for name, p in part.named_parameters() if p.ndim == 2)


@pytest.mark.parametrize("change, arch", [
    ({}, "gqa.dense"),
    ({"use_sliding_window": True, "sliding_window": 8, "max_window_layers": 0}, "window.dense"),   # layer 0 windowed
])
def test_mimo_mtp_module_is_input_proj_and_a_qwen2_layer_of_layer_0s_kind(change, arch):
    c = {**MIMO, **change}
    spec = from_dict(hf.to_preset(c, "x"), "x")
    assert spec.mtp.count == 1 and spec.mtp.arch == f"mtp:{arch}"
    assert calc.parameters(spec)["mtp_params"] == mimo_mtp_layer_params(c)


def test_mimo_with_windows_above_layer_0_keeps_layer_0s_full_attention():
    spec = from_dict(hf.to_preset({**MIMO, "use_sliding_window": True, "sliding_window": 8,
                                   "max_window_layers": 1, "num_nextn_predict_layers": 2}, "x"), "x")
    assert spec.groups[-1].arch == "window.dense" and spec.mtp.arch == "mtp:gqa.dense" and spec.mtp.count == 2


# --- The draft on each new preset ----------------------------------------------------------------------

def with_the_module_as_a_layer(spec):
    """The model with one more decoder layer of its MTP module's kind and sizes."""
    data = {k: v for k, v in spec.to_dict().items() if k != "mtp"}
    g = spec.mtp
    data["layers"].append({"count": 1, "arch": g.arch.removeprefix("mtp:"),
                           **{k: v for k, v in g.sizes.items() if k not in ("d", "V")}})
    return from_dict(data, "test")


@pytest.mark.parametrize("name", ["mimo-v2-flash", "step-3.7-flash"])
def test_a_drafting_decode_step_adds_one_module_of_its_own_kind(name):
    spec = presets.load(name)
    bigger = with_the_module_as_a_layer(spec)
    d, V = spec["d"], spec["V"]
    for batch, context in ((1, 4096), (8, 100_000)):
        plain = table(Query(spec, "decode"), batch=[batch], context=[context])
        drafted = table(Query(spec, "decode", Options(draft="mtp")), batch=[batch], context=[context])
        block = table(Query(bigger, "decode"), batch=[batch], context=[context])["total_flops"][0] - plain["total_flops"][0]
        assert drafted["draft_flops"][0] == block + 2 * batch * 2 * d * d + 2 * batch * d * V


@pytest.mark.parametrize("args", [
    ["decode", "-p", "mimo-v2-flash", "--context", "32k", "--draft", "mtp"],
    ["generate", "-p", "step-3.7-flash", "--prompt", "4k", "--new", "64", "--draft", "mtp"],
    ["memory", "-p", "mimo-v2-flash", "--context", "32k", "--device", "h200", "--draft", "mtp"],
    ["decode", "-p", "step-3.7-flash", "--context", "32k", "--draft", "mtp"],
])
def test_draft_mtp_runs_on_the_new_presets(capsys, args):
    code, out, err = run(capsys, *args, "-f", "csv")
    assert code == 0, err
    header, *rows = out.strip().splitlines()
    assert "draft" in header.split(",")


@pytest.mark.parametrize("name", ["deepseek-v4-flash", "deepseek-v4-pro"])
def test_deepseek_v4_has_no_mtp_module_and_refuses_the_draft(capsys, name):
    """V4's MTPBlock (e_proj and h_proj over the hyper-connection streams, its own hc_head) is not
    costcalc's eh_proj module: its key stays ignored (docs/hf-import.md)."""
    assert presets.load(name).mtp is None
    code, out, err = run(capsys, "decode", "-p", name, "--context", "4k", "--draft", "mtp")
    assert code == 2 and one_error(err, "no multi-token-prediction layers")


@pytest.mark.slow
def test_step_37_mtp_against_the_mtp_model_transformers_builds():
    """5.23 builds Step-3.7's MTP layers only for generate(use_mtp=True): MtpModel from get_mtp_config().
    Its eh_proj, K/V and MLP matrices are the engines'; its sliding MTP layers get num_attention_heads
    (64) query heads where vLLM and SGLang, which load the checkpoint, build attention_other_setting's 96
    (docs/hf-import.md): q_proj, o_proj and g_proj are checked with 5.23's heads here."""
    torch = pytest.importorskip("torch")
    from transformers.modeling_layers import MtpModel
    from transformers.models.step3p7.configuration_step3p7 import Step3p7Config
    from transformers.models.step3p7.modeling_step3p7 import Step3p7ForConditionalGeneration

    c = config("step-3.7-flash")
    t = c["text_config"]
    built = Step3p7Config(**{**c, "vision_config": {}})
    with torch.device("meta"):
        mtp = MtpModel(Step3p7ForConditionalGeneration(built), t["num_nextn_predict_layers"])
    for i, layer in enumerate(mtp.layers):
        got = {name.rsplit(".", 2)[-2]: tuple(p.shape) for name, p in layer.named_parameters() if p.ndim == 2}
        ours = step3p5_module(t, t["num_hidden_layers"] + i)
        h, dh, d = t["num_attention_heads"], t["head_dim"], t["hidden_size"]
        assert got == {**ours, "q_proj": (h * dh, d), "o_proj": (d, h * dh), "g_proj": (h, d)}
        assert ours["q_proj"] != got["q_proj"]          # the one difference: 96 query heads against 64
