"""``costcalc compare``: every tool's number for the issue's seven cases, held to the tool's own
formula written out here by hand (from the source each recipe cites, not by calling the
recipe), to the numbers the real tools printed (measured: torch 2.13, DeepSpeed 0.19.8,
calflops 0.3.2 and fvcore on transformers 5.23 models; the llm-analysis 0.2.2 and GenZ 0.0.16
wheels, llm-analysis at HEAD d841e40 (bench/llm_analysis_head.py) and vLLM 0.33.0's perf.py run
unchanged), and the differences to their sum."""
import json
from fractions import Fraction

import pytest

from costcalc import calc, presets
from costcalc.cli import main
from costcalc.peers import TOOLS, compare
from costcalc.peers.base import Case, Setup
from costcalc.spec import from_dict


def llama(name):
    z = dict(presets.load(name).sizes)
    z["dq"], z["dkv"] = z["h_q"] * z["d_h"], z["h_kv"] * z["d_h"]
    return z


# --- the tools' formulas, by hand -------------------------------------------------------------

def hf_macs(z, q, past, rows):
    """A Llama/Mixtral HF forward (B = 1): nn.Linear MACs, experts, QK^T + AV over the full
    rectangle, LM head rows, and the elementwise counts DeepSpeed/calflops add."""
    L, d = z["L"], z["d"]
    keys = past + q
    lin = L * q * (2 * d * z["dq"] + 2 * d * z["dkv"]) + rows * d * z["V"]
    if "m" in z:
        lin += L * q * 3 * d * z["m"]
        experts, silu, router = 0, L * q * z["m"], 0
    else:
        lin += L * q * d * z["E"]
        experts, silu, router = L * q * z["k"] * 3 * d * z["m_e"], L * q * z["k"] * z["m_e"], L * q * z["E"]
    return dict(lin=lin, experts=experts, attn=L * z["h_q"] * q * keys * 2 * z["d_h"], silu=silu,
                softmax=L * z["h_q"] * q * keys, router=router)


def torch_eager(z, q, past, rows):
    m = hf_macs(z, q, past, rows)
    return 2 * (m["lin"] + m["experts"] + m["attn"])


def deepspeed_eager(z, q, past, rows):
    m = hf_macs(z, q, past, rows)
    return 2 * (m["lin"] + m["experts"] + m["attn"]) + m["silu"] + m["softmax"] + m["router"]


def calflops_eager_bmm(z, q, past, rows):        # torch.bmm not patched: batched_mm experts read 0
    m = hf_macs(z, q, past, rows)
    return 2 * (m["lin"] + m["attn"]) + m["silu"] + m["softmax"] + m["router"]


def fvcore_eager(z, q, past, rows):               # one multiply-add = one flop
    m = hf_macs(z, q, past, rows)
    return m["lin"] + m["experts"] + m["attn"]


def llm_analysis(z, b, s, mlp):
    d, L = z["d"], z["L"]
    return L * (4 * b * s * d * d + 4 * b * s * d * z["dkv"] + 4 * b * s * s * d + mlp(b * s)) + 2 * b * s * d * z["V"]


def wheel_mlp(z):
    return lambda tokens: 16 * tokens * z["d"] ** 2


def head_mlp(z):
    """llm-analysis HEAD d841e40, get_num_flops_fwd_per_layer_mlp with mlp_gated_linear_units (every model
    here has a gated MLP): 6 b s h^2 x expansion_ratio, expansion_ratio = ffn_embed_dim / hidden_dim."""
    return lambda tokens: 6 * tokens * z["d"] * z.get("m", z.get("m_e"))


def llm_viewer(z, tokens, pairs):
    d, L, m = z["d"], z["L"], z.get("m", z.get("m_e"))
    return L * (2 * tokens * (2 * d * d + 2 * d * z["dkv"] + 3 * d * m) + 4 * pairs * d + 5 * z["h_q"] * pairs
                + 18 * tokens * d) + d * z["V"]


