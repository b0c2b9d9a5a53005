"""The linear-attention families (qwen3_next, qwen3_5, qwen3_5_moe, olmo_hybrid, kimi_linear, minimax)
held against what transformers 5.23 builds and runs, on small configs keeping each family's structure.

Their chunked scans read tensor values (``Tensor.item``), so unlike tests/test_hf_transformers.py the
models run on the CPU with real weights (fp32, eager attention, eager experts -- transformers'
default grouped_mm experts count 0 FLOPs in torch 2.13). For each family:

1. costcalc's total_params equals the matrices of the model transformers builds, less the
   depthwise convolution weights ([channels, 1, K_c]) and KDA's A_log ([1, 1, heads, 1]), which
   are not operands of a matrix product (costcalc counts matrices of products only);
2. FlopCounterMode's counts, split by module kind (mixer projections, the mixer module's own scan
   and convolution, attention projections, attention, FFN, router, experts, shared experts, LM
   head), equal costcalc's ``full`` terms exactly: a prefill of 100 tokens, a decode step after
   it, and a 4-token forward over the 100 cached (logits at every new position, as the forward
   computes them; MLA in the ``expanded`` form transformers runs);
3. the cache transformers allocates after a bf16 forward of B=2, S=10 (every tensor's bytes) equals
   costcalc's KV cache plus recurrent states and convolution windows (``memory``'s reading).

The fast subset (Qwen3-Next's prefill and parameters, and the import rules) runs by default; the
rest is ``slow`` (``pytest -m slow tests/test_hf_linear_families.py``, about a minute). The presets'
real sizes are held against transformers' meta build by tests/test_hf_transformers.py (parameters only:
the scans cannot run on meta).
"""
import json
import re

import pytest

from costcalc import calc, hf, presets
from costcalc.errors import CostcalcError
from costcalc.spec import from_dict
from hf_rules import CONFIGS, kinds

GDN = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=128,
           linear_conv_kernel_dim=4, linear_key_head_dim=8, linear_value_head_dim=12, linear_num_key_heads=2,
           linear_num_value_heads=4)
SMALL = {
    # Gated DeltaNet and gated attention alternating; a dense first layer, then MoE with a gated shared expert
    "qwen3_next": dict(GDN, model_type="qwen3_next", intermediate_size=96, num_hidden_layers=4,
                       moe_intermediate_size=32, shared_expert_intermediate_size=48, num_experts=4,
                       num_experts_per_tok=2, mlp_only_layers=[0], full_attention_interval=2),
    "qwen3_5": dict(model_type="qwen3_5", tie_word_embeddings=False,
                    text_config=dict(GDN, model_type="qwen3_5_text", intermediate_size=96, num_hidden_layers=2,
                                     full_attention_interval=2)),
    "qwen3_5_moe": dict(model_type="qwen3_5_moe", tie_word_embeddings=False,
                        text_config=dict(GDN, model_type="qwen3_5_moe_text", num_hidden_layers=2,
                                         full_attention_interval=2, moe_intermediate_size=32,
                                         shared_expert_intermediate_size=48, num_experts=4, num_experts_per_tok=2)),
    "olmo_hybrid": dict(GDN, model_type="olmo_hybrid", intermediate_size=96, num_hidden_layers=2, pad_token_id=0,
                        eos_token_id=1, layer_types=["linear_attention", "full_attention"]),
    # KDA, MLA, KDA (1-based lists); a dense first layer, then MoE with a shared expert
    "kimi_linear": dict(model_type="kimi_linear", vocab_size=128, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                        hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
                        num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=None,
                        qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=12, num_experts=4,
                        num_experts_per_token=2, num_shared_experts=1, first_k_dense_replace=1,
                        linear_attn_config={"full_attn_layers": [2], "kda_layers": [1, 3], "head_dim": 8,
                                            "num_heads": 4, "short_conv_kernel_size": 4}),
    # softmax first: transformers 5.23 loses the cached length when layer 0 is lightning (docs/hf-import.md)
    "minimax": dict(model_type="minimax", vocab_size=128, hidden_size=64, intermediate_size=32, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_local_experts=4,
                    num_experts_per_tok=2, block_size=64, layer_types=["full_attention", "linear_attention"]),
}
TEXT = {"qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text"}
NOT_PRODUCTS = ("conv1d.weight", "A_log")
PROMPT, NEW = 100, 4


