"""costcalc/core/registry.py: the workload table -- names and aliases, each entry's builder,
inputs, forward, and a composite's compiled workloads."""
import pytest

from costcalc import symbols as s
from costcalc.core import workloads as builders
from costcalc.core.registry import WORKLOADS, workload
from costcalc.vocab import Logits

COMPILED = [w for w in WORKLOADS.values() if w.compiled]
COMPOSITES = [w for w in WORKLOADS.values() if not w.compiled]


def test_names_and_aliases_find_their_entry_and_are_unique():
    spellings = [n for w in WORKLOADS.values() for n in (w.name, *w.aliases)]
    assert len(spellings) == len(set(spellings))
    for w in WORKLOADS.values():
        assert all(workload(n) is w for n in (w.name, *w.aliases))
    with pytest.raises(ValueError, match="unknown workload 'oops'; expected one of prefill, "):
        workload("oops")


@pytest.mark.parametrize("entry", WORKLOADS.values(), ids=list(WORKLOADS))
def test_each_builder_is_the_function_of_its_name(entry):
    assert entry.build is getattr(builders, entry.name)


@pytest.mark.parametrize("entry", COMPILED, ids=[w.name for w in COMPILED])
def test_a_compiled_entry_binds_symbols_and_runs_a_forward_of_them(entry):
    symbols = {i.symbol for i in entry.inputs}
    assert symbols <= set(s.BY_NAME) and not entry.runs and not entry.phases
    assert set(entry.routed) <= symbols and (not entry.tiled_over or entry.tiled_over in symbols)
    if entry.traffic not in ("", "steps"):       # "": no bytes modelled (training)
        past, new = entry.traffic.split(",")
        assert {past, new} - {"0", "1"} <= symbols


@pytest.mark.parametrize("entry", COMPOSITES, ids=[w.name for w in COMPOSITES])
def test_a_composite_is_assembled_from_compiled_entries(entry):
    parts = [entry.runs] if entry.runs else list(entry.phases)
    assert bool(entry.runs) != bool(entry.phases) and parts
    assert all(WORKLOADS[p].compiled for p in parts)


def test_logits_policies():
    assert WORKLOADS["decode"].logits == Logits.last and not WORKLOADS["decode"].labelled_logits
    assert WORKLOADS["train"].logits == Logits.all and WORKLOADS["train"].labelled_logits
    assert WORKLOADS["prefill"].logits is None and WORKLOADS["prefill"].labelled_logits