def genz_prefill(z, s):
    d, L = z["d"], z["L"]
    ffn = 3 * s * d * z["m"] if "m" in z else s * z["E"] * d + 3 * z["E"] * z["m_e"] * d * (s * z["k"] // z["E"])
    return 2 * (L * (s * d * (z["dq"] + 2 * z["dkv"]) + 2 * z["h_q"] * s * s * z["d_h"] + s * d * z["dq"] + ffn)
                + 2 * d * s * z["V"])


def genz_decode(z, t):
    d, L = z["d"], z["L"]
    return 2 * (L * (d * (z["dq"] + 2 * z["dkv"]) + 2 * z["h_q"] * t * z["d_h"] + d * z["dq"] + 3 * d * z["m"])
                + z["V"] * d)


def vllm(z, tokens, tc, logits):
    d, L = z["d"], z["L"]
    ffn = 6 * d * z["m"] * tokens if "m" in z else 6 * d * z["m_e"] * z["k"] * tokens
    return L * (2 * tokens * d * (2 * z["h_q"] + 2 * z["h_kv"]) * z["d_h"] + 4 * z["h_q"] * tc * z["d_h"] + ffn) \
        + 2 * logits * d * z["V"]


def params_with_norms(z):   # every matrix and norm weight of an untied Llama
    d, L = z["d"], z["L"]
    return L * (2 * d * z["dq"] + 2 * d * z["dkv"] + 3 * d * z["m"] + 2 * d) + d + 2 * z["V"] * d


def maxtext_prefill(z, s):
    n = params_with_norms(z) if "m" in z else (
        z["L"] * (2 * z["d"] * z["dq"] + 2 * z["d"] * z["dkv"] + z["d"] * z["E"] + z["E"] * 3 * z["d"] * z["m_e"]
                  + 2 * z["d"]) + z["d"] + 2 * z["V"] * z["d"])
    return 2 * n * s + 4 * z["h_q"] * z["L"] * z["d_h"] * s * s // 2


# DeepSeek-V3 decode after T = 32768 (3 dense layers, 58 MoE layers with one shared expert)
DS = dict(d=7168, h=128, rq=1536, rkv=512, dn=128, dr=64, dv=128, m=18432, E=256, k=8, me=2048, ms=2048, V=129280)
T = 32768


def ds_macs():
    z = DS
    proj = z["d"] * z["rq"] + z["rq"] * z["h"] * (z["dn"] + z["dr"]) + z["d"] * (z["rkv"] + z["dr"]) + z["h"] * z["dv"] * z["d"]
    kvb_all = (T + 1) * z["rkv"] * z["h"] * (z["dn"] + z["dv"])      # HF re-expands every cached latent
    attn = 61 * (T + 1) * z["h"] * (z["dn"] + z["dr"] + z["dv"])
    lin = 61 * (proj + kvb_all) + 3 * 3 * z["d"] * z["m"] + 58 * (z["d"] * z["E"] + 3 * z["d"] * z["ms"]) + z["d"] * z["V"]
    experts = 58 * z["k"] * 3 * z["d"] * z["me"]
    silu = 3 * z["m"] + 58 * (z["k"] * z["me"] + z["ms"])
    return dict(lin=lin, experts=experts, attn=attn, silu=silu, softmax=61 * z["h"] * (T + 1))


def ds_vllm():
    z = DS
    proj = z["d"] * z["rq"] + z["rq"] * z["h"] * (z["dn"] + z["dr"]) + z["d"] * (z["rkv"] + z["dr"]) + \
        z["rkv"] * z["h"] * (z["dn"] + z["dv"]) + z["h"] * z["dv"] * z["d"]          # kv_b on the new token
    return 2 * 61 * proj + 2 * 61 * z["h"] * (T + 1) * (z["dn"] + z["dr"] + z["dv"]) + 2 * 3 * 3 * z["d"] * z["m"] \
        + 2 * 58 * 3 * z["d"] * z["me"] * (z["k"] + 1) + 2 * z["d"] * z["V"]


def ds_genz():   # GenZ's catalogue DeepSeek-V3: GQA H=128, Hkv=2, head 56; 8 experts of 18432 in 61 layers
    D, H, Hkv, Dq, Df, E, K = 7168, 128, 2, 56, 18432, 256, 8
    return 2 * (61 * (D * (H * Dq + 2 * Hkv * Dq) + 2 * H * T * Dq + D * H * Dq + E * D + 3 * K * Df * D) + 129280 * D)


def train_formulas(z, s):
    d, L, V = z["d"], z["L"], z["V"]
    mat = L * (2 * d * z["dq"] + 2 * d * z["dkv"] + 3 * d * z["m"])
    norms = L * 2 * d + d
    fwd = hf_macs(z, s, 0, s)
    return {
        "torch-flopcounter": 3 * torch_eager(z, s, 0, s),
        "calflops": 3 * calflops_eager_bmm(z, s, 0, s),
        "llm-analysis": 3 * llm_analysis(z, 1, s, wheel_mlp(z)),
        "llm-analysis-head": 3 * llm_analysis(z, 1, s, head_mlp(z)),
        "nanochat": s * (6 * (mat + d * V) + 12 * L * z["h_q"] * (d // z["h_q"]) * s),
        "palm": s * (6 * (mat + norms + d * V) + 12 * L * z["h_q"] * z["d_h"] * s),
        "torchtitan": s * (6 * (mat + norms + d * V) + 6 * L * z["h_q"] * 2 * z["d_h"] * s),
        "maxtext": 3 * (L * (6 * s * z["m"] * d + 2 * s * d * (z["h_q"] + 2 * z["h_kv"]) * z["d_h"]
                             + 2 * s * d * z["dq"]) + 2 * s * d * V) + 3 * L * 4 * s * s * z["h_q"] * z["d_h"] // 2,
        "megatron": s * (L * 6 * d * 3 * z["m"] + L * 6 * (d * (z["dq"] + 2 * z["dkv"]) + z["dq"] * s + z["dq"] * d)
                         + 6 * d * (-(-V // 128) * 128)),
        "_fwd": fwd,
    }


def expected(name, workload, n):
    """Every tool's number for a case, from the formulas above (None: it cannot answer)."""
    if name == "deepseek-v3":
        m = ds_macs()
        return {"torch-flopcounter": 2 * (m["lin"] + m["experts"] + m["attn"]),
                "deepspeed": 2 * (m["lin"] + m["experts"] + m["attn"]) + m["silu"] + m["softmax"],
                "calflops": 2 * (m["lin"] + m["attn"]) + m["silu"] + m["softmax"],
                "fvcore": m["lin"] + m["experts"] + m["attn"], "genz": ds_genz(), "vllm": ds_vllm()}
    z = llama(name)
    if workload == "train":
        out = train_formulas(z, n)
        del out["_fwd"]
        return out
    if workload == "decode":
        out = {"torch-flopcounter": torch_eager(z, 1, n, 1), "deepspeed": deepspeed_eager(z, 1, n, 1),
               "calflops": calflops_eager_bmm(z, 1, n, 1), "fvcore": fvcore_eager(z, 1, n, 1),
               "llm-analysis": llm_analysis(z, 1, 1, wheel_mlp(z)), "llm-analysis-head": llm_analysis(z, 1, 1, head_mlp(z)),
               "llm-viewer": llm_viewer(z, 1, n), "genz": genz_decode(z, n), "vllm": vllm(z, 1, n + 1, 1)}
        return out
    out = {"torch-flopcounter": torch_eager(z, n, 0, n), "deepspeed": deepspeed_eager(z, n, 0, n),
           "calflops": calflops_eager_bmm(z, n, 0, n), "fvcore": fvcore_eager(z, n, 0, n),
           "llm-analysis": llm_analysis(z, 1, n, wheel_mlp(z)), "llm-viewer": llm_viewer(z, n, n * n),
           "genz": genz_prefill(z, n), "vllm": vllm(z, n, n * n, 1), "maxtext": maxtext_prefill(z, n),
           "llm-analysis-head": llm_analysis(z, 1, n, head_mlp(z))}   # its MHA assert passes a gated Llama-2-7B
    return out


# Numbers the real tools printed (see the module docstring): the anchors.
MEASURED = {
    ("llama-2-7b", "prefill", 1024): {"torch-flopcounter": 14_081_050_279_936, "deepspeed": 14_082_484_731_904,
                                      "calflops": 14_082_484_731_904, "fvcore": 7_040_525_139_968,
                                      "llm-analysis": 14_012_330_803_200, "genz": 14_349_485_735_936,
                                      "vllm": 13_812_876_967_936, "llm-analysis-head": 14_081_050_279_936},
    ("llama-2-7b", "prefill", 4096): {"torch-flopcounter": 62_921_270_886_400, "fvcore": 31_460_635_443_200,
                                      "llm-analysis": 62_646_392_979_456, "vllm": 61_847_791_206_400,
                                      "llm-analysis-head": 62_921_270_886_400},
    ("llama-3.1-8b", "prefill", 8192): {"torch-flopcounter": 158_140_695_838_720, "deepspeed": 158_213_173_411_840,
                                        "llm-analysis-head": 158_140_695_838_720, "vllm": 149_534_632_050_688,
                                        "genz": 166_747_810_299_904},
    ("llama-3.1-8b", "decode", 4096): {"torch-flopcounter": 17_157_324_800, "deepspeed": 17_161_978_880,
                                       "fvcore": 8_578_662_400, "llm-analysis": 12_325_486_592,
                                       "genz": 17_156_800_512, "vllm": 17_157_324_800,
                                       "llm-analysis-head": 15_009_841_152},
    ("mixtral-8x7b", "prefill", 4096): {"torch-flopcounter": 113_232_517_791_744, "deepspeed": 113_253_456_805_888,
                                        "calflops": 20_894_480_072_704, "fvcore": 56_616_258_895_872,
                                        "llm-analysis": 56_049_323_212_800, "genz": 114_306_259_615_744,
                                        "vllm": 112_150_448_177_152},
    ("deepseek-v3", "decode", 32768): {"torch-flopcounter": 67_307_209_113_600, "deepspeed": 67_307_466_098_304,
                                       "calflops": 67_266_596_800_128, "fvcore": 33_653_604_556_800,
                                       "genz": 458_969_907_200, "vllm": 236_786_958_336},
    ("llama-3.1-70b", "train", 8192): {"torch-flopcounter": 3_943_913_849_094_144,
                                       "calflops": 3_945_001_012_690_944, "llm-analysis": 3_284_206_872_428_544},
}
CASES = list(MEASURED)


def case_of(name, workload, n):
    spec = presets.load(name)
    return Case(spec, workload, context=n) if workload == "decode" else Case(spec, workload, seq=n)


@pytest.fixture(scope="module")
def rows():
    return {key: {r["tool"]: r for r in compare(case_of(*key))} for key in CASES}


@pytest.mark.parametrize("key", CASES, ids=lambda k: f"{k[0]}-{k[1]}-{k[2]}")
def test_every_tool_reproduced_from_its_formula_and_its_differences_add_up(rows, key):
    got, want = rows[key], expected(*key)
    assert set(got) == set(TOOLS)
    for tool, row in got.items():
        if tool in want:
            assert row["flops"] == want[tool], (key, tool)
            assert row["flops"] == MEASURED[key].get(tool, row["flops"]), (key, tool, "measured")
            total = row["costcalc_flops"] + sum(Fraction(d["flops"]) for d in row["differences"])
            assert total == row["flops"], (key, tool)
            assert row["ratio"] == pytest.approx(want[tool] / row["costcalc_flops"], abs=5e-7)   # 6 decimals
        else:
            assert row["flops"] is None and row["note"].startswith("cannot answer: "), (key, tool)


def test_named_differences_have_their_exact_sizes(rows):
    z, s = llama("llama-2-7b"), 1024
    torch = rows[("llama-2-7b", "prefill", 1024)]["torch-flopcounter"]
    terms = {d["term"]: d["flops"] for d in torch["differences"]}
    assert terms == {"full square": 2 * z["L"] * z["dq"] * s * (s - 1),       # S^2 - S(S+1)/2 pairs x 4 d_q L
                     "LM head on all positions": 2 * z["d"] * z["V"] * (s - 1)}
    assert terms["full square"] == 274_609_471_488 and terms["LM head on all positions"] == 268_173_312_000
    assert torch["equals"] == "full/all"
    fvcore = {d["term"]: d["flops"] for d in rows[("llama-2-7b", "prefill", 1024)]["fvcore"]["differences"]}
    assert fvcore["MACs not FLOPs x0.5"] == -7_040_525_139_968
    genz = {d["term"]: d["flops"] for d in rows[("llama-2-7b", "prefill", 1024)]["genz"]["differences"]}
    assert genz["embedding as a GEMM (D x S x V)"] == 2 * s * z["d"] * z["V"]
    mixtral = rows[("mixtral-8x7b", "prefill", 4096)]
    mz = llama("mixtral-8x7b")
    assert {d["term"]: d["flops"] for d in mixtral["vllm"]["differences"]}["router omitted"] == \
        -2 * 4096 * mz["L"] * mz["d"] * mz["E"]
    viewer = {d["term"]: d["flops"] for d in mixtral["llm-viewer"]["differences"]}
    assert viewer["one expert instead of k=2"] == -2 * 4096 * mz["L"] * 3 * mz["d"] * mz["m_e"]
    decode = rows[("llama-3.1-8b", "decode", 4096)]
    dz = llama("llama-3.1-8b")
    assert {d["term"]: d["flops"] for d in decode["genz"]["differences"]} == {"T keys not T+1": -4 * dz["L"] * dz["dq"]}
    assert decode["vllm"]["equals"] == "causal" and decode["vllm"]["differences"] == []
    ds = {d["term"]: d["flops"] for d in rows[("deepseek-v3", "decode", 32768)]["torch-flopcounter"]["differences"]}
    assert ds["kv_b_proj re-expands the cached latents"] == 2 * 61 * T * 512 * 128 * 256
    assert rows[("deepseek-v3", "decode", 32768)]["torch-flopcounter"]["equals"] == "full, mla expanded"
    train = rows[("llama-3.1-70b", "train", 8192)]
    tz = llama("llama-3.1-70b")
    half = {d["term"]: d["flops"] for d in train["megatron"]["differences"]}
    assert half == {"half square (S^2/2: the diagonal dropped)": -3 * 2 * tz["L"] * tz["dq"] * 8192}
    assert train["maxtext"]["flops"] // 8192 == 449_222_541_312     # per token, as the research gives it
    assert train["nanochat"]["reported"] == 481_434_796_032 and train["palm"]["reported"] == 481_442_709_504


# transformers' own defaults (SDPA attention, grouped_mm experts), as the tools printed them
DEFAULT_SETUP = {
    ("llama-2-7b", "prefill", 1024): {"torch-flopcounter": 13_531_294_466_048, "deepspeed": 14_081_410_990_080,
                                      "calflops": 13_531_655_176_192, "fvcore": 6_765_647_233_024},
    ("llama-3.1-70b", "train", 8192): {"torch-flopcounter": 3_416_148_267_761_664, "calflops": 3_416_204_639_207_424},
    ("mixtral-8x7b", "prefill", 4096): {"deepspeed": 20_877_300_203_520, "torch-flopcounter": 12_077_448_036_352},
    ("deepseek-v3", "decode", 32768): {"torch-flopcounter": 67_266_339_815_424, "calflops": 67_102_590_314_496,
                                       "fvcore": 33_551_294_595_072},
}


@pytest.mark.parametrize("key", list(DEFAULT_SETUP), ids=lambda k: f"{k[0]}-{k[1]}")
def test_transformers_defaults_as_the_tools_printed_them(key):
    got = {r["tool"]: r for r in compare(case_of(*key), list(DEFAULT_SETUP[key]), Setup("sdpa", "grouped_mm"))}
    for tool, value in DEFAULT_SETUP[key].items():
        assert got[tool]["flops"] == value, (key, tool)
        assert got[tool]["costcalc_flops"] + sum(d["flops"] for d in got[tool]["differences"]) == value


def test_generation_under_vllm_and_hf_generate():
    """vLLM sums its metric over the scheduler steps; HF generate() runs the prefill with
    logits_to_keep=1 and N-1 steps (step j multiplies S+j keys)."""
    z, s, n = llama("llama-3.1-8b"), 1024, 128
    got = {r["tool"]: r for r in compare(Case(presets.load("llama-3.1-8b"), "generate", seq=s, new=n),
                                         ["vllm", "torch-flopcounter"])}
    steps = vllm(z, s, s * s, 1) + sum(vllm(z, 1, s + j, 1) for j in range(1, n))
    assert got["vllm"]["flops"] == steps == 16_823_084_908_544          # perf.py, run unchanged
    hf = torch_eager(z, s, 0, 1) + sum(torch_eager(z, 1, s + j - 1, 1) for j in range(1, n))
    assert got["torch-flopcounter"]["flops"] == hf and got["torch-flopcounter"]["equals"] == "full/last"


def test_setups_change_what_the_executed_counters_see():
    spec = presets.load("mixtral-8x7b")
    z = llama("mixtral-8x7b")
    got = {r["tool"]: r for r in compare(Case(spec, "prefill", seq=4096), ["torch-flopcounter", "calflops", "fvcore"],
                                         Setup("sdpa", "grouped_mm"))}
    m = hf_macs(z, 4096, 0, 4096)
    assert got["torch-flopcounter"]["flops"] == 2 * m["lin"] == 12_077_448_036_352          # measured
    assert got["calflops"]["flops"] == 2 * m["lin"] + m["silu"] + m["router"] == 12_081_207_181_312
    assert got["fvcore"]["flops"] == m["lin"] == 6_038_724_018_176
    names = [d["term"] for d in got["torch-flopcounter"]["differences"]]
    assert "attention not counted (CPU SDPA kernel has no formula)" in names
    assert "routed experts not counted (_grouped_mm has no formula)" in names


def test_rolling_window_tools_and_unanswerable_shapes():
    spec = presets.load("mistral-7b-v0.1")
    got = {r["tool"]: r for r in compare(Case(spec, "decode", context=8192))}
    # HF and vLLM keep W-1 keys: a step multiplies W = 4096 keys, what causal counts
    assert got["torch-flopcounter"]["flops"] == got["vllm"]["flops"] == got["torch-flopcounter"]["costcalc_flops"]
    assert got["genz"]["differences"][0]["term"] == "sliding windows ignored (all T+1 keys)"
    gemma = {r["tool"]: r for r in compare(Case(presets.load("gemma-2-9b"), "prefill", seq=512))}
    assert gemma["llm-analysis"]["flops"] is None and "one kind of GQA layer" in gemma["llm-analysis"]["note"]
    wide = from_dict({"name": "w", "arch": "dense", "L": 2, "d": 3584, "h_q": 16, "h_kv": 8, "d_h": 256, "m": 512,
                      "V": 1000}, "w")
    got = {r["tool"]: r for r in compare(Case(wide, "prefill", seq=64), ["llm-analysis", "llm-viewer", "torch-flopcounter"])}
    assert "hidden_dim" in got["llm-analysis"]["note"] and "hidden_size" in got["llm-viewer"]["note"]
    assert got["torch-flopcounter"]["equals"] == "full/all"


def test_newer_layer_kinds_are_answered_or_refused_row_by_row():
    """A non-gated MLP (GPT-NeoX) or chunked attention (Llama 4) is a row that cannot answer in
    the recipes written for SwiGLU and GQA, not a refusal of the whole comparison; the
    executed counters and the parameter formulas answer."""
    spec = presets.load("pythia-6.9b")
    z = dict(spec.sizes)
    L, d, m, V, s = z["L"], z["d"], z["m"], z["V"], 512
    dq = z["h_q"] * z["d_h"]
    got = {r["tool"]: r for r in compare(Case(spec, "prefill", seq=s))}
    macs = L * s * (4 * d * dq + 2 * d * m) + s * d * V + L * z["h_q"] * s * s * 2 * z["d_h"]
    assert got["torch-flopcounter"]["flops"] == 2 * macs and got["torch-flopcounter"]["equals"] == "full/all"
    assert got["fvcore"]["flops"] == macs
    for tool in ("deepspeed", "calflops", "llm-analysis", "vllm", "genz"):
        assert got[tool]["flops"] is None and "non-gated MLPs not modelled" in got[tool]["note"], tool
    train = {r["tool"]: r for r in compare(Case(spec, "train", seq=s), ["megatron", "palm"])}
    padded = -(-V // 128) * 128           # Megatron without --swiglu: up and down, 2 matrices
    assert train["megatron"]["flops"] == s * (L * 6 * (2 * d * m + 4 * d * dq + dq * s) + 6 * d * padded)
    active = calc.parameters(spec)["active_params"]             # PaLM: 6N + 12 L H Q T, N with the norms
    assert train["palm"]["flops"] == s * (6 * (active + 2 * d * L + d) + 12 * L * z["h_q"] * z["d_h"] * s)
    scout = {r["tool"]: r for r in compare(Case(presets.load("llama-4-scout-17b-16e"), "train", seq=s))}
    assert "chunked attention not modelled" in scout["torch-flopcounter"]["note"]
    half = [t["term"] for t in scout["megatron"]["differences"]]
    assert "half square (S^2/2: the diagonal dropped; chunks ignored)" in half
    assert scout["torchtitan"]["flops"] == scout["palm"]["flops"]          # one expert of 16 either way
    windows = {r["tool"]: r for r in compare(Case(presets.load("starcoder2-7b"), "prefill", seq=s))}
    assert windows["torch-flopcounter"]["equals"] == "full/all"    # a prefill has no window cache to name


def test_compare_json_has_the_interface_keys(capsys):
    assert main(["compare", "prefill", "-p", "llama-2-7b", "-s", "1024", "-f", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["tool"] for r in rows] == list(TOOLS)
    for row in rows:
        assert {"tool", "reported", "unit", "flops", "ratio", "equals", "differences", "note"} <= set(row)
        assert row["unit"] in ("FLOP", "MAC", "OP")
    torch = rows[0]
    assert torch["differences"] == [{"term": "full square", "flops": 274_609_471_488},
                                    {"term": "LM head on all positions", "flops": 268_173_312_000}]


def test_compare_and_mfu_bad_input_is_one_line(capsys, tmp_path):
    out = tmp_path / "x.json"
    for argv in (["compare", "prefill", "-p", "llama-2-7b", "-t", "5"],
                 ["compare", "decode", "-p", "llama-2-7b"],
                 ["compare", "prefill", "-p", "llama-2-7b", "-s", "64", "--tools", "nope"],
                 ["compare", "prefill", "-p", "llama-2-7b", "-s", "64", "--hf-experts", "magic"],
                 ["mfu", "prefill", "-p", "llama-2-7b", "-s", "64", "--peak", "1e15"],
                 ["mfu", "prefill", "-p", "llama-2-7b", "-s", "64", "--time", "1", "--peak", "-3"],
                 ["mfu", "prefill", "-p", "llama-2-7b", "-s", "64", "--time", "1", "--tokens-per-s", "9", "--peak", "1T"],
                 ["mfu", "prefill", "-p", "llama-2-7b", "-s", "64", "--time", "1", "--peak", "1T", "--device", "h100",
                  "-o", str(out)]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1, (argv, err)
    assert not out.exists()


def test_mfu_under_each_convention_and_tool(capsys):
    assert main(["mfu", "prefill", "-p", "llama-3.1-8b", "-s", "8192", "--tokens-per-s", "32768", "--peak", "1000T",
                 "--tools", "vllm,fvcore,nanochat", "-f", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    time_s = 8192 / 32768
    z = llama("llama-3.1-8b")
    causal = [r for r in rows if r.get("convention") == "causal"][0]
    assert causal["flops"] == 131_944_593_489_920 and causal["time_s"] == time_s and causal["peak_flops"] == 1e15
    assert causal["mfu"] == pytest.approx(131_944_593_489_920 / (time_s * 1e15), rel=1e-12)
    by_tool = {r["tool"]: r for r in rows if "tool" in r}
    assert by_tool["vllm"]["mfu"] == pytest.approx(vllm(z, 8192, 8192 ** 2, 1) / (time_s * 1e15), rel=1e-12)
    assert by_tool["fvcore"]["mfu"] == pytest.approx(fvcore_eager(z, 8192, 0, 8192) / (time_s * 1e15), rel=1e-12)
    assert by_tool["nanochat"]["mfu"] is None
    assert [r.get("convention") for r in rows[:3]] == ["causal", "full", "tiled"]
    assert main(["mfu", "decode", "-p", "llama-3.1-8b", "-t", "4096", "--time", "0.01", "--device", "h100",
                 "--tools", "vllm", "-f", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["peak_flops"] == 989.5e12 and rows[0]["peak_from"] == "h100, dense bf16"


def test_csv_and_markdown_carry_exact_numbers_and_the_differences(capsys):
    import csv
    import io

    assert main(["compare", "decode", "-p", "llama-3.1-8b", "-t", "4096", "--tools", "genz,fvcore", "-f", "csv"]) == 0
    rows = {r["tool"]: r for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    assert rows["genz"]["reported"] == "17156.800512" and rows["genz"]["flops"] == "17156800512"
    assert rows["genz"]["differences"] == "T keys not T+1 -524,288"
    assert rows["fvcore"]["differences"] == "MACs not FLOPs x0.5 -8,578,662,400"
    assert main(["compare", "decode", "-p", "llama-3.1-8b", "-t", "4096", "--tools", "vllm", "-f", "markdown"]) == 0
    assert "| 17157324800 " in capsys.readouterr().out


def test_mfu_above_one_hundred_percent_is_called_out(capsys):
    assert main(["mfu", "prefill", "-p", "llama-3.1-8b", "-s", "8192", "--time", "0.001", "--peak", "1000T",
                 "--tools", "vllm"]) == 0
    out = capsys.readouterr().out
    assert "MFU above 100% (costcalc causal" in out and "vllm" in out
    assert main(["mfu", "prefill", "-p", "llama-3.1-8b", "-s", "8192", "--time", "10", "--peak", "1000T",
                 "--tools", "vllm"]) == 0
    assert "MFU above 100%" not in capsys.readouterr().out


def test_a_case_answers_what_its_workload_runs_from_its_registry_entry():
    """The facts the recipes ask (``Case``): read from the registry entry, never the name."""
    spec = presets.load("toy")
    facts = {w: (c.decoding, c.generating, c.training, c.prompt_logits, c.logits.value)
             for w in ("prefill", "decode", "generate", "train") for c in [Case(spec, w, 2, 3, 4, 5)]}
    assert facts == {"prefill": (False, False, False, True, "last"), "decode": (True, False, False, False, "last"),
                     "generate": (False, True, False, False, "last"), "train": (False, False, True, False, "all")}
    assert [Case(spec, w, 2, 3, 4, 5).tokens for w in facts] == [6, 2, 10, 6]


def test_no_recipe_chooses_by_a_workload_name():
    from pathlib import Path
    import re

    peers = Path(calc.__file__).parent / "peers"
    named = [f"{p.name}: {line.strip()}" for p in sorted(peers.glob("*.py")) for line in p.read_text().splitlines()
             if re.search(r"workload\s*(==|!=|in\b|not in\b)|\bworkloads\s*=", line)]
    assert named == []