def spec_of(config: dict):
    return from_dict(hf.to_preset(config, "small"), "small")


def text(config: dict) -> tuple[dict, str]:
    """The decoder config transformers' causal LM is built from, and its family."""
    family = config["model_type"]
    if family in TEXT:
        return {**config["text_config"], "model_type": TEXT[family]}, TEXT[family]
    return config, family


def build(config: dict, dtype: str = "float32", device: str = "cpu"):
    pytest.importorskip("transformers")
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config, family = text(config)
    fields = {k: v for k, v in config.items() if k != "model_type"}
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(CONFIG_MAPPING[family](**fields), attn_implementation="eager",
                                                 experts_implementation="eager", dtype=getattr(torch, dtype))
    return model.eval()


def product_params(model) -> int:
    """Matrices of the model's products: tensors of two or more dimensions, biases and the
    convolution / decay tensors that are no product's operand left out, a tied tensor once."""
    return sum(p.numel() for name, p in model.named_parameters()
               if p.ndim >= 2 and not name.endswith(NOT_PRODUCTS) and "bias" not in name.rsplit(".", 1)[-1])


# --- FlopCounterMode, by module kind --------------------------------------------------------------

def by_kind(model, counts: dict) -> dict[str, int]:
    """FlopCounterMode's per-module counts -> costcalc's terms. Each module's own FLOPs (its count
    less its counted descendants') go to the kind its name and layer type say."""
    mixer_layers = {i for i, t in enumerate(model.config.layer_types) if t == "linear_attention"}
    paths = [p for p in counts if p != "Global"]
    out: dict[str, int] = {}
    for path in paths:
        inner = [q for q in paths if q.startswith(path + ".")]
        direct = [q for q in inner if not any(q.startswith(r + ".") for r in inner)]
        for op, n in counts[path].items():
            own = n - sum(counts[q].get(op, 0) for q in direct)
            if own:
                kind = classify(path.split(".", 1)[1] if "." in path else "", str(op), mixer_layers)
                out[kind] = out.get(kind, 0) + own
    return out


def classify(name: str, op: str, mixer_layers: set[int]) -> str:
    if name == "lm_head":
        return "lm_head"
    found = re.fullmatch(r"model\.layers\.(\d+)\.(linear_attn|self_attn|mlp)(\..+)?", name)
    assert found, f"FLOPs counted outside a layer's mixer, attention or MLP: {name} ({op})"
    layer, part, rest = int(found[1]), found[2], found[3] or ""
    if part in ("linear_attn", "self_attn"):
        mixer = layer in mixer_layers
        if rest:
            return "mixer_proj" if mixer else "attn_proj"
        return ("conv" if "convolution" in op else "scan") if mixer else "attention"
    if rest.startswith(".experts"):
        return "experts"
    if rest.startswith(".shared_expert"):
        return "shared_experts"
    if rest == ".gate":
        return "router"
    assert rest, f"MLP FLOPs outside its modules: {name} ({op})"
    return "ffn"


def counted(model, **inputs) -> tuple[dict[str, int], object]:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        out = model(**inputs)
    return by_kind(model, counter.get_flop_counts()), out


def ids(n: int, batch: int = 1):
    import torch

    return torch.randint(0, 128, (batch, n))


def phases(model) -> dict[str, dict[str, int]]:
    """A prefill of PROMPT tokens, one decode step after it, and NEW tokens over the PROMPT cached."""
    import torch

    def over(cache, n):
        return dict(input_ids=ids(n), past_key_values=cache, use_cache=True,
                    position_ids=torch.arange(PROMPT, PROMPT + n)[None])

    prefill, out = counted(model, input_ids=ids(PROMPT), use_cache=True)
    decode, _ = counted(model, **over(out.past_key_values, 1))
    _, out = counted(model, input_ids=ids(PROMPT), use_cache=True)
    cached, _ = counted(model, **over(out.past_key_values, NEW))
    return {"prefill": prefill, "decode": decode, "cached": cached}


TERMS = ("mixer_proj", "scan", "conv", "attn_proj", "attention", "ffn", "router", "experts", "shared_experts", "lm_head")


