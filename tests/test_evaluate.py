"""evaluate.py: the question (Query) and the one door to the compiled recipes."""
import pytest

from costcalc import calc, presets
from costcalc.errors import CostcalcError
from costcalc.evaluate import Options, Query
from costcalc.vocab import TERMS, Logits, MlaForm


def test_a_query_names_its_workload_by_entry_or_name():
    spec = presets.load("toy")
    assert Query(spec, "cached-prefill").workload.name == "cached_prefill"     # an alias
    with pytest.raises(CostcalcError, match="unknown workload"):
        Query(spec, "nonsense")


def test_the_logits_mode_is_the_workload_s_own_else_the_options():
    spec = presets.load("toy")
    assert Query(spec, "prefill", Options(logits="all")).logits == Logits.all
    assert Query(spec, "decode", Options(logits="all")).logits == Logits.last     # a decode step: the last
    assert Query(spec, "train").logits == Logits.all


def test_but_asks_the_same_question_of_another_workload_or_option():
    spec = presets.load("deepseek-v3")
    query = Query(spec, "generate", Options("full", mla="auto"))
    assert query.but(workload="prefill").form == MlaForm.naive
    assert query.but(workload="decode_phase").form == MlaForm.absorbed
    chunk = query.but(workload="cached_prefill", logits="none")
    assert (chunk.workload.name, chunk.options.logits, chunk.options.convention) == ("cached_prefill", Logits.none,
                                                                                      "full")


def test_the_lm_head_is_charged_in_the_first_group_only():
    spec = presets.load("gemma-3-12b")                  # two layer groups (sliding and global)
    recipes = [recipe for _, recipe in Query(spec, "prefill").recipes()]
    assert len(recipes) == 2
    assert "lm_head" in recipes[0].outputs and "lm_head" in recipes[0].operators
    assert not any(n.split(".")[0] == "lm_head" for n in recipes[1].outputs)
    moved = [recipe for _, recipe in Query(spec, "prefill").recipes("bytes")]
    assert "lm_head.weight" in moved[0].outputs and "lm_head.weight" not in moved[1].outputs


def test_groups_add_up_to_the_row():
    spec = presets.load("gemma-3-12b")
    query = Query(spec, "prefill")
    point = {"B": 2, "S": 3000}
    terms = [t.name for t in TERMS]
    by_group = [recipe.evaluate({**group.numbers(), **point}, terms) for group, recipe in query.recipes()]
    assert "total" not in [r for _, r in query.recipes()][1].outputs       # it would hold the LM head again
    assert sum(sum(g.values()) for g in by_group) == calc.point(query, batch=2, seq=3000)["total_flops"]


def test_a_chunk_without_logits_runs_no_lm_head():
    spec = presets.load("llama-3.1-8b")
    query = Query(spec, "cached_prefill")
    with_head = calc.operators(spec, "cached_prefill", batch=1, chunk=64, prefix=100)
    without = calc.operators(spec, "cached_prefill", logits="none", batch=1, chunk=64, prefix=100)
    assert with_head["lm_head"] > 0 and without.get("lm_head", 0) == 0
    assert {k: v for k, v in with_head.items() if k != "lm_head"} == {k: v for k, v in without.items() if k != "lm_head"}
    assert query.but(logits="none").logits == Logits.none


def test_the_command_line_offers_no_logits_none(capsys):
    from cli_run import run

    code, _, err = run(capsys, "prefill", "-p", "toy", "--seq", "8", "--logits", "none")
    assert code == 2 and "none" in err
