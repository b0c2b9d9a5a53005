"""Speculative decoding (costcalc.speculation, docs/cost-model.md "Speculative decoding"): the verify
step is the cached-prefill workload row for row, the drafter's K steps are its own decode steps,
E(a, K) holds against a Monte Carlo of accept/reject sequences, the best K is the exact optimum,
the break-even acceptance equalises the times, and bad inputs are one error line."""
import json
import math
from fractions import Fraction

import numpy as np
import pytest

from costcalc import calc, presets, speculation
from costcalc.devices import load as device
from costcalc.errors import CostcalcError
from costcalc.evaluate import Options, Query
from costcalc.memory import fit
from costcalc.roofline import Machine, Precision
from costcalc.spec import from_dict
from cli_run import one_error, run

TARGET, DRAFT = "llama-3.1-70b", "llama-3.1-8b"      # one tokenizer: V = 128256 both


def toy(name: str, L: int, d: int, h_q: int, m: int) -> object:
    """A small dense model with grouped-query attention (one KV head) and a vocabulary of 50."""
    return from_dict({"name": name, "arch": "dense", "L": L, "d": d, "h_q": h_q, "h_kv": 1, "d_h": d // h_q,
                      "m": m, "V": 50}, origin="test")


def spec_query(target, draft, k, rates, workload="decode", machine=None):
    model = draft if not isinstance(draft, str) else None
    options = Options(draft="mtp" if draft == "mtp" else "none", draft_model=model, draft_tokens=k,
                      acceptance=tuple(Fraction(r) for r in rates))
    return Query(target, workload, options, Precision() if machine else None, machine)


def expected_by_hand(rates):
    """E = sum over x of x P(X = x): X = accepted + 1, P(X >= j + 1) = a_1 ... a_j."""
    survive = [Fraction(1)]
    for a in rates:
        survive.append(survive[-1] * a)
    return sum(survive)    # E[X] = sum_{j>=0} P(X > j)


def test_expected_tokens_is_the_geometric_sum_with_the_bonus_token():
    for a in (Fraction(0), Fraction(1, 2), Fraction(4, 5), Fraction(9, 10)):
        for k in range(1, 9):
            closed = (1 - a ** (k + 1)) / (1 - a)
            assert speculation.expected_tokens((a,) * k) == closed
    # GenZ caps E at K (a named difference): at a = 0.9, K = 4 the bonus token makes it 4.0951 > 4
    assert speculation.expected_tokens((Fraction(9, 10),) * 4) == Fraction(40951, 10000)
    per = (Fraction(4, 5), Fraction(7, 10), Fraction(3, 5))
    assert speculation.expected_tokens(per) == 1 + Fraction(4, 5) * (1 + Fraction(7, 10) * (1 + Fraction(3, 5)))


@pytest.mark.parametrize("rates", [(0.8,) * 4, (0.85, 0.7, 0.5), (0.3,)])
def test_expected_tokens_against_a_monte_carlo_of_accept_reject_sequences(rates):
    """Each step: draft i is accepted with probability a_i while all before it were; the step yields
    the accepted drafts and one token of the target's. The sample mean is within 4 standard errors."""
    rng = np.random.default_rng(23)
    n = 40_000
    accepted = np.cumprod(rng.random((n, len(rates))) < np.array(rates), axis=1).sum(axis=1)
    tokens = accepted + 1
    exact = [Fraction(repr(r)) for r in rates]
    e = speculation.expected_tokens(exact)
    assert e == expected_by_hand(exact)
    survive = [math.prod(float(a) for a in exact[:j]) for j in range(len(exact) + 1)]
    probs = [survive[j] - (survive[j + 1] if j + 1 < len(survive) else 0) for j in range(len(survive))]
    variance = sum((j + 1) ** 2 * p for j, p in enumerate(probs)) - float(e) ** 2
    assert abs(tokens.mean() - float(e)) < 4 * math.sqrt(variance / n)