def terms(row: dict) -> dict[str, int]:
    return {t: row[f"{t}_flops"] for t in TERMS if row.get(f"{t}_flops")}


def costcalc_phases(spec) -> dict[str, dict[str, int]]:
    return {"prefill": terms(calc.prefill(spec, PROMPT, 1, "full", logits="all")),
            "decode": terms(calc.decode(spec, PROMPT, 1, "full", mla="expanded")),
            "cached": terms(calc.cached_prefill(spec, NEW, PROMPT, 1, "full", logits="all", mla="expanded"))}


def test_qwen3_next_parameters_and_prefill_by_kind():
    """The fast one: Qwen3-Next's matrices and its prefill, term by term."""
    config = SMALL["qwen3_next"]
    spec = spec_of(config)
    model = build(config)
    assert calc.parameters(spec)["total_params"] == product_params(model)
    got, _ = counted(model, input_ids=ids(PROMPT), use_cache=False)
    assert got == terms(calc.prefill(spec, PROMPT, 1, "full", logits="all"))
    assert {"mixer_proj", "scan", "conv", "attention", "experts", "shared_experts"} <= set(got)


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(SMALL))
def test_parameters_and_flops_of_every_phase_equal_what_transformers_builds_and_counts(family):
    config = SMALL[family]
    spec = spec_of(config)
    model = build(config)
    assert calc.parameters(spec)["total_params"] == product_params(model)
    assert phases(model) == costcalc_phases(spec)


def cache_tensors(cache) -> list:
    """Every tensor a transformers cache holds (its layers' keys, values, convolution windows and
    recurrent states; MiniMax's linear_cache), each once."""
    import torch

    found, seen = [], set()

    def visit(value, depth=0):
        if isinstance(value, torch.Tensor):
            if value.numel() and id(value) not in seen:
                seen.add(id(value))
                found.append(value)
        elif depth < 5 and isinstance(value, (list, tuple)):
            for v in value:
                visit(v, depth + 1)
        elif depth < 5 and isinstance(value, dict):
            for v in value.values():
                visit(v, depth + 1)
        elif depth < 5 and hasattr(value, "__dict__") and not isinstance(value, type):
            for v in vars(value).values():
                visit(v, depth + 1)
    visit(cache)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(SMALL))
def test_the_cache_transformers_allocates_is_costcalcs_memory(family):
    from costcalc.evaluate import Options, Query
    from costcalc.memory import kv_cache_bytes, state_bytes
    from costcalc.roofline import Precision

    config = SMALL[family]
    spec = spec_of(config)
    model = build(config, "bfloat16")
    _, out = counted(model, input_ids=ids(10, batch=2), use_cache=True)
    tensors = cache_tensors(out.past_key_values)
    held = sum(t.numel() * t.element_size() for t in tensors)
    query = Query(spec, "decode", Options(convention="full"), Precision("bf16", "bf16", "bf16"))
    assert held == kv_cache_bytes(query, 2, 10) + state_bytes(query, 2)
    dtypes = {str(t.dtype) for t in tensors}
    assert dtypes == ({"torch.bfloat16", "torch.float32"} if spec.state_dtype == "fp32" else {"torch.bfloat16"})


# --- the import rules --------------------------------------------------------------------------

def test_layer_kinds_and_the_state_dtype():
    assert kinds(SMALL["qwen3_next"]) == [(1, "gdn.dense"), (2, "gqa-gated.moe_shared_gate"), (1, "gdn.moe_shared_gate")]
    assert kinds(SMALL["qwen3_5"]) == [(1, "gdn.dense"), (1, "gqa-gated.dense")]
    assert kinds(SMALL["qwen3_5_moe"]) == [(1, "gdn.moe_shared_gate"), (1, "gqa-gated.moe_shared_gate")]
    assert kinds(SMALL["olmo_hybrid"]) == [(1, "gdn.dense"), (1, "gqa.dense")]
    assert kinds(SMALL["kimi_linear"]) == [(1, "kda.dense"), (1, "mla.moe_shared"), (1, "kda.moe_shared")]
    assert kinds(SMALL["minimax"]) == [(1, "gqa.moe"), (1, "lightning.moe")]
    for family, config in SMALL.items():
        preset = hf.to_preset(config, "x")
        assert preset.get("state_dtype") == (None if family == "minimax" else "fp32"), family
        chunk = [g.get("Q_c", preset.get("Q_c")) for g in preset.get("layers", [preset])]
        assert set(chunk) - {None} == {64}, family


