"""Layer groups, sliding windows, MLA and shared experts: identities proved symbolically,
and every new formula checked against a brute-force loop over queries and keys."""
import random

import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from brute import UNIT, pairs, tiled
from costcalc import calc, presets
from costcalc import symbols as s
from costcalc.core.breakdown import add_up
from costcalc.spec import from_dict
from named import attention, linear, workloads as w

attention_flops, per_query_flops, linear_terms = attention.attention_flops, attention.per_query_flops, linear.linear_terms

n = sp.Symbol("n", integer=True, nonnegative=True)


def same(a, b):
    return sp.simplify(sp.expand(a - b)) == 0


# --- a window at least as long as the context is plain causal ----------------------------

def test_a_window_covering_the_context_is_causal_attention():
    cases = [
        (w.prefill("window.dense"), w.prefill("gqa.dense"), s.S + n),
        (w.cached_prefill("window.dense"), w.cached_prefill("gqa.dense"), s.T + s.C + n),
        (w.decode("window.dense"), w.decode("gqa.dense"), s.T + 1 + n),
        (w.decode_phase("window.dense"), w.decode_phase("gqa.dense"), s.S + s.N + n),
    ]
    for windowed, plain, wide in cases:
        got = windowed.terms["attention"].subs(s.W, wide)
        assert same(got, plain.terms["attention"]), got
        assert windowed.linear == plain.linear


def test_under_full_a_window_changes_nothing():
    for make in (lambda a: w.prefill(a, "full"), lambda a: w.cached_prefill(a, "full"),
                 lambda a: w.decode_phase(a, "full")):
        assert same(make("window.moe").terms["attention"], make("gqa.moe").terms["attention"])


# --- one layer group is the seed's model ----------------------------------------------------

SEED = {"name": "x", "arch": "dense", "L": 6, "d": 64, "h_q": 8, "h_kv": 2, "d_h": 8, "m": 160, "V": 100}


def test_one_group_and_split_groups_are_the_seed_model():
    flat = from_dict(SEED, "x")
    one = from_dict({k: v for k, v in SEED.items() if k not in ("arch", "L")}
                    | {"layers": [{"count": 6, "arch": "gqa.dense"}]}, "one")
    split = from_dict({k: v for k, v in SEED.items() if k not in ("arch", "L")}
                      | {"layers": [{"count": 2, "arch": "gqa.dense"}, {"count": 4, "arch": "gqa.dense", "m": 160}]},
                      "split")
    for spec in (one, split):
        for conv in ("causal", "full", "tiled"):
            assert calc.prefill(spec, 300, 3, conv) | {"preset": "x"} == calc.prefill(flat, 300, 3, conv)
            assert calc.generate(spec, 50, 20, 2, conv)[-1]["total_flops"] == \
                calc.generate(flat, 50, 20, 2, conv)[-1]["total_flops"]
        assert calc.parameters(spec) == calc.parameters(flat)
        assert calc.crossover(spec)[0]["exact"] == calc.crossover(flat)[0]["exact"]
    # the symbolic core: "dense" is gqa.dense, the seed's boxed prefill
    bd = w.prefill("gqa.dense")
    p_lin = s.L * (2 * s.d * s.d_q + 2 * s.d * s.d_kv + 3 * s.d * s.m)
    assert same(bd.total, 2 * s.B * s.S * p_lin + 2 * s.L * s.B * s.d_q * s.S * (s.S + 1) + 2 * s.B * s.d * s.V)


# --- MLA --------------------------------------------------------------------------------------

def test_mla_with_identity_sized_projections_is_mha():
    """No Q LoRA, no RoPE part, d_nope = d_v = d_h, and a latent as wide as the model (its
    down-projection the identity): MLA's terms are MHA's (h_kv = h_q)."""
    mha = {s.d_q: s.h_q * s.d_h, s.d_kv: s.h_q * s.d_h}
    ident = {s.d_rope: 0, s.d_nope: s.d_h, s.d_v: s.d_h, s.r_kv: s.d}
    for conv in ("causal", "full"):
        mla = w.prefill("mla.dense", conv)
        gqa = w.prefill("gqa.dense", conv)
        assert same(mla.terms["attention"].subs(ident), gqa.terms["attention"].subs(mha))
        down = 2 * s.B * s.S * s.L * s.d * s.d   # the identity down-projection d x r_kv
        assert same(mla.terms["attn_proj"].subs(ident) - down, gqa.terms["attn_proj"].subs(mha))
        assert mla.terms["ffn"] == gqa.terms["ffn"]


def test_mla_cost_per_pair_naive_and_absorbed():
    assert same(per_query_flops(1, "mla.dense"), 2 * s.L * s.h_q * (s.d_nope + s.d_rope + s.d_v))
    assert same(per_query_flops(1, "mla-absorbed.dense"), 2 * s.L * s.h_q * (2 * s.r_kv + s.d_rope))
    # absorbed runs no K/V up-projection per token but two per-head products instead
    naive = linear_terms("mla_q.dense", 1)["attn_proj"]
    absorbed = linear_terms("mla_q-absorbed.dense", 1)["attn_proj"]
    up = 2 * s.L * s.r_kv * s.h_q * (s.d_nope + s.d_v)
    assert same(naive - up, absorbed - 2 * s.L * s.h_q * (s.d_nope * s.r_kv + s.r_kv * s.d_v))


