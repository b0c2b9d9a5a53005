"""The shortcuts that make ``costcalc plan``'s search fast change no number: a pipeline's like stages
evaluated once equal every stage evaluated (roofline and, where the tables are installed, measured timing);
``memory.max_batch`` is ``memory.fit``'s ``max_batch``; ``fitting.max_batch`` is the largest batch that
``fits`` (checked batch by batch here); the exact sums of ``roofline.point`` keep their types."""
from fractions import Fraction

import pytest

from costcalc import composites, devices, fitting, memory, parallel, presets
from costcalc.evaluate import Options, Query
from costcalc.layout import Layout
from costcalc.roofline import Machine, Precision
from costcalc.vocab import TRAFFIC
from costcalc.weights import parse


def generate(preset, layout, machine, weight=None):
    options = Options(tp=layout.tp, ep=layout.ep, pp=layout.pp, dp=layout.dp,
                      micro_batches=layout.pp if layout.pp > 1 else None)
    return Query(presets.load(preset), "generate", options, Precision(weight=weight), machine)


def every_stage(monkeypatch):
    """``parallel.same_stages`` off: each stage its own (the plain path)."""
    monkeypatch.setattr(parallel, "same_stages", lambda parts: list(range(len(parts))))


def test_like_middle_stages_are_found():
    # DeepSeek-V3, 61 layers (3 dense, then MoE) in 8 stages
    parts = parallel.stage_queries(generate("deepseek-v3", Layout(1, 1, 8, 1), None).but(workload="prefill"))
    alike = parallel.same_stages(parts)
    assert alike[0] == 0 and alike[-1] == len(parts) - 1    # the first (embedding) and last (LM head) are their own
    assert len(set(alike)) < len(parts)                     # some middle stages are alike
    for i, j in enumerate(alike):                           # and alike ones hold the same layers
        assert repr(parts[i].spec.groups) == repr(parts[j].spec.groups)


@pytest.mark.parametrize("preset,layout,weight", [
    ("deepseek-v3", Layout(4, 4, 2, 1), None),
    ("deepseek-v3", Layout(1, 2, 2, 2), "bf16"),
    ("qwen3-235b-a22b", Layout(1, 1, 8, 1), None),
    ("qwen3-235b-a22b", Layout(2, 2, 4, 1), "fp8"),
])
def test_like_stages_once_equal_every_stage(monkeypatch, preset, layout, weight):
    machine = Machine(devices.load("h200"))
    q = generate(preset, layout, machine, parse(weight) if weight else None)
    sizes = [layout.dp * layout.pp * b for b in (1, 4, 32)]
    fast = composites.rates(q, sizes, [4096] * 3, [1024] * 3)
    every_stage(monkeypatch)
    assert composites.rates(q, sizes, [4096] * 3, [1024] * 3) == fast


def test_like_stages_once_equal_every_stage_measured(monkeypatch):
    pytest.importorskip("pyarrow")
    pytest.importorskip("aiconfigurator_core")
    from costcalc import measured

    machine = Machine(devices.load("h200"), timing=measured.timing("h200", None, None))
    q = generate("deepseek-v3", Layout(2, 2, 4, 1), machine)
    fast = composites.rates(q, [4, 16], [4096] * 2, [1024] * 2)
    every_stage(monkeypatch)
    assert composites.rates(q, [4, 16], [4096] * 2, [1024] * 2) == fast


@pytest.mark.parametrize("preset,layout", [
    ("llama-3.1-8b", Layout()), ("deepseek-v3", Layout(8, 8, 1, 1)), ("deepseek-v3", Layout(4, 8, 2, 2)),
    ("deepseek-v3", Layout(2, 2, 4, 1)), ("qwen3-235b-a22b", Layout(4, 4, 1, 2)),
])
@pytest.mark.parametrize("context", [1, 5119, 131072])
def test_memory_max_batch_is_fits(preset, layout, context):
    q = fitting.memory_query(generate(preset, layout, Machine(devices.load("h200"))))
    row = memory.fit(q, layout.dp, context, fitting.RESERVE, layout)
    assert memory.max_batch(q, context, fitting.RESERVE, layout) == row["max_batch"]