@pytest.mark.parametrize("k,context,batch", [(1, 4096, 1), (4, 1000, 8)])
def test_the_verify_step_is_the_cached_prefill_row_for_row(capsys, k, context, batch):
    base = ["-p", TARGET, "--device", "h200", "-b", str(batch), "-f", "json"]
    code, out, err = run(capsys, "decode", *base, "-t", str(context), "--draft", DRAFT, "--draft-tokens", str(k),
                         "--acceptance", "0.8")
    assert code == 0, err
    row = json.loads(out)[0]
    code, out, err = run(capsys, "prefill", *base, "--cached-prefix", str(context), "--seq", str(k + 1),
                         "--logits", "all")
    assert code == 0, err
    verify = json.loads(out)[0]
    for term in ("attn_proj", "ffn", "linear", "attention", "lm_head"):
        assert row[f"{term}_flops"] == verify[f"{term}_flops"]
    assert row["verify_bytes"] == verify["total_bytes"] and row["verify_time_s"] == verify["time_s"]
    assert row["total_flops"] == verify["total_flops"] + row["draft_flops"]
    assert row["expected_tokens_per_step"] == float(speculation.expected_tokens((Fraction(4, 5),) * k))
    assert row["time_per_token_s"] == pytest.approx(row["time_s"] / row["expected_tokens_per_step"], rel=1e-12)


def test_an_mla_verify_is_the_absorbed_cached_prefill_and_the_mtp_module_runs_as_vllms_proposer():
    """The module's first forward over the K + 1 tokens just verified (a cached prefill over T, logits at
    each sequence's last), then K - 1 single-token forwards over T + K + 1 onwards (vLLM's propose)."""
    spec, k, t = presets.load("deepseek-v3"), 3, 2048
    row = calc.rows(calc.answer(spec_query(spec, "mtp", k, [0.85]), batch=[2], context=[t]))[0]
    cached = calc.cached_prefill(spec, chunk=k + 1, prefix=t, batch=2, logits="all", mla="absorbed")
    for term in ("attn_proj", "experts", "attention", "lm_head"):
        assert row[f"{term}_flops"] == cached[f"{term}_flops"]
    first = calc.rows(calc.answer(Query(spec, "cached_prefill", Options(draft="mtp", mla="absorbed")), batch=[2],
                                  chunk=[k + 1], prefix=[t]))[0]
    rest = [calc.rows(calc.answer(Query(spec, "decode", Options(draft="mtp")), batch=[2], context=[t + k + 1 + j]))[0]
            for j in range(k - 1)]
    assert row["draft_flops"] == first["draft_flops"] + sum(r["draft_flops"] for r in rest)


def _draft_flops(draft, k, t, b):
    """A draft model's proposals by hand: a cached prefill of the K + 1 verified tokens over T (the last
    logits), then K - 1 decode steps over T + K + 1 .. T + 2K - 1 cached tokens."""
    first = calc.cached_prefill(draft, chunk=k + 1, prefix=t, batch=b)["total_flops"]
    return first + sum(calc.decode(draft, context=t + k + 1 + j, batch=b)["total_flops"] for j in range(k - 1))


def test_a_draft_model_proposes_as_vllms_proposer_and_the_attention_closed_form_holds():
    """Verify attention per layer 2 d_q (K+1)(2T+K+2) x B; the LM head 2 B (K+1) d V; the draft's
    FLOPs its own forwards (``_draft_flops``)."""
    target, draft = toy("target", 4, 64, 4, 256), toy("draft", 1, 32, 2, 64)
    for k, t, b in ((1, 10, 1), (3, 100, 4), (6, 7, 2)):
        row = calc.rows(calc.answer(spec_query(target, draft, k, [0.5]), batch=[b], context=[t]))[0]
        assert row["attention_flops"] == 4 * b * 2 * 64 * (k + 1) * (2 * t + k + 2)
        assert row["lm_head_flops"] == 2 * b * (k + 1) * 64 * 50
        assert row["draft_flops"] == _draft_flops(draft, k, t, b)


