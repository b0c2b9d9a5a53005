"""The state-space families (Mamba-2 mixers: mamba2, bamba, granitemoehybrid, falcon_h1,
nemotron_h) held against what transformers 5.23 builds and runs (skipped without transformers).

On small configs keeping each family's structure (Q_c = 32, so a 100-token prompt is 4 chunks):

- ``total_params`` equals the matrix parameters of the model transformers builds on meta;
- for a prefill of 100 and of 64 tokens, a decode step after 100 and a 4-token forward over the
  cache of 100, the FLOPs FlopCounterMode counts per module kind -- the mixer's in_proj/out_proj,
  its own convolution and scan products, attention (projections and scores), the FFN or MoE, the
  LM head -- equal costcalc's ``full`` terms exactly (eager attention, MoE experts as batched_mm);
- after a bf16 forward of B=2, S=10 with a cache, the bytes of every cache tensor (keys, values,
  convolution windows, recurrent states) equal costcalc's ``kv_cache_bytes + state_bytes`` under
  ``full`` with the preset's state dtype (fp32: transformers keeps the state in float32).

The cached 4-token forward reads the cached state (its logits equal an uncached forward of all 104
tokens, checked here): transformers runs the chunked path again with the cached state as the
initial state, one padded chunk and the inter-chunk term, and a convolution over the K_c kept
columns plus the new tokens.
"""
import pytest

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

import hf_models  # noqa: E402
from costcalc import calc, hf, memory  # noqa: E402
from costcalc.errors import CostcalcError  # noqa: E402
from costcalc.evaluate import Options, Query  # noqa: E402
from costcalc.hf.families import ssm  # noqa: E402
from costcalc.roofline import Precision  # noqa: E402
from costcalc.spec import from_dict  # noqa: E402

from transformers import AutoModelForCausalLM  # noqa: E402
from transformers.models.auto.configuration_auto import CONFIG_MAPPING  # noqa: E402

MIXER = dict(hidden_size=64, vocab_size=128)
ATTN = dict(num_attention_heads=4, num_key_value_heads=2)
HF_MAMBA = dict(mamba_n_heads=8, mamba_d_head=16, mamba_n_groups=2, mamba_d_state=16, mamba_chunk_size=32)
SMALL = {
    "mamba2": dict(MIXER, num_hidden_layers=2, num_heads=8, head_dim=16, n_groups=2, state_size=16, expand=2,
                   chunk_size=32),
    "bamba": dict(MIXER, **ATTN, **HF_MAMBA, num_hidden_layers=3, attn_layer_indices=[1], intermediate_size=96),
    "granitemoehybrid": dict(MIXER, **ATTN, **HF_MAMBA, num_hidden_layers=3, intermediate_size=32,
                             layer_types=["mamba", "attention", "mamba"], shared_intermediate_size=48,
                             num_local_experts=4, num_experts_per_tok=2),
    "falcon_h1": dict(MIXER, **ATTN, **{**HF_MAMBA, "mamba_n_heads": 6}, num_hidden_layers=2, mamba_d_ssm=96,
                      intermediate_size=96, mamba_rms_norm=True),       # the mixer narrower than expand x d
    "nemotron_h": dict(MIXER, **ATTN, head_dim=16, layers_block_type=["mamba", "moe", "attention", "mlp"],
                       mamba_num_heads=8, mamba_head_dim=16, n_groups=2, ssm_state_size=16, chunk_size=32,
                       intermediate_size=96, moe_intermediate_size=32, moe_shared_expert_intermediate_size=48,
                       n_routed_experts=4, num_experts_per_tok=2),
}
DENSE_GRANITE = dict(SMALL["granitemoehybrid"], num_local_experts=0, num_experts_per_tok=0)
CASES = {**SMALL, "granitemoehybrid-dense": DENSE_GRANITE}
KINDS = ("mixer_proj", "conv", "scan", "attention", "ffn", "lm_head")
PHASES = ("prefill100", "prefill64", "decode", "cached4")


def test_every_state_space_family_has_a_small_config():
    assert set(SMALL) == set(ssm.MAPPERS)


