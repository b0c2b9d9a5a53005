"""A pipeline's stages (costcalc.stages): vLLM's layer split, and the groups each stage holds."""
import pytest

from costcalc import presets
from costcalc.errors import CostcalcError
from costcalc.layout import Layout, device_spec
from costcalc.roofline import weight_plan
from costcalc.stages import partition, stages


@pytest.mark.parametrize("layers, pp", [(32, 2), (61, 4), (80, 3), (10, 4), (7, 7), (126, 16)])
def test_partition_is_vllms_split(layers, pp):
    counts = partition(layers, pp)
    assert sum(counts) == layers and len(counts) == pp
    assert counts[-1] == layers // pp                              # the last stage never takes a left-over layer
    extra = [i for i, c in enumerate(counts) if c > layers // pp]
    assert len(extra) == layers % pp and all(c - layers // pp in (0, 1) for c in counts)
    assert extra == list(range(pp - 1 - layers % pp, pp - 1))      # given from the back, the last excluded


def test_more_stages_than_layers_is_refused():
    with pytest.raises(CostcalcError, match="more stages than"):
        partition(4, 8)


def test_stages_keep_every_layer_in_the_listed_order():
    spec = presets.load("deepseek-v3")
    got = stages(spec, 4)
    assert [sum(g.count for g in stage) for stage in got] == partition(spec["L"], 4)
    flat = [(g.block, g.count) for stage in got for g in stage]
    assert flat[0][0] == spec.groups[0].block                      # the dense layers first, as listed
    for group in spec.groups:
        assert sum(n for block, n in flat if block == group.block) == group.count


def test_device_spec_holds_a_tp_shard_of_every_matrix():
    spec = presets.load("llama-3.1-8b")
    for tp in (2, 4, 8):
        assert weight_plan(device_spec(spec, Layout(tp))).resident() * tp == weight_plan(spec).resident()