def test_the_best_k_is_the_exact_optimum():
    """Time per accepted token (V(K) + D(K)) / E(K): V the time of a plain cached-prefill row of K+1
    tokens with all logits, D the draft's plain rows' times (a cached prefill of K+1, K-1 decode steps:
    vLLM's proposer), E(a, K) = (1 -
    a^(K+1)) / (1 - a); minimised over K = 1..8 in exact rational arithmetic (each float time taken
    exactly as a fraction); best_k searches the same K by its own step rows. By FLOPs alone a step
    never beats one token a step (V(K) >= (K+1) x a decode step's FLOPs, E <= K+1): the best is K = 1."""
    machine = Machine(device("h200"))
    target, draft = presets.load(TARGET), presets.load(DRAFT)
    t, b = 4096, 1
    verify = [calc.rows(calc.answer(Query(target, "cached_prefill", Options(logits="all"), Precision(), machine),
                                    batch=[b], chunk=[k + 1], prefix=[t]))[0]["time_s"] for k in range(1, 9)]
    first = [calc.rows(calc.answer(Query(draft, "cached_prefill", Options(), Precision(), machine),
                                   batch=[b], chunk=[k + 1], prefix=[t]))[0]["time_s"] for k in range(1, 9)]

    def later(k):       # the draft's K - 1 single-token forwards over T + K + 1 onwards
        return [calc.rows(calc.answer(Query(draft, "decode", Options(), Precision(), machine), batch=[b],
                                      context=[t + k + 1 + j]))[0]["time_s"] for j in range(k - 1)]
    drafts = {k: Fraction(first[k - 1]) + sum(Fraction(x) for x in later(k)) for k in range(1, 9)}
    found = []
    for a in (Fraction(1, 5), Fraction(3, 5), Fraction(4, 5), Fraction(9, 10), Fraction(97, 100)):
        def per_token(k):
            spent = Fraction(verify[k - 1]) + drafts[k]
            return spent / ((1 - a ** (k + 1)) / (1 - a))
        exact = min(range(1, 9), key=lambda k: (per_token(k), k))
        query = spec_query(target, draft, 1, [a], machine=machine)
        assert speculation.best_k(query, [b], [t], kmax=8) == [exact]
        assert speculation.best_k(query, [b], [t], kmax=8, by="flops") == [1]
        found.append(exact)
    assert found == sorted(found) and found[0] < found[-1]     # more drafts pay where they are accepted


def test_the_break_even_acceptance_equalises_the_time_per_token():
    machine = Machine(device("h200"))
    target, draft = presets.load(TARGET), presets.load(DRAFT)
    for k in (1, 3):
        query = spec_query(target, draft, k, [0.5], machine=machine)
        (a,) = speculation.break_even(query, [1], [4096])
        assert 0 < a < 1
        plain = calc.rows(calc.answer(speculation.plain(query), batch=[1], context=[4096]))[0]["time_s"]
        at = query.but(acceptance=(Fraction(repr(a)),))
        spec = calc.rows(calc.answer(at, batch=[1], context=[4096]))[0]
        assert spec["time_per_token_s"] == pytest.approx(plain, rel=1e-9)
        above = calc.rows(calc.answer(query.but(acceptance=(Fraction(repr(min(a + 0.05, 0.99))),)),
                                      batch=[1], context=[4096]))[0]
        assert above["time_per_token_s"] < plain


def test_a_speculative_generation_runs_ceil_n_minus_1_over_e_steps_at_growing_contexts():
    target, draft = toy("target", 4, 64, 4, 256), toy("draft", 1, 32, 2, 64)
    s, n, b, k = 40, 30, 2, 3
    query = spec_query(target, draft, k, [0.6], workload="generate")
    got = calc.rows(calc.generation(query, batch=[b], seq=[s], new_tokens=[n]))
    e = 1 + Fraction(3, 5) + Fraction(9, 25) + Fraction(27, 125)
    steps = math.ceil((n - 1) / e)
    assert [r["phase"] for r in got] == ["prefill", "decode", "total"] and got[1]["steps"] == steps
    contexts = [s + math.floor(i * e) for i in range(steps)]
    each = [calc.rows(calc.answer(query.but(workload="decode"), batch=[b], context=[c]))[0] for c in contexts]
    assert got[1]["total_flops"] == sum(r["total_flops"] for r in each)
    prefill = calc.prefill(target, seq=s, batch=b)["total_flops"] + calc.prefill(draft, seq=s, batch=b)["total_flops"]
    assert got[0]["total_flops"] == prefill and got[0]["draft_flops"] == calc.prefill(draft, seq=s, batch=b)["total_flops"]
    assert got[2]["total_flops"] == got[0]["total_flops"] + got[1]["total_flops"]
    one = calc.rows(calc.generation(query, batch=[b], seq=[s], new_tokens=[1]))
    assert one[1]["steps"] == 0 and one[1]["total_flops"] == 0


