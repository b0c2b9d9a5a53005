"""The two forms real code executes: MLA with its latent re-expanded at every step
(``--mla expanded``) and sliding windows over a rolling cache (``--window-cache rolling``).
Identities proved symbolically, checked against loops, and held to numbers measured from
Hugging Face transformers 5.23 under torch's FLOP counter."""
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from costcalc import calc, presets
from costcalc import symbols as s
from costcalc.blocks import parse
from costcalc.cli import main
from named import workloads as w
from costcalc.core.matmul import matmul

UP = s.h_q * (s.d_nope + s.d_v)          # kv_b_proj's width


def same(a, b):
    return sp.simplify(sp.expand(a - b)) == 0


def test_block_keys_name_the_new_forms():
    for key in ("mla-expanded.dense", "mla_q-expanded.moe_shared", "window-rolling.moe", "window.dense"):
        assert parse(key).key == key
    assert parse("window.dense").with_cache("rolling").key == "window-rolling.dense"
    assert parse("gqa.dense").with_cache("rolling").key == "gqa.dense"         # no window: no cache kind
    assert parse("mla_q.moe_shared").with_form("expanded").key == "mla_q-expanded.moe_shared"


# --- expanded = naive + the re-expansion matmuls ------------------------------------------------

def test_expanded_is_naive_plus_kv_b_proj_over_the_cached_latents():
    past = {"prefill": 0, "cached_prefill": s.T, "decode": s.T}
    for arch in ("mla.dense", "mla_q.moe_shared"):
        for conv in ("causal", "full"):
            for name, cached in past.items():
                build = getattr(w, name)
                naive = build(arch, conv).operators
                expanded = build(parse(arch).with_form("expanded"), conv).operators
                assert set(naive) == set(expanded)
                for op in naive:
                    extra = s.B * s.L * matmul(cached, s.r_kv, UP) if op == "kv_b_proj" else 0
                    assert same(expanded[op], naive[op] + extra), (arch, conv, name, op)


def test_expanded_decode_phase_re_expands_every_step():
    naive = w.decode_phase("mla_q.dense").operators
    expanded = w.decode_phase("mla_q-expanded.dense").operators
    j = sp.Symbol("j", integer=True, positive=True)
    # step j runs over S + j - 1 cached latents
    extra = sp.summation(s.B * s.L * matmul(s.S + j - 1, s.r_kv, UP), (j, 1, s.N - 1))
    assert same(expanded["kv_b_proj"], naive["kv_b_proj"] + extra)
    assert same(expanded["attention"], naive["attention"])


def test_expanded_deepseek_decode_is_what_hf_runs_under_torch():
    """torch 2.13 FlopCounterMode on transformers 5.23 DeepseekV3ForCausalLM (eager attention,
    batched_mm experts, meta device), one decode step after 32768 tokens: 67,307,209,113,600."""
    spec = presets.load("deepseek-v3")
    row = calc.decode(spec, 32768, convention="full", mla="expanded")
    assert row["mla"] == "expanded" and row["total_flops"] == 67_307_209_113_600
    # by hand: every layer re-expands 32769 latents (r_kv=512 -> 128 heads x (128 + 128))
    naive = calc.decode(spec, 32768, convention="full", mla="naive")
    assert row["total_flops"] - naive["total_flops"] == 2 * 61 * 32768 * 512 * 128 * 256
    assert calc.prefill(spec, 4096, mla="expanded")["total_flops"] == calc.prefill(spec, 4096, mla="naive")["total_flops"]


# --- rolling = causal for a single query -------------------------------------------------------

def test_a_rolling_cache_reads_what_causal_reads_for_a_single_query():
    rolling = parse("window-rolling.dense")
    step, causal = w.decode(rolling, "full").terms["attention"], w.decode("window.dense").terms["attention"]
    # Min(T, W-1) + 1 against Min(T+1, W): sympy does not equate the two, so on a grid
    assert all(step.xreplace({s.T: t, s.W: win}) == causal.xreplace({s.T: t, s.W: win})
               for t in range(0, 40) for win in range(1, 40))
    assert same(w.decode_phase(rolling, "full").terms["attention"], w.decode_phase("window.dense", "causal")
                .terms["attention"])
    for build in (w.decode, w.decode_phase):
        assert same(build(rolling, "causal").terms["attention"], build("window.dense", "causal").terms["attention"])
    # a prefill caches nothing before it: rolling or whole, the same rectangle
    assert same(w.prefill(rolling, "full").terms["attention"], w.prefill("window.dense", "full").terms["attention"])


UNIT = {s.L: 1, s.d_q: 1, s.d_h: 1, s.B: 1}   # per pair of one head and layer: 4 FLOPs


@settings(max_examples=30, deadline=None)
@given(past=st.integers(0, 60), new=st.integers(1, 40), window=st.integers(1, 70))
def test_rolling_chunk_attention_equals_a_loop(past, new, window):
    """Hugging Face's DynamicSlidingWindowLayer keeps the last W-1 keys; a forward multiplies
    them and its own new keys, for every new query."""
    point = {**UNIT, s.T: past, s.C: new, s.W: window}
    got = w.cached_prefill(parse("window-rolling.dense"), "full").terms["attention"].xreplace(point)
    assert got == 4 * new * (min(past, window - 1) + new)
    causal = w.cached_prefill("window.dense", "causal").terms["attention"].xreplace(point)
    assert got >= causal


def test_rolling_window_cli_and_rows(capsys):
    spec = presets.load("mistral-7b-v0.1")
    whole = calc.decode(spec, 8192, convention="full")
    rolling = calc.decode(spec, 8192, convention="full", window_cache="rolling")
    causal = calc.decode(spec, 8192)
    assert rolling["window_cache"] == "rolling" and whole["window_cache"] == "whole"
    assert rolling["attention_flops"] == causal["attention_flops"] == 4 * 32 * 4096 * 4096
    assert whole["attention_flops"] == 4 * 32 * 4096 * 8193
    assert main(["decode", "-p", "llama-3.1-8b", "-t", "100", "--window-cache", "rolling", "-f", "csv"]) == 0
    assert "does nothing: llama-3.1-8b has no window layers" in capsys.readouterr().err
    assert main(["prefill", "-p", "mistral-7b-v0.1", "-s", "100", "--window-cache", "rolling", "-f", "csv"]) == 0
    assert "without --cached-prefix" in capsys.readouterr().err
    assert main(["decode", "-p", "mistral-7b-v0.1", "-t", "100", "--window-cache", "sideways"]) == 2
    assert capsys.readouterr().err.startswith("error: ")