def test_layer_patterns_follow_the_classes_rules():
    qwen = {**SMALL["qwen3_next"], "num_hidden_layers": 8}
    del qwen["full_attention_interval"]                                  # default 4: layers 3 and 7 full
    preset = hf.to_preset({**qwen, "mlp_only_layers": []}, "x")
    assert [(g["count"], g["arch"]) for g in preset["layers"]] == [(6, "gdn.moe_shared_gate"),
                                                                   (2, "gqa-gated.moe_shared_gate")]
    types = ["linear_attention"] * 3 + ["full_attention"]
    assert kinds({**SMALL["qwen3_next"], "layer_types": types, "full_attention_interval": 4}) == \
        [(1, "gdn.dense"), (2, "gdn.moe_shared_gate"), (1, "gqa-gated.moe_shared_gate")]
    with pytest.raises(CostcalcError, match="'layer_types' and 'full_attention_interval' disagree"):
        hf.to_preset({**SMALL["qwen3_next"], "layer_types": types}, "x")
    kimi = SMALL["kimi_linear"]
    flipped = {**kimi, "linear_attn_config": {**kimi["linear_attn_config"], "full_attn_layers": [1],
                                              "kda_layers": [2, 3]}}
    assert kinds(flipped) == [(1, "mla.dense"), (2, "kda.moe_shared")]
    with pytest.raises(CostcalcError, match="no kind for layer 3"):
        hf.to_preset({**kimi, "linear_attn_config": {**kimi["linear_attn_config"], "kda_layers": [1]}}, "x")
    no_lists = {**kimi, "linear_attn_config": {"head_dim": 8, "num_heads": 4}, "num_hidden_layers": 5,
                "mlp_layer_types": ["dense", "sparse", "dense", "sparse", "sparse"]}
    assert kinds(no_lists) == [(2, "kda.dense"), (2, "kda.moe_shared"), (1, "mla.moe_shared")]   # layer i = 4 MLA
    minimax = {**SMALL["minimax"], "num_hidden_layers": 4}
    del minimax["layer_types"]                                           # default: the even layers softmax
    assert kinds(minimax) == [(2, "gqa.moe"), (2, "lightning.moe")]
    assert kinds({**minimax, "sliding_window": 8})[0] == (2, "window.moe")
    with pytest.raises(CostcalcError, match="'attn_type_list'"):
        hf.to_preset({**minimax, "attn_type_list": [0, 0, 0, 1]}, "x")     # what 5.23 does not read


def test_kimi_linear_attn_config_wins_and_unknown_keys_are_named():
    kimi = SMALL["kimi_linear"]
    kda = hf.to_preset({**kimi, "linear_num_heads": 2, "linear_head_dim": 4}, "x")["layers"][0]
    assert (kda["arch"], kda["h_lv"], kda["d_lk"], kda["d_lv"], kda["K_c"]) == ("kda.dense", 4, 8, 8, 4)
    with pytest.raises(CostcalcError, match="'linear_attn_config.gate_rank' is not understood"):
        hf.to_preset({**kimi, "linear_attn_config": {**kimi["linear_attn_config"], "gate_rank": 8}}, "x")
    assert set(hf.tables.KIMI_LINEAR_ATTN_CONFIG.rows) == {"full_attn_layers", "kda_layers", "num_heads", "head_dim",
                                                           "short_conv_kernel_size"}
    with pytest.raises(CostcalcError, match="'num_key_value_heads' is 2"):
        hf.to_preset({**kimi, "num_key_value_heads": 2}, "x")


def test_qwen_needs_its_fixed_sizes_and_gated_attention():
    for key in ("head_dim", "linear_key_head_dim", "linear_num_value_heads"):
        with pytest.raises(CostcalcError, match=f"needs field '{key}'"):
            hf.to_preset({k: v for k, v in SMALL["qwen3_next"].items() if k != key}, "x")
    text = SMALL["qwen3_5"]["text_config"]
    with pytest.raises(CostcalcError, match="'attn_output_gate' is False"):
        hf.to_preset({**SMALL["qwen3_5"], "text_config": {**text, "attn_output_gate": False}}, "x")
    olmo = {k: v for k, v in SMALL["olmo_hybrid"].items() if not k.startswith("linear_")}
    gdn = hf.to_preset(olmo, "x")["layers"][0]                          # the class's derived sizes
    assert [gdn[k] for k in ("h_lk", "h_lv", "d_lk", "d_lv")] == [4, 4, int(0.75 * 64 / 4), 2 * int(0.75 * 64 / 4)]


