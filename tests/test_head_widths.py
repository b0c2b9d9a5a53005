"""Two GQA features derived from projection shapes (costcalc/blocks.py): values of their own head
dim (``dv``: MiMo-V2-Flash's v_proj and o_proj of d_v per head beside q_proj and k_proj of d_h) and a
per-head output gate (``head_gate``, key ``-hgated``: Step-3.7's g_proj, hidden_size -> heads). Each
count below is written by hand from the shapes; the verifier's torch decoder runs both."""
import pytest
import torch

from costcalc import calc
from costcalc.blocks import parse
from costcalc.devices import load as device
from costcalc.evaluate import Options, Query
from costcalc.memory import cache_per_token
from costcalc.peers.base import KINDS, features
from costcalc.roofline import Machine, Precision
from costcalc.spec import from_dict
from costcalc.verify.run import verify

d, V, h_kv, d_h, d_v, W = 48, 64, 2, 12, 8, 4
SPEC = from_dict({"name": "heads", "d": d, "V": V, "h_kv": h_kv, "d_h": d_h, "layers": [
    {"count": 1, "arch": "gqa-dv-hgated.dense", "h_q": 4, "d_v": d_v, "m": 40},
    {"count": 2, "arch": "window-dv.moe", "h_q": 6, "d_v": d_v, "W": W, "E": 4, "k": 2, "m_e": 16},
    {"count": 1, "arch": "window-hgated.moe_shared", "h_q": 6, "W": W, "E": 4, "k": 2, "m_e": 16, "E_s": 1, "m_s": 16}]},
    "heads")


@pytest.mark.parametrize("key", ["gqa-dv.dense", "window-dv-hgated-rolling.moe", "chunk-hgated.dense",
                                 "gqa-dv-gated.moe_shared"])
def test_keys_read_back(key):
    assert parse(key).key == key


@pytest.mark.parametrize("key, told", [("mla-dv.dense", "d_v apart from d_h"), ("mla-hgated.dense", "output gate"),
                                       ("gqa-gated-hgated.dense", "not both")])
def test_kinds_that_do_not_exist_are_refused(key, told):
    with pytest.raises(ValueError, match=told):
        parse(key)


def attention_proj(h_q: int, dv: bool, gate: bool) -> int:
    """Weights of q, k, v, o (and g) by hand: q and k of d_h per head, v and o of d_v (or d_h)."""
    v = d_v if dv else d_h
    return d * h_q * d_h + d * h_kv * d_h + d * h_kv * v + h_q * v * d + (d * h_q if gate else 0)


def test_parameters_are_the_shapes():
    ffn = 3 * d * 40, 4 * 3 * d * 16 + d * 4, 4 * 3 * d * 16 + d * 4 + 3 * d * 16
    blocks = (attention_proj(4, True, True) + ffn[0] + 2 * (attention_proj(6, True, False) + ffn[1])
              + attention_proj(6, False, True) + ffn[2])
    assert calc.parameters(SPEC)["block_params"] == blocks


def test_prefill_attention_scores_over_d_h_and_values_over_d_v():
    """Causal prefill of S: a query at p reads min(p, W) keys in a window; per head and key
    2 d_h for the score and 2 d_v for the value."""
    S = 10
    full_keys, window_keys = S * (S + 1) // 2, sum(min(p, W) for p in range(1, S + 1))
    expected = (4 * (2 * d_h + 2 * d_v) * full_keys + 2 * 6 * (2 * d_h + 2 * d_v) * window_keys
                + 6 * (2 * d_h + 2 * d_h) * window_keys)
    row = calc.prefill(SPEC, S, 1, "causal")
    assert row["attention_flops"] == expected
    projections = attention_proj(4, True, True) + 2 * attention_proj(6, True, False) + attention_proj(6, False, True)
    assert row["attn_proj_flops"] == 2 * S * projections


def test_the_cache_holds_keys_of_d_h_and_values_of_d_v():
    query = Query(SPEC, "decode", Options(), Precision(), Machine(device("h200")))
    per_token = [per for _, per in cache_per_token(query)]
    assert per_token == [1 * h_kv * (d_h + d_v) * 2, 2 * h_kv * (d_h + d_v) * 2, 1 * h_kv * 2 * d_h * 2]   # bf16


@pytest.mark.slow
def test_the_verifier_runs_both_features_and_counts_what_the_core_derives():
    """Every workload, term and convention (about 15 s: slow)."""
    torch.manual_seed(0)
    outcome = verify(SPEC, device="cpu", seqs=(9,), batch=2, tile=(4, 4), repeats=0, show_progress=False)
    assert outcome.checks and not [r for r in outcome.checks if not r["match"]]
    assert {"g_proj", "v_proj", "o_proj"} <= {r["operator"] for r in outcome.checks if r["operator"]}


def test_other_tools_refuse_them_by_name():
    assert features(parse("window-dv-hgated.moe")) == {"dv", "hgated"}
    assert "d_v != d_h" in KINDS["dv"] and "g_proj" in KINDS["hgated"]
