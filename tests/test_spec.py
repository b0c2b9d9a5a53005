"""costcalc/spec.py: a preset mapping validated into a ModelSpec -- its fields, its layer
groups, its size limits -- every error naming its source and the field."""
import pytest

from costcalc import spec
from costcalc.errors import CostcalcError
from costcalc.spec import from_dict

GOOD = {"name": "x", "arch": "moe", "L": 2, "d": 8, "h_q": 4, "h_kv": 2, "d_h": 2, "V": 10,
        "E": 4, "k": 2, "m_e": 8}
DENSE = {"name": "h", "d": 8, "V": 10, "h_q": 4, "h_kv": 2, "d_h": 2, "m": 16}


# --- fields -----------------------------------------------------------------------------

@pytest.mark.parametrize("change, message", [
    ({"h_kv": 3}, "h_q=4 is not divisible by h_kv=3"),
    ({"k": 5}, "k=5 experts per token exceeds E=4"),
    ({"d": 0}, "field 'd' must be a positive integer"),
    ({"d": "8"}, "field 'd' must be a positive integer"),
    ({"L": True}, "field 'L' must be a positive integer"),
    ({"m": 16}, "unknown field 'm' \\(only for arch dense\\)"),
    ({"heads": 16}, "unknown field 'heads'"),
    ({"arch": "ssm"}, "field 'arch' must be one of"),
    ({"E": None}, "field 'E' must be a positive integer"),
])
def test_malformed_preset_names_the_field(change, message):
    with pytest.raises(CostcalcError, match=message):
        from_dict({**GOOD, **change}, "'x'")


def test_missing_field_is_named():
    data = {k: v for k, v in GOOD.items() if k != "m_e"}
    with pytest.raises(CostcalcError, match="missing field 'm_e' \\(expert width\\)"):
        from_dict(data, "'x'")


@pytest.mark.parametrize("arch, told", [
    ("ssm", "field 'arch' must be one of dense, moe or a block kind ATTENTION.FFN: block 'ssm' is not "
             "ATTENTION.FFN (e.g. gqa.dense, window.moe)"),
    ("x.dense", "field 'arch' must be one of dense, moe or a block kind ATTENTION.FFN: unknown attention kind 'x'; "
                "expected one of gqa, window, mla, chunk, swa, hca, csa, gdn, kda, mamba2, mamba1, lightning, shortconv, none"),
    (None, "field 'arch' must be one of dense, moe or a block kind like window.dense, got null"),
    (3, "field 'arch' must be one of dense, moe or a block kind like window.dense, got 3"),
])
def test_a_bad_arch_has_one_message_where_given_at_the_top_or_in_a_group(arch, told):
    with pytest.raises(CostcalcError) as top:
        from_dict({**GOOD, "arch": arch}, "preset 'x'")
    assert str(top.value) == f"preset 'x': {told}"
    if arch is not None:            # a group without an arch is a missing field
        with pytest.raises(CostcalcError) as group:
            from_dict({**DENSE, "layers": [{"count": 1, "arch": arch}]}, "preset 'h'")
        assert str(group.value) == f"preset 'h': layers[1]: {told}"


# --- layer groups -------------------------------------------------------------------------

def test_groups_of_one_kind_are_that_kind_and_of_several_a_hybrid():
    one = from_dict({**DENSE, "layers": [{"count": 2, "arch": "gqa.dense"}, {"count": 3, "arch": "gqa.dense"}]}, "h")
    assert one.arch == "gqa.dense" and one["L"] == 5 and [g.count for g in one.groups] == [2, 3]
    mixed = from_dict({**DENSE, "layers": [{"count": 1, "arch": "window.dense", "W": 4},
                                           {"count": 1, "arch": "gqa.dense"}]}, "h")
    assert mixed.arch == "hybrid" and not mixed.uniform
    assert mixed.groups[0].sizes["W"] == 4 and "W" not in mixed.groups[1].sizes


@pytest.mark.parametrize("data, message", [
    ({**DENSE, "arch": "dense", "layers": [{"count": 1, "arch": "dense"}]}, "field 'arch' conflicts with 'layers'"),
    ({**DENSE, "layers": [{"count": 1, "arch": "gqa.dense", "W": 4}]},
     "layers\\[1\\]: field 'W' is not used by arch gqa.dense"),
    ({**DENSE, "layers": [{"count": 1, "arch": "gqa.dense", "d": 4}]}, "layers\\[1\\]: unknown field 'd'"),
    ({**DENSE, "layers": [{"count": 1, "arch": "window.dense"}]}, "layers\\[1\\]: missing field 'W'"),
    ({**DENSE, "layers": [7]}, "layers\\[1\\]: expected an object"),
])
def test_a_bad_group_names_its_place(data, message):
    with pytest.raises(CostcalcError, match=message):
        from_dict(data, "h")


# --- limits -------------------------------------------------------------------------------

def test_the_layer_limit_holds_for_the_sum_of_the_groups():
    half = spec.MAX_LAYERS // 2
    assert from_dict({**DENSE, "layers": [{"count": half, "arch": "dense"}] * 2}, "h")["L"] == spec.MAX_LAYERS
    with pytest.raises(CostcalcError, match=f"the layer groups hold {spec.MAX_LAYERS + 1:,} layers"):
        from_dict({**DENSE, "layers": [{"count": half, "arch": "dense"}, {"count": half + 1, "arch": "dense"}]}, "h")


def test_a_size_past_the_limit_is_refused_and_the_limit_itself_is_not():
    assert from_dict({**GOOD, "V": spec.MAX_SIZE}, "x")["V"] == spec.MAX_SIZE
    with pytest.raises(CostcalcError, match=f"field 'V' is too large \\(at most {spec.MAX_SIZE:,}\\)"):
        from_dict({**GOOD, "V": spec.MAX_SIZE + 1}, "x")
