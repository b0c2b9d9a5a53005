"""Sweeps: range syntax, and every vectorised result equal to the per-point exact one."""
import random

import numpy as np
import pytest

from costcalc import calc, presets, ranges
from costcalc import symbols as s
from named import workloads as w
from costcalc.errors import CostcalcError

# --- range syntax -------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("4096", [4096]),
    ("1024,4096", [1024, 4096]),
    ("128k", [131072]),
    ("1.5k", [1536]),
    ("1M", [1048576]),
    ("1:5", [1, 2, 3, 4, 5]),
    ("512:2k:512", [512, 1024, 1536, 2048]),
    ("1:10:4", [1, 5, 9]),
    ("1k:8k:x2", [1024, 2048, 4096, 8192]),
    ("3:100:x3", [3, 9, 27, 81]),
    ("512,1k:4k:x2", [512, 1024, 2048, 4096]),
])
def test_ranges_parse(text, expected):
    assert list(ranges.parse(text, "--seq")) == expected


def test_geometric_range_from_1k_to_1m_is_eleven_powers_of_two():
    values = list(ranges.parse("1k:1M:x2", "--seq"))
    assert values == [2**p for p in range(10, 21)]


@pytest.mark.parametrize("text, message", [
    ("ten", "not a number"),
    ("1.3k", "not a whole number"),
    ("8:4", "ends before it starts"),
    ("1:8:x1", "at least 2"),
    ("1:8:0", "step"),
    ("1:2:3:4", "too many"),
    ("0:4", "0 is not positive"),
    ("-5", "-5 is not positive"),
    ("1,,2", "empty item"),
    ("2000G", "too large"),
])
def test_ranges_reject_bad_text(text, message):
    with pytest.raises(CostcalcError, match=message):
        ranges.parse(text, "--seq")


def test_grid_is_the_product_in_order_and_refuses_huge_grids():
    small = ranges.grid(seq=[1, 2], batch=[3, 4, 5])
    assert list(zip(small["seq"], small["batch"])) == [(1, 3), (1, 4), (1, 5), (2, 3), (2, 4), (2, 5)]
    big = ranges.grid(seq=range(1, 101), batch=range(1, 101))
    assert isinstance(big["seq"], np.ndarray) and len(big["seq"]) == 10_000
    assert (big["seq"][:101].tolist(), big["batch"][:101].tolist()) == ([1] * 100 + [2], list(range(1, 101)) + [1])
    with pytest.raises(CostcalcError, match="at most 10,000,000"):
        ranges.grid(seq=range(10**4), batch=range(10**4))


# --- vectorised == exact --------------------------------------------------------------

def reference(spec, workload, convention, logits, point, tile=(64, 32)):
    """The sympy core at one point, summed over the model's layer groups (one LM head): the
    oracle every fast path is held against."""
    form = "absorbed" if workload == "decode" else "naive"
    symbols = {"batch": s.B, "seq": s.S, "chunk": s.C, "prefix": s.T, "context": s.T}
    total: dict = {}
    for i, g in enumerate(spec.groups):
        arch = g.block.with_form(form).key
        bd = {"prefill": lambda: w.prefill(arch, convention, logits),
              "cached_prefill": lambda: w.cached_prefill(arch, convention, logits),
              "decode": lambda: w.decode(arch, convention),
              "train": lambda: w.train(arch, convention)}[workload]()
        values = {**{s.BY_NAME[k]: v for k, v in g.numbers().items()},
                  **{symbols[k]: v for k, v in point.items()}, s.b_q: tile[0], s.b_k: tile[1]}
        for k, v in bd.evaluate(values).items():
            if k == "lm_head" and i:
                continue
            total[f"{k}_flops"] = total.get(f"{k}_flops", 0) + v
    lm = total.get("lm_head_flops", 0)
    total["linear_flops"] = sum(v for k, v in total.items() if k not in ("linear_flops", "total_flops",
                                                                           "attention_flops", "lm_head_flops"))
    total["total_flops"] = total["linear_flops"] + total["attention_flops"] + lm
    return total