def test_bailing_hybrid_is_refused_naming_what_is_not_modelled():
    with pytest.raises(CostcalcError, match="full-rank forget and output gates") as err:
        hf.to_preset({"model_type": "bailing_hybrid", "hidden_size": 64}, "x")
    assert "\n" not in str(err.value)


# --- the published models ---------------------------------------------------------------------

LINEAR_PRESETS = ("qwen3-next-80b-a3b", "qwen3.5-27b", "qwen3.5-35b-a3b", "qwen3.5-397b-a17b", "kimi-linear-48b-a3b",
                  "minimax-text-01")


@pytest.mark.parametrize("name", LINEAR_PRESETS)
def test_each_preset_is_the_import_of_its_config(name):
    """tests/test_params.py checks the groups, the FLOPs and the stated counts; here the state dtype too."""
    imported, preset = hf.load(CONFIGS / f"{name}.json", name), presets.load(name)
    assert [(g.count, g.arch, dict(g.sizes)) for g in imported.groups] == \
           [(g.count, g.arch, dict(g.sizes)) for g in preset.groups]
    assert (imported.tied_embeddings, imported.state_dtype) == (preset.tied_embeddings, preset.state_dtype)
    assert preset.state_dtype == ("" if name == "minimax-text-01" else "fp32")


# --- what FlopCounterMode does not see, measured by a second counter ---------------------------

def uncounted(model, **inputs) -> dict[str, int]:
    """verify's second counter (``Uncounted``: elementwise arithmetic and triangular solves) over
    transformers' linear-attention modules only."""
    import torch
    from costcalc.verify.counting import Uncounted

    counter = Uncounted()
    watching = []

    def enter(module, args):
        watching.append(counter.watch("chunked"))
        watching[-1].__enter__()

    def leave(module, args, out):
        watching.pop().__exit__(None, None, None)

    hooks = [m.register_forward_pre_hook(enter) for n, m in model.named_modules() if n.endswith("linear_attn")]
    hooks += [m.register_forward_hook(leave) for n, m in model.named_modules() if n.endswith("linear_attn")]
    try:
        with torch.no_grad(), counter:
            model(**inputs)
    finally:
        for hook in hooks:
            hook.remove()
    return counter.flops["chunked"]


def test_the_triangular_solves_and_the_decode_recurrence_are_sized_not_dropped():
    """Gated DeltaNet as transformers runs it: per chunk and value head two unit lower-triangular
    solves of Q_c x Q_c against d_lv and d_lk columns -- Q_c (Q_c - 1)(d_lk + d_lv) FLOPs, measured
    exactly; and a decode step, whose scan FlopCounterMode counts as 0, runs its recurrence
    elementwise: at least the products of the ideal recurrence (6 h_lv d_lk d_lv a layer)."""
    import torch

    config = dict(SMALL["qwen3_next"], mlp_only_layers=[0, 1, 2, 3])
    spec = spec_of(config)
    model = build(config)
    gdn = next(g for g in spec.groups if g.block.mixer == "gdn")
    z, q = gdn.sizes, gdn.sizes["Q_c"]
    got = uncounted(model, input_ids=ids(PROMPT))
    chunks = -(-PROMPT // q)
    assert got["solve"] == gdn.count * chunks * z["h_lv"] * q * (q - 1) * (z["d_lk"] + z["d_lv"])
    out = model(input_ids=ids(PROMPT), use_cache=True)
    step = uncounted(model, input_ids=ids(1), past_key_values=out.past_key_values, use_cache=True,
                     position_ids=torch.tensor([[PROMPT]]))
    assert calc.decode(spec, PROMPT, 1, "full").get("scan_flops", 0) == 0 and step["solve"] == 0
    assert step["elementwise"] >= gdn.count * 6 * z["h_lv"] * z["d_lk"] * z["d_lv"]