def test_deepseek_decode_is_absorbed_by_default_and_labelled():
    spec = presets.load("deepseek-v3")
    auto, naive = calc.decode(spec, 4096), calc.decode(spec, 4096, mla="naive")
    assert auto["mla"] == "absorbed" and naive["mla"] == "naive"
    assert auto["attention_flops"] != naive["attention_flops"]
    assert calc.prefill(spec, 4096)["mla"] == "naive"
    rows = calc.generate(spec, 1000, 10)
    assert [r["mla"] for r in rows] == ["naive", "absorbed", "naive+absorbed"]
    assert [r["mla"] for r in calc.generate(spec, 1000, 10, mla="naive")] == ["naive"] * 3


# --- against brute force (tests/brute.py) --------------------------------------------------



@settings(max_examples=25, deadline=None)
@given(past=st.integers(0, 60), new=st.integers(1, 60), window=st.integers(1, 80),
       bq=st.integers(1, 9), bk=st.integers(1, 9))
def test_window_attention_equals_a_loop(past, new, window, bq, bk):
    point = {**UNIT, s.T: past, s.C: new, s.W: window, s.b_q: bq, s.b_k: bk}
    chunk = {c: w.cached_prefill("window.dense", c).terms["attention"] for c in ("causal", "full", "tiled")}
    assert chunk["causal"].xreplace(point) == 4 * pairs(past, new, window)
    assert chunk["full"].xreplace(point) == 4 * pairs(past, new, full=True)
    assert add_up(chunk["tiled"].xreplace(point)) == 4 * tiled(past, new, bq, bk, window)
    step = w.decode("window.dense").terms["attention"].xreplace({**point, s.T: past})
    assert step == 4 * min(past + 1, window)


@settings(max_examples=40, deadline=None)
@given(prompt=st.integers(1, 50), new=st.integers(1, 50), window=st.integers(1, 70))
def test_windowed_generation_equals_prefill_plus_steps(prompt, new, window):
    phase = w.decode_phase("window.dense").terms["attention"]
    point = {**UNIT, s.S: prompt, s.N: new, s.W: window}
    steps = sum(min(prompt + j, window) for j in range(1, new))
    assert phase.xreplace(point) == 4 * steps


def test_hybrid_model_is_the_sum_of_its_groups():
    spec = presets.load("gpt-oss-20b")
    rng = random.Random(5)
    for _ in range(5):
        seq = rng.randint(1, 20000)
        row = calc.prefill(spec, seq, 2, "causal")
        parts = []
        for g in spec.groups:
            single = from_dict({"name": "g", "arch": g.arch, "L": g.count, **g.sizes}, "g")
            parts.append(calc.prefill(single, seq, 2, "causal"))
        assert row["attention_flops"] == sum(p["attention_flops"] for p in parts)
        assert row["linear_flops"] == sum(p["linear_flops"] for p in parts)
        assert row["lm_head_flops"] == parts[0]["lm_head_flops"]      # one LM head
        local = 12 * 4 * 4096 * 2 * pairs(0, seq, 128)          # 12 layers, d_q = 4096, batch 2
        assert parts[0]["attention_flops"] == local


# --- crossovers --------------------------------------------------------------------------------

def test_crossover_is_never_when_every_layer_is_windowed_and_the_window_is_short():
    rows = {r["quantity"] + r["convention"]: r for r in calc.crossover(presets.load("mistral-7b-v0.1"))}
    assert rows["decode_t_equalcausal"]["exact"] == "never"
    assert rows["prefill_attention_equals_linearcausal"]["exact"] == "never"
    assert rows["prefill_attention_equals_linearfull"]["exact"] != "never"   # full ignores the window


def test_hybrid_crossover_is_where_attention_meets_linear():
    for name in ("gpt-oss-20b", "gemma-3-12b", "gemma-2-9b"):
        spec = presets.load(name)
        t_equal = sp.Rational(calc.crossover(spec)[0]["exact"])
        below, above = int(sp.floor(t_equal)) - 1, int(sp.ceiling(t_equal)) + 1
        gap = [calc.decode(spec, k - 1) for k in (below, above)]    # decode reads K = T + 1 keys
        assert gap[0]["attention_flops"] < gap[0]["linear_flops"]
        assert gap[1]["attention_flops"] > gap[1]["linear_flops"]


def test_a_generation_is_its_prefill_plus_its_decode_steps_for_every_structure():
    for name in ("gpt-oss-20b", "deepseek-v3", "gemma-3-12b", "qwen1.5-moe-a2.7b"):
        spec = presets.load(name)
        for conv in ("causal", "full", "tiled"):
            prompt, new = 1500, 40
            rows = calc.generate(spec, prompt, new, 3, conv, tile=(64, 32))
            first = calc.prefill(spec, prompt, 3, conv, tile=(64, 32))
            steps = [calc.decode(spec, prompt + j - 1, 3, conv, tile=(64, 32)) for j in range(1, new)]
            for key in ("attention_flops", "linear_flops", "total_flops"):
                assert rows[0][key] == first[key], (name, conv, key)
                assert rows[1][key] == sum(r[key] for r in steps), (name, conv, key)