AXES = {"prefill": ("batch", "seq"), "cached_prefill": ("batch", "chunk", "prefix"),
        "decode": ("batch", "context"), "train": ("batch", "seq")}


@pytest.mark.parametrize("name", ["llama-3.1-8b", "mixtral-8x7b", "gpt-oss-120b",   # dense, MoE, window MoE,
                                  "deepseek-v3", "gemma-3-12b", "qwen1.5-moe-a2.7b"])  # MLA, 5:1 local, gated shared
@pytest.mark.parametrize("workload", list(AXES))
@pytest.mark.parametrize("convention", ["causal", "full"])
def test_vectorised_sweep_equals_the_symbolic_value_at_random_points(name, workload, convention):
    spec = presets.load(name)
    rng = random.Random(hash((name, workload, convention)) % 1000)
    n = calc.SMALL + 300     # above SMALL: the array path
    top = {"batch": 512, "seq": 2_000_000, "chunk": 500_000, "prefix": 2_000_000, "context": 2_000_000}
    low = {"prefix": 0}
    columns = {a: np.array([rng.randint(low.get(a, 1), top[a]) for _ in range(n)]) for a in AXES[workload]}
    table = calc.table(spec, workload, convention, "last", None, **columns)
    for i in rng.sample(range(n), 25):
        point = {a: int(columns[a][i]) for a in AXES[workload]}
        expected = reference(spec, workload, convention, "all" if workload == "train" else "last", point)
        assert {k: table[k][i] for k in expected} == expected, point
        assert all(type(table[k][i]) is int for k in expected)


def test_sweeps_past_2_63_are_exact_and_int64_sized_ones_too():
    spec = presets.load("llama-3.1-405b")
    seq = np.arange(1, 3001) * 1000
    table = calc.table(spec, "prefill", "causal", "last", None, batch=np.full(3000, 64), seq=seq)
    assert max(table["total_flops"]) > 2**63
    for i in (0, 1234, 2999):
        assert table["total_flops"][i] == reference(spec, "prefill", "causal", "last",
                                                    {"batch": 64, "seq": int(seq[i])})["total_flops"]
    small = calc.table(presets.load("toy"), "prefill", "causal", "last", None,
                       batch=np.ones(3000, dtype=np.int64), seq=np.arange(1, 3001))
    assert small["total_flops"][2999] == calc.prefill(presets.load("toy"), 3000)["total_flops"]


def test_tiled_sweep_runs_point_by_point_and_is_exact():
    spec = presets.load("qwen3-30b-a3b")
    seq = np.arange(1, calc.SMALL + 50) * 37
    table = calc.table(spec, "prefill", "tiled", "last", (64, 32), batch=np.ones(len(seq), dtype=np.int64), seq=seq)
    for i in (0, 100, len(seq) - 1):
        assert table["attention_flops"][i] == reference(spec, "prefill", "tiled", "last",
                                                        {"batch": 1, "seq": int(seq[i])})["attention_flops"]


def test_generation_sweep_equals_the_point_function():
    spec = presets.load("mixtral-8x7b")
    points = ranges.grid(seq=ranges.parse("1k:64k:x2", "s"), new_tokens=ranges.parse("1:3000:97", "n"), batch=[8])
    table = calc.generate_table(spec, "causal", "last", None, **points)
    assert len(table["phase"]) == 3 * len(points["seq"])
    rows = calc.rows(table)
    for i in (0, 77, len(points["seq"]) - 1):
        expected = calc.generate(spec, int(points["seq"][i]), int(points["new_tokens"][i]), 8)
        assert rows[3 * i:3 * i + 3] == expected


def test_a_sweep_and_the_point_functions_give_identical_rows():
    spec = presets.load("llama-3.1-70b")
    seqs = list(range(1, calc.SMALL + 40))
    fast = calc.rows(calc.table(spec, "prefill", "full", "all", None,
                                batch=np.full(len(seqs), 3), seq=np.array(seqs)))
    slow = [calc.prefill(spec, q, 3, "full", "all") for q in seqs]
    assert fast == slow