def test_memory_holds_the_draft_models_weights_and_cache(capsys):
    precision, machine = Precision(), Machine(device("h200"))
    both = fit(Query(presets.load(TARGET), "decode", Options(window_cache="rolling", draft_model=presets.load(DRAFT)),
                     precision, machine), 4, 8192)
    alone = [fit(Query(presets.load(name), "decode", Options(window_cache="rolling"), precision, machine), 4, 8192)
             for name in (TARGET, DRAFT)]
    assert both["weight_bytes_resident"] == sum(r["weight_bytes_resident"] for r in alone)
    assert both["kv_cache_bytes"] == sum(r["kv_cache_bytes"] for r in alone)
    assert both["draft"] == DRAFT
    code, out, err = run(capsys, "memory", "-p", TARGET, "--draft", DRAFT, "-t", "8k", "-b", "4", "--device", "h200",
                         "-f", "json")
    assert code == 0, err
    assert json.loads(out)[0]["total_bytes"] == both["total_bytes"]


def test_speculate_prints_every_k_and_marks_the_best(capsys):
    code, out, err = run(capsys, "speculate", "-p", TARGET, "--draft", DRAFT, "--acceptance", "0.8", "-t", "4k",
                         "--device", "h200", "--kmax", "5", "-f", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert [r["draft_tokens"] for r in rows] == [1, 2, 3, 4, 5]
    best = [r for r in rows if r["best"]]
    assert len(best) == 1 and best[0]["time_per_token_s"] == min(r["time_per_token_s"] for r in rows)
    query = spec_query(presets.load(TARGET), presets.load(DRAFT), 1, [0.8], machine=Machine(device("h200")))
    assert best[0]["draft_tokens"] == speculation.best_k(query, [1], [4096], kmax=5)[0]
    for r in rows:
        assert r["speedup"] == pytest.approx(r["decode_time_per_token_s"] / r["time_per_token_s"])


@pytest.mark.parametrize("args,message", [
    (["--draft", DRAFT, "--acceptance", "1"], "in [0, 1)"),
    (["--draft", DRAFT, "--acceptance", "-0.1"], "in [0, 1)"),
    (["--draft", DRAFT, "--acceptance", "high"], "--acceptance takes rates"),
    (["--draft", DRAFT, "--acceptance", "0.8,0.7", "--draft-tokens", "3"], "one per drafted position"),
    (["--draft", DRAFT, "--acceptance", "0.8", "--draft-tokens", "0"], "--draft-tokens"),
    (["--draft", DRAFT, "--acceptance", "0.8", "--draft-tokens", "1000"], "--draft-tokens"),
    (["--draft", "qwen3-8b", "--acceptance", "0.8"], "vocabulary"),
    (["--draft", DRAFT], "give --acceptance"),
    (["--acceptance", "0.8"], "--acceptance needs --draft"),
    (["--draft-tokens", "3"], "--draft-tokens needs --acceptance"),
    (["--draft", DRAFT, "--acceptance", "0.8", "--tp", "2", "--pp", "2"], "a draft model with --pp is not modelled"),
    (["--draft", DRAFT, "--acceptance", "0.8", "--tp", "4", "--draft-tp", "2"], "--draft-tp 2: a draft model runs"),
    (["--draft-tp", "2"], "--draft-tp is a draft model's tensor-parallel degree"),
    (["--draft", DRAFT, "--acceptance", "0.8", "--draft-tp", "2"], "--draft-tp 2: a draft model runs at the target's "
                                                                   "tensor parallelism (1)"),
    (["--draft", "mtp", "--acceptance", "0.8"], "no multi-token-prediction layers"),
])
def test_bad_speculation_inputs_are_one_error_line(capsys, args, message):
    code, _, err = run(capsys, "decode", "-p", TARGET, "-t", "1k", *args)
    assert code != 0 and one_error(err, message), err


def test_the_library_refuses_bad_options_by_name():
    with pytest.raises(CostcalcError, match="in \\[0, 1\\)"):
        Options(draft="mtp", acceptance=(1.0,))
    with pytest.raises(CostcalcError, match="one per drafted position"):
        Options(draft="mtp", draft_tokens=2, acceptance=(0.5, 0.5, 0.5))
    with pytest.raises(CostcalcError, match="applies to decode steps and generations"):
        Query(presets.load("deepseek-v3"), "prefill", Options(draft="mtp", acceptance=(0.5,)))
    assert Options(draft="mtp", acceptance=(0.8,)).acceptance == (Fraction(4, 5),)


def test_a_hybrid_targets_verify_is_its_cached_prefill_whatever_its_mixers_cost():
    """Qwen3-Next's Gated DeltaNet layers verify K+1 tokens as the cached prefill runs them (its scan)."""
    target = presets.load("qwen3-next-80b-a3b")
    draft = from_dict({"name": "small", "arch": "dense", "L": 1, "d": 64, "h_q": 2, "h_kv": 1, "d_h": 32, "m": 128,
                       "V": target.sizes["V"]}, origin="test")
    for convention in ("causal", "full"):
        options = Options(convention, draft_model=draft, draft_tokens=3, acceptance=(Fraction(7, 10),))
        row = calc.rows(calc.answer(Query(target, "decode", options), batch=[2], context=[1000]))[0]
        cached = calc.cached_prefill(target, chunk=4, prefix=1000, batch=2, logits="all", convention=convention)
        flops = [k for k in cached if k.endswith("_flops") and k != "total_flops"]
        assert len(flops) > 5 and all(row[k] == cached[k] for k in flops)
        assert row["total_flops"] == cached["total_flops"] + row["draft_flops"]


def test_rates_by_position_set_k_and_a_step_is_vectorised_over_points(capsys):
    code, out, err = run(capsys, "decode", "-p", TARGET, "-t", "2k", "--draft", DRAFT, "--acceptance", "0.9,0.5",
                         "-f", "json")
    assert code == 0, err
    row = json.loads(out)[0]
    assert row["draft_tokens"] == 2 and row["acceptance"] == "0.9,0.5" and row["expected_tokens_per_step"] == 2.35
    query = spec_query(presets.load(TARGET), presets.load(DRAFT), 3, [0.8])
    batch, context = np.arange(1, 301, dtype=np.int64), np.arange(1000, 1300, dtype=np.int64)
    many = speculation.step(query, batch, context)
    for i in (0, 137, 299):
        one = speculation.step(query, [int(batch[i])], [int(context[i])])
        assert all(many[k][i] == one[k][0] for k in one), i


def test_without_a_device_speculate_compares_flops_and_the_best_is_one_draft(capsys):
    code, out, err = run(capsys, "speculate", "-p", TARGET, "--draft", DRAFT, "--acceptance", "0.9", "-t", "4k",
                         "--kmax", "4", "-f", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert [r["best"] for r in rows] == [True, False, False, False]
    assert all(r["speedup"] < 1 for r in rows) and "break_even_acceptance" not in rows[0]


def test_a_speculative_generation_on_a_device_says_what_its_bytes_and_times_are_of(capsys):
    """Its rows carry the device and the dtypes, as a plain generation's do (the fit warning names the device)."""
    args = ["generate", "-p", "llama-3.1-70b", "--prompt", "1k", "--new", "8", "--device", "h200", "-f", "json"]
    code, plain, _ = run(capsys, *args)
    code2, spec, err = run(capsys, *args, "--draft", "llama-3.1-8b", "--acceptance", "0.8")
    assert code == code2 == 0
    for key in ("device", "weight_dtype", "weight_dtype_source", "kv_dtype", "act_dtype"):
        assert {r[key] for r in json.loads(spec)} == {json.loads(plain)[0][key]}, key
    assert "does not fit on h200" in err


def test_a_draft_model_from_its_preset_file_or_its_config_is_the_preset(capsys, tmp_path):
    """--draft takes a draft model as a preset file or a Hugging Face config.json too: the same rows as
    its built-in preset (the config's model named by its file)."""
    import shutil
    from pathlib import Path

    root = Path(__file__).resolve().parent
    preset = tmp_path / "my-draft.json"
    shutil.copy(root.parent / "presets" / f"{DRAFT}.json", preset)
    config = tmp_path / "config.json"
    shutil.copy(root / "data" / "hf-configs" / f"{DRAFT}.json", config)
    base = ["decode", "-p", TARGET, "--device", "h200", "-t", "4k", "-b", "2", "--draft-tokens", "3",
            "--acceptance", "0.8", "-f", "json"]
    rows = {}
    for given in (DRAFT, str(preset), str(config)):
        code, out, err = run(capsys, *base, "--draft", given)
        assert code == 0, err
        rows[given] = json.loads(out)[0]
    numbers = [{k: v for k, v in r.items() if k != "draft"} for r in rows.values()]
    assert numbers[0] == numbers[1] == numbers[2]
    assert rows[str(preset)]["draft"] == DRAFT          # the file's own name
    assert rows[DRAFT]["draft_flops"] > 0


@pytest.mark.parametrize("given, message", [
    ("missing/draft.json", "--draft is mtp, a draft model's preset or its file"),
    ("no-such-draft", "--draft is mtp, a draft model's preset or its file"),
])
def test_a_draft_that_is_not_there_is_one_line(capsys, given, message):
    code, out, err = run(capsys, "decode", "-p", TARGET, "--device", "h200", "-t", "4k", "--draft", given,
                         "--acceptance", "0.8")
    assert code == 2 and one_error(err, message), err


# --- a draft model under a parallel layout: the verify on the target's, the draft on its own ------------

def _decode_row(capsys, *extra, k=3, batch=8, context=4096):
    code, out, err = run(capsys, "decode", "-p", TARGET, "--device", "h200", "-t", str(context), "-b", str(batch),
                         "--draft", DRAFT, "--draft-tokens", str(k), "--acceptance", "0.8", *extra, "-f", "json")
    assert code == 0, err
    return json.loads(out)[0]


def _draft_phase(layout_options, batch, context, k):
    """The draft model's proposals on its own layout (calc.answer): a cached prefill of the K + 1 verified
    tokens over T, then K - 1 steps (decode_phase at S = T + K + 1, N = K); their columns added."""
    machine, draft = Machine(device("h200")), presets.load(DRAFT)
    first = calc.answer(Query(draft, "cached_prefill", Options(**layout_options), Precision(), machine),
                        batch=[batch], chunk=[k + 1], prefix=[context])
    rest = calc.answer(Query(draft, "decode_phase", Options(**layout_options), Precision(), machine),
                       batch=[batch], seq=[context + k + 1], new_tokens=[k])
    return {key: [first[key][0] + rest[key][0]] for key in ("time_s", "total_flops", "flops_per_device")
            if key in first}


@pytest.mark.parametrize("layout,draft_layout", [
    (("--tp", "2"), {"tp": 2}),
    (("--tp", "2", "--draft-tp", "1"), {}),
    (("--tp", "4", "--dp", "2"), {"tp": 4, "dp": 2}),
    (("--tp", "2", "--dp", "2", "--draft-tp", "1"), {"dp": 2}),
])
def test_under_a_layout_the_verify_is_the_cached_prefill_there_and_the_draft_runs_on_its_own(capsys, layout,
                                                                                           draft_layout):
    k, batch, context = 3, 8, 4096
    row = _decode_row(capsys, *layout, k=k, batch=batch, context=context)
    code, out, err = run(capsys, "prefill", "-p", TARGET, "--device", "h200", "-b", str(batch), "--cached-prefix",
                         str(context), "--seq", str(k + 1), "--logits", "all", *layout[:4 if "--dp" in layout else 2],
                         "-f", "json")
    assert code == 0, err
    verify = json.loads(out)[0]
    assert row["verify_time_s"] == verify["time_s"] and row["layout"] == verify["layout"]
    draft = _draft_phase(draft_layout, batch, context, k)
    assert row["draft_time_s"] == draft["time_s"][0]
    assert row["draft_layout"] == (f"tp{draft_layout.get('tp', 1)}" + (f".dp{draft_layout['dp']}"
                                                                          if draft_layout.get("dp") else ""))
    per_device = draft["flops_per_device"][0] if "flops_per_device" in draft else draft["total_flops"][0]
    assert row["flops_per_device"] == verify["flops_per_device"] + per_device
    assert row["time_s"] == pytest.approx(row["verify_time_s"] + row["draft_time_s"], rel=1e-15)
    assert row["fits"] is True


def test_a_whole_draft_on_every_device_costs_it_the_single_device_draft():
    """--draft-tp 1 under tp2: each device runs the whole draft for all the replica's sequences."""
    alone = _draft_phase({}, 8, 4096, 3)
    assert "flops_per_device" not in alone and alone["time_s"][0] > _draft_phase({"tp": 2}, 8, 4096, 3)["time_s"][0]


def test_memory_under_a_layout_holds_the_draft_shard_beside_the_targets(capsys):
    def per_device(*args):
        code, out, err = run(capsys, "memory", "--device", "h200", "-t", "8k", "-b", "4", *args, "-f", "json")
        assert code == 0, err
        return json.loads(out)[0]

    for draft_tp in ("2", "1"):
        both = per_device("-p", TARGET, "--draft", DRAFT, "--tp", "2", "--draft-tp", draft_tp)
        target = per_device("-p", TARGET, "--tp", "2")
        alone = per_device("-p", DRAFT, *(("--tp", "2") if draft_tp == "2" else ()))
        weights = alone.get("weight_bytes_per_device", alone.get("weight_bytes_resident"))
        cache = alone.get("kv_cache_bytes_per_device", alone.get("kv_cache_bytes"))
        assert abs(both["weight_bytes_per_device"] - target["weight_bytes_per_device"] - weights) <= 1
        assert both["kv_cache_bytes_per_device"] == target["kv_cache_bytes_per_device"] + cache
        assert both["max_batch"] < target["max_batch"]


def test_a_speculative_generation_under_a_layout_adds_both_models_prefill(capsys):
    code, out, err = run(capsys, "generate", "-p", TARGET, "--device", "h200", "--prompt", "2k", "--new", "32", "-b",
                         "4", "--draft", DRAFT, "--acceptance", "0.8", "--draft-tokens", "2", "--tp", "2", "-f", "json")
    assert code == 0, err
    first, decode, total = json.loads(out)
    machine = Machine(device("h200"))
    target = calc.answer(Query(presets.load(TARGET), "prefill", Options(tp=2), Precision(), machine), batch=[4],
                         seq=[2048])
    draft = calc.answer(Query(presets.load(DRAFT), "prefill", Options(tp=2), Precision(), machine), batch=[4],
                        seq=[2048])
    assert first["time_s"] == target["time_s"][0] + draft["time_s"][0] == total["ttft_s"]
    assert first["flops_per_device"] == target["flops_per_device"][0] + draft["flops_per_device"][0]
    assert total["time_s"] == pytest.approx(first["time_s"] + decode["time_s"], rel=1e-15)
    assert total["draft_layout"] == "tp2" and total["layout"] == "tp2"


def test_speculate_on_a_layout_is_each_ks_decode_row_there_beside_plain_decoding(capsys):
    base = ("-p", TARGET, "--device", "h200", "-t", "4k", "-b", "8", "--tp", "2")
    code, out, err = run(capsys, "speculate", *base, "--draft", DRAFT, "--acceptance", "0.8", "--kmax", "3",
                         "-f", "json")
    assert code == 0, err
    rows = json.loads(out)
    plain, = _json_rows(capsys, "decode", *base)
    for r in rows:
        one, = _json_rows(capsys, "decode", *base, "--draft", DRAFT, "--acceptance", "0.8", "--draft-tokens",
                          str(r["draft_tokens"]))
        assert r["time_per_token_s"] == one["time_per_token_s"] and r["layout"] == "tp2"
        assert r["speedup"] == pytest.approx(plain["time_s"] / one["time_per_token_s"], rel=1e-12)


def _json_rows(capsys, *args):
    code, out, err = run(capsys, *args, "-f", "json")
    assert code == 0, err
    return json.loads(out)


def test_the_mtp_modules_logits_are_the_draft_tokens_whatever_the_targets(capsys):
    """--logits all asks the target's logits at every prompt position; the module's head stays at one row a
    sequence (vLLM's proposer samples the last), in the prefill's drafting and in every step's."""
    base = ("generate", "-p", "deepseek-v3", "--prompt", "1k", "--new", "64", "-b", "8", "--draft", "mtp",
            "--acceptance", "0.8", "--draft-tokens", "3", "-f", "json")
    last, every = (_json_rows(capsys, *base, "--logits", mode) for mode in ("last", "all"))
    for a, b in zip(last, every):
        assert a["draft_flops"] == b["draft_flops"], a["phase"]
    assert every[0]["lm_head_flops"] > last[0]["lm_head_flops"]        # the target's own head does follow it