def spec_of(case: str):
    family = case.split("-")[0]
    return from_dict(hf.to_preset({"model_type": family, **CASES[case]}, "small"), "small")


def model_of(case: str, dtype=None):
    family = case.split("-")[0]
    kwargs = {"attn_implementation": "eager"}
    if any(g.block.ffn == "moe" for g in spec_of(case).groups):
        kwargs["experts_implementation"] = "batched_mm"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(CONFIG_MAPPING[family](**CASES[case]), dtype=dtype, **kwargs)
    return model.eval()


def kind_of(mods: dict, path: str, op: str) -> str:
    """The kind of a module's own FLOPs: the mixer's projections, its convolution or scan, the
    attention (projections and scores), the LM head, else the FFN (dense, MoE, router, shared)."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        module = mods.get(".".join(parts[:i]))
        if hasattr(module, "conv1d") and hasattr(module, "in_proj"):          # a Mamba-2 mixer
            if i < len(parts):
                assert parts[i] in ("in_proj", "out_proj"), path
                return "mixer_proj"
            return {"convolution": "conv", "bmm": "scan"}[op]
        if hasattr(module, "q_proj") and hasattr(module, "o_proj"):
            return "attention"
    return "lm_head" if parts[-1] == "lm_head" else "ffn"


def counted(model, **inputs) -> tuple[dict, object]:
    """FlopCounterMode's FLOPs of one forward by module kind (each module's own FLOPs: its
    total less its children's), and the output."""
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        out = model(**inputs)
    counts = {k: {str(op).removeprefix("aten.").split(".")[0]: v for op, v in ops.items()}
              for k, ops in counter.get_flop_counts().items() if k != "Global"}
    root = type(model).__name__
    mods = dict(model.named_modules())
    parent = {c: max((p for p in counts if c.startswith(p + ".")), key=len, default=None) for c in counts}
    kinds = dict.fromkeys(KINDS, 0)
    for name, ops in counts.items():
        path = name[len(root) + 1:] if name != root else ""
        children = [c for c in counts if parent[c] == name]      # the nearest counted modules below it
        for op, value in ops.items():
            own = value - sum(counts[c].get(op, 0) for c in children)
            if own:
                kinds[kind_of(mods, path, op)] += own
    return kinds, out


def costcalc_kinds(row: dict) -> dict:
    f = lambda *keys: sum(row.get(f"{k}_flops", 0) for k in keys)   # noqa: E731
    return {"mixer_proj": f("mixer_proj"), "conv": f("conv"), "scan": f("scan"),
            "attention": f("attn_proj", "attention"), "ffn": f("ffn", "router", "experts", "shared_experts"),
            "lm_head": f("lm_head")}


def phases(case: str) -> dict:
    """Counted and costcalc FLOPs by kind for every phase (batch 1, fp32)."""
    model, spec = model_of(case), spec_of(case)
    cache_kw = "cache_params" if case == "mamba2" else "past_key_values"
    ids = torch.randint(3, 128, (1, 104), generator=torch.Generator().manual_seed(1))
    out = {}
    for seq in (100, 64):
        got, _ = counted(model, input_ids=ids[:, :seq], use_cache=True, logits_to_keep=0)
        out[f"prefill{seq}"] = (got, costcalc_kinds(calc.prefill(spec, seq, 1, "full", logits="all")))
    with torch.no_grad():
        whole = model(input_ids=ids, use_cache=False).logits
    for name, new, row in (("decode", 1, calc.decode(spec, 100, 1, "full")),
                           ("cached4", 4, calc.cached_prefill(spec, 4, 100, 1, "full", logits="all"))):
        with torch.no_grad():
            cache = getattr(model(input_ids=ids[:, :100], use_cache=True), cache_kw)
        positions = {} if case == "mamba2" else {"position_ids": torch.arange(100, 100 + new)[None]}
        got, result = counted(model, input_ids=ids[:, 100:100 + new], use_cache=True, logits_to_keep=0,
                              **{cache_kw: cache}, **positions)
        assert torch.allclose(result.logits, whole[:, 100:100 + new], atol=1e-4), f"{name}: the cache was not read"
        out[name] = (got, costcalc_kinds(row))
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_parameters_equal_the_matrices_transformers_builds(case):
    family = case.split("-")[0]
    model, _ = hf_models.build({"model_type": family, **CASES[case]}, experts=False)
    assert calc.parameters(spec_of(case))["total_params"] == hf_models.matrix_params(model, family)