@pytest.mark.parametrize("layout", [Layout(8, 8, 1, 1), Layout(4, 8, 1, 2), Layout(2, 2, 4, 1), Layout(8, 16, 1, 2)])
def test_fitting_max_batch_is_the_largest_that_fits(layout):
    q = generate("deepseek-v3", layout, Machine(devices.load("h200")))
    step = layout.dp * layout.pp
    got = fitting.max_batch(q, 5119)
    assert got % step == 0
    assert got == 0 or fitting.fits(q, got, 5119)
    assert not fitting.fits(q, got + step, 5119)
    # batch by batch, the plain way (no shard shared): every smaller multiple fits
    assert all(fitting.fits(q, b, 5119) for b in range(step, got + 1, max(step, got // 8 // step * step)))


def test_point_sums_keep_their_types():
    machine = Machine(devices.load("h200"))
    q = generate("deepseek-v3", Layout(2, 4, 1, 2), machine).but(workload="prefill")
    got = parallel.device_traffic(q, {"B": 8, "S": 4096})
    assert all(isinstance(v, int) for k, v in got.items() if k.endswith("_bytes"))
    assert all(isinstance(op[key], (Fraction, float)) for op in got["operators"].values()
               for key in ("flops", "bytes", "weight_bytes"))
    kinds = [k for k in got if k.endswith("_bytes") and k.removesuffix("_bytes") in TRAFFIC]
    exact = sum(op["bytes"] for op in got["operators"].values())     # each kind's sum is rounded once
    assert abs(exact - got["total_bytes"]) <= len(kinds) / 2


def test_a_recipe_is_made_once_and_is_the_plain_one():
    from costcalc.evaluate import Recipe

    q = Query(presets.load("deepseek-v3"), "prefill")
    for (_, first), (_, again) in zip(q.recipes(), q.recipes()):
        assert first is again
        plain = Recipe(first.code, first.head)
        assert (first.outputs, first.operators, first.term_of) == (plain.outputs, plain.operators, plain.term_of)
    code = next(q.recipes())[1].code
    assert Recipe.of(code, False).outputs == Recipe(code, False).outputs != Recipe.of(code, True).outputs


@pytest.mark.parametrize("parts", [
    [], [0], [3, 4], [Fraction(1, 2)], [Fraction(3, 2)], [Fraction(5, 2), 1], [Fraction(-1, 2)],
    [1, Fraction(1, 3), Fraction(1, 6)], [Fraction(7, 12), Fraction(11, 12), 2, Fraction(1, 3)],
    [Fraction(2**70 + 1, 3**40), Fraction(5, 3**40), 10**20, Fraction(1, 2)],
    [1, Fraction(1, 3), 0.1, Fraction(1, 7), 2],      # a float: the rest added in order, as the plain sum
])
def test_an_exact_sum_by_denominator_is_the_plain_sum(parts):
    from costcalc.roofline import _Sum

    plain = 0
    for p in parts:
        plain = plain + p
    got = _Sum()
    for p in parts:
        got.add(p)
    assert got.value() == plain
    assert type(got.value()) is type(plain) or plain == 0      # an empty or zero sum: 0 of either type
    assert got.rounded_value() == round(plain) and isinstance(got.rounded_value(), int)
    assert bool(got) == bool(plain)


# --- costcalc.steptimes: a search's times at every batch at once, held to generate's one by one ---------

def _fast_and_plain(preset, layout, weight=None, draft=None, batches=(1, 4, 32), isl=4096, osl=1024):
    """(steptimes' rates, composites.rates) of one generation question at a few batches."""
    from costcalc import steptimes

    machine = Machine(devices.load("h200"))
    spec = presets.load(preset)
    options = Options(tp=layout.tp, ep=layout.ep, pp=layout.pp, dp=layout.dp,
                      micro_batches=layout.pp if layout.pp > 1 else None, draft=draft or "none")
    q = Query(spec, "generate", options, Precision(weight=parse(weight) if weight else None), machine)
    step = layout.dp * layout.pp
    sizes = [step * b for b in batches]
    search = steptimes.Search(batches, isl, osl)
    n = len(sizes)
    return search.generation(q, sizes), composites.rates(q, sizes, [isl] * n, [osl] * n)


def _close(fast, plain, rel=1e-12):
    for key in ("ttft_s", "tpot_s", "batch_tokens_per_s"):
        assert fast[key] == pytest.approx(plain[key], rel=rel), key


FAST_CASES = [      # one of each structure: dense GQA, MoE, MLA with MTP, windows, linear attention, sparse, V4
    ("llama-3.1-8b", Layout(), None, None), ("llama-3.1-8b", Layout(2, 1, 2, 1), "fp8", None),
    ("olmoe-1b-7b", Layout(2, 2, 1, 1), None, None), ("olmoe-1b-7b", Layout(1, 2, 1, 2), None, None),
    ("deepseek-v3", Layout(8, 8, 1, 1), None, None), ("deepseek-v3", Layout(2, 4, 2, 2), "bf16", None),
    ("deepseek-v3", Layout(), "fp8", "mtp"), ("deepseek-v3", Layout(1, 1, 8, 1), None, None),
    ("gemma-3-12b", Layout(2, 1, 2, 1), None, None), ("qwen3.5-35b-a3b", Layout(2, 2, 1, 1), None, None),
    pytest.param("deepseek-v3.2", Layout(4, 4, 1, 1), None, None, marks=pytest.mark.slow),   # seconds each: the
    pytest.param("deepseek-v4-flash", Layout(2, 2, 2, 1), None, None, marks=pytest.mark.slow),   # slow group's
    ("deepseek-v3", Layout(8, 8, 1, 1), None, "mtp"), ("qwen3.5-35b-a3b", Layout(2, 4, 1, 2), None, "mtp"),
]


@pytest.mark.parametrize("preset,layout,weight,draft", FAST_CASES)
def test_steptimes_equal_generate(preset, layout, weight, draft):
    """The search's times (per layer group once, scaled by its layers, over arrays) are generate's."""
    fast, plain = _fast_and_plain(preset, layout, weight, draft)
    _close(fast, plain)


@pytest.mark.slow
@pytest.mark.parametrize("preset", presets.names())
def test_steptimes_equal_generate_on_every_preset(preset):
    for layout in (Layout(), Layout(2, 1, 1, 1), Layout(2, 1, 2, 1)):
        try:
            fast, plain = _fast_and_plain(preset, layout, batches=(1, 8), isl=1024, osl=64)
        except Exception as exc:      # a layout the model refuses: refused the same way by both
            assert "CostcalcError" in type(exc).__name__, exc
            continue
        _close(fast, plain)


@pytest.mark.parametrize("layout,draft_tp", [(Layout(), None),
                                             pytest.param(Layout(2, 1, 1, 1), None, marks=pytest.mark.slow),
                                             (Layout(2, 1, 1, 1), 1), (Layout(2, 1, 1, 2), None)])
def test_steptimes_of_speculation_with_a_draft_model_equal_generate(layout, draft_tp):
    """A speculative generation's every step at once (the verify and the draft model's steps over each
    S + floor(i E) at each batch) is speculation.generation's."""
    from costcalc import speculation, steptimes

    machine = Machine(devices.load("h200"))
    options = Options(tp=layout.tp, dp=layout.dp, draft_model=presets.load("llama-3.1-8b"), draft_tokens=3,
                      acceptance=(Fraction(4, 5),), draft_tp=draft_tp)
    q = Query(presets.load("llama-3.1-70b"), "generate", options, Precision(), machine)
    sizes = [layout.dp * b for b in (1, 4, 16)]
    fast = steptimes.Search([1, 4, 16], 2048, 200).generation(q, sizes)
    plain = speculation.generation(q, sizes, [2048] * 3, [200] * 3)
    _close(fast, {key: plain[key][2::3] for key in ("ttft_s", "tpot_s", "batch_tokens_per_s")})


@pytest.mark.parametrize("preset,layout", [pytest.param("qwen3.5-35b-a3b", Layout(), marks=pytest.mark.slow),
                                           ("qwen3.5-35b-a3b", Layout(2, 2, 1, 1)),
                                           pytest.param("deepseek-v3", Layout(8, 8, 1, 1), marks=pytest.mark.slow),
                                           ("deepseek-v3", Layout(4, 8, 1, 2))])
def test_steptimes_of_speculation_by_the_mtp_module_equal_generate(preset, layout):
    """The MTP module's speculation at every (batch, step) at once: its own term and collectives per step."""
    from costcalc import speculation, steptimes

    machine = Machine(devices.load("h200"))
    options = Options(tp=layout.tp, ep=layout.ep, dp=layout.dp, draft="mtp", draft_tokens=2,
                      acceptance=(Fraction(4, 5),))
    q = Query(presets.load(preset), "generate", options, Precision(weight=parse("fp8")), machine)
    sizes = [layout.dp * b for b in (1, 8)]
    fast = steptimes.Search([1, 8], 2048, 100).generation(q, sizes)
    plain = speculation.generation(q, sizes, [2048] * 2, [100] * 2)
    _close(fast, {key: plain[key][2::3] for key in ("ttft_s", "tpot_s", "batch_tokens_per_s")})