FAST = ("nemotron_h", "falcon_h1")     # every layer kind between them; the rest under -m slow


@pytest.mark.parametrize("case", [c if c == "nemotron_h" else pytest.param(c, marks=pytest.mark.slow)
                                  for c in sorted(CASES)])
def test_flops_of_every_phase_by_module_kind_equal_full(case):
    for phase, (got, expected) in phases(case).items():
        assert got == expected, (case, phase)
        assert got["scan"] and got["conv"] and got["mixer_proj"] and got["lm_head"], (case, phase)


def cache_tensors(cache) -> int:
    total = 0
    for layer in cache.layers:
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            total += t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0
        for name in ("conv_states", "recurrent_states"):
            for t in (getattr(layer, name, None) or {}).values() if isinstance(getattr(layer, name, None), dict) \
                    else (getattr(layer, name, None) or []):
                total += t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0
    return total


@pytest.mark.parametrize("case", [c if c in FAST else pytest.param(c, marks=pytest.mark.slow) for c in sorted(CASES)])
def test_cache_bytes_after_a_bf16_forward_equal_kv_cache_plus_state_bytes(case):
    model, spec = model_of(case, torch.bfloat16), spec_of(case)
    assert spec.state_dtype == "fp32"
    ids = torch.randint(3, 128, (2, 10), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
    cache = out.cache_params if case == "mamba2" else out.past_key_values
    query = Query(spec, "decode", Options(convention="full"), Precision())
    assert cache_tensors(cache) == memory.kv_cache_bytes(query, 2, 10) + memory.state_bytes(query, 2)
    assert memory.state_bytes(query, 2) > 0


def test_nemotron_h_layer_spellings_and_refusals():
    config = {"model_type": "nemotron_h", **SMALL["nemotron_h"]}
    layers = hf.to_preset(config, "x")["layers"]
    assert [g["arch"] for g in layers] == ["mamba2.none", "none.moe_plain_shared", "gqa.none", "none.mlp"]
    pattern = {k: v for k, v in config.items() if k != "layers_block_type"}
    assert hf.to_preset({**pattern, "hybrid_override_pattern": "ME*-"}, "x")["layers"] == layers
    assert hf.to_preset({**config, "layers_block_type": ["linear_attention", "moe", "full_attention", "mlp"]},
                        "x")["layers"] == layers
    with pytest.raises(CostcalcError, match="latent projection"):
        hf.to_preset({**config, "moe_latent_size": 24}, "x")
    with pytest.raises(CostcalcError, match="num_hidden_layers"):
        hf.to_preset({**config, "num_hidden_layers": 5}, "x")
    with pytest.raises(CostcalcError, match="n_shared_experts"):
        hf.to_preset({**config, "n_shared_experts": 2}, "x")
    assert hf.to_preset({**config, "mamba_ssm_cache_dtype": "bfloat16"}, "x")["state_dtype"] == "fp32"   # not read
    with pytest.raises(CostcalcError, match="mamba_ssm_cache_dtype' must be float32, bfloat16 or float16"):
        hf.to_preset({**config, "mamba_ssm_cache_dtype": "float7"}, "x")


def test_zamba2_is_refused_naming_what_is_not_modelled():
    with pytest.raises(CostcalcError, match="shared attention blocks .a LoRA adapter per use"):
        hf.to_preset({"model_type": "zamba2", "hidden_size": 64}, "x")


def test_the_mixer_width_must_be_heads_times_head_width():
    with pytest.raises(CostcalcError, match="must equal the mixer width"):
        hf.to_preset({"model_type": "falcon_h1", **SMALL["falcon_h1"], "mamba_d_head": 8}, "x")
    auto = hf.to_preset({"model_type": "bamba", **SMALL["bamba"], "mamba_d_head": "auto"}, "x")
    assert [g.get("d_m") for g in auto["layers"]] == [16, None]
