"""Pipeline schedules as data (costcalc.pipeline): the orders held to torch.distributed.pipelining's
own action tables (torch 2.13 builds them in its schedules' constructors; nothing runs), the bubble
counted from the unit-slot table held to the published (p-1)/(m+p-1) and (p-1)/(v m+p-1), and the
makespan with uneven stages held to the flow-shop closed form."""
import types
from fractions import Fraction

import pytest

from costcalc import pipeline
from costcalc.errors import CostcalcError

SIZES = [(p, m) for p in (2, 3, 4) for m in (1, 2, 3, 4, 5, 8)]


def test_bubble_of_gpipe_and_1f1b_is_p_minus_1_over_m_plus_p_minus_1():
    # GPipe (Huang et al. 2019) and 1F1B (Narayanan et al. 2021, section 2.2): (p-1)/(m+p-1) of the time idle
    for p, m in SIZES:
        expected = Fraction(p - 1, m + p - 1)
        assert pipeline.bubble("gpipe", p, m) == expected
        assert pipeline.bubble("1f1b", p, m) == expected
        assert pipeline.bubble("gpipe", p, m, backward=False) == expected    # inference: forwards only


def test_bubble_of_interleaved_1f1b_is_divided_by_v():
    # Narayanan et al. 2021, section 2.2.2: the bubble shrinks by v (m a multiple of p)
    for p, m, v in [(2, 4, 2), (4, 8, 2), (4, 8, 3), (3, 6, 2), (2, 2, 4)]:
        assert pipeline.bubble("interleaved", p, m, v) == Fraction(p - 1, v * m + p - 1)


def test_the_table_holds_every_action_once_and_no_rank_runs_two_at_once():
    p, m = 4, 6
    slots = pipeline.table("1f1b", p, m)
    cells = [c for row in slots for c in row if c is not None]
    assert sorted(map(str, cells)) == sorted(f"{s}{k}{i}" for s in range(p) for k in "FB" for i in range(m))
    assert len(slots[0]) == 2 * (m + p - 1)          # unit F and B: 2(m + p - 1) slots
    for r, row in enumerate(slots):
        assert all(c is None or c.stage == r for c in row)
    # a stage's forward of a micro-batch follows the previous stage's
    when = {str(c): t for row in slots for t, c in enumerate(row) if c is not None}
    assert all(when[f"{s}F{i}"] > when[f"{s - 1}F{i}"] for s in range(1, p) for i in range(m))
    assert all(when[f"{s}B{i}"] > when[f"{s + 1}B{i}"] for s in range(p - 1) for i in range(m))


def test_makespan_of_a_forward_pipeline_with_uneven_stages():
    # m identical jobs through a flow shop of stage times t_s: sum(t) + (m - 1) max(t)
    for times in ([3, 1, 2], [1, 5], [2, 2, 2, 7]):
        for m in (1, 2, 5):
            assert pipeline.makespan("gpipe", times, m) == sum(times) + (m - 1) * max(times)


def test_makespan_of_1f1b_with_backward_twice_the_forward():
    # uniform stages, t_b = 2 t_f: (m + p - 1)(t_f + t_b), the bubble (p-1)/(m+p-1) in time too
    for p, m in [(2, 4), (4, 8), (3, 3)]:
        assert pipeline.makespan("1f1b", [1] * p, m, [2] * p) == (m + p - 1) * 3


@pytest.mark.parametrize("bad, message", [(("zb", 2, 2, 1), "expected one of gpipe, 1f1b, interleaved"),
                                          (("gpipe", 0, 2, 1), "stages must be a positive integer, got 0"),
                                          (("gpipe", 2, 2, 2), "one model chunk a rank"),
                                          (("interleaved", 2, 5, 2), "not a multiple of the rounds")])
def test_bad_schedules_are_one_error(bad, message):
    with pytest.raises(CostcalcError, match=message):
        pipeline.order(*bad)


def _stub(p, v):
    # what a schedule's constructor reads of its stages (the schedule is built, never stepped)
    return [types.SimpleNamespace(group_size=p, group_rank=0, num_stages=p * v, stage_index=c * p,
                                  is_first=c == 0, is_last=c == v - 1) for c in range(v)]


def _torch(order):
    return {r: [str(a) for a in acts if a is not None and a.computation_type.name in ("FORWARD", "FULL_BACKWARD")]
            for r, acts in order.items()}


def _mine(*args):
    return {r: list(map(str, row)) for r, row in enumerate(pipeline.order(*args))}


def test_orders_are_torch_pipelinings_own_action_tables():
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    for p, m in SIZES:
        assert _torch(schedules.ScheduleGPipe(_stub(p, 1)[0], m).pipeline_order) == _mine("gpipe", p, m)
        for v in (2, 3):
            if m % max(1, m // p):
                continue
            got = schedules.ScheduleInterleaved1F1B(_stub(p, v), m).pipeline_order
            assert _torch(got) == _mine("interleaved", p, m, v)
        if m < p:    # torch's Schedule1F1B takes m >= p
            continue
        theirs, mine = _torch(schedules.Schedule1F1B(_stub(p, 1)[0], m).pipeline_order), _mine("1f1b", p, m)
        assert {r: theirs[r] for r in range(p - 1)} == {r: mine[r] for r in range(p - 1)}
        # the last rank: torch 2.13's Schedule1F1B._get_pipeline_order numbers its forwards 1..m (no
        # warm-up forward, then forward_mb += 1 before the first): the same F/B pattern and backwards
        last = p - 1
        assert [a[:-1] for a in theirs[last]] == [a[:-1] for a in mine[last]]
        assert [a for a in theirs[last] if "B" in a] == [a for a in mine[last] if "B" in a]


@pytest.mark.parametrize("p", [1, 2, 5, 16])
@pytest.mark.parametrize("m", [1, 2, 7, 16])
def test_forward_makespan_over_arrays_is_the_list_schedule(p, m):
    """The closed form a search uses (arrays of stage times, one per batch) equals the list schedule's
    makespan at each batch, uneven stages included."""
    import random

    import numpy

    rng = random.Random(p * 100 + m)
    stages = [[rng.uniform(0.1, 3.0) for _ in range(4)] for _ in range(p)]      # 4 batches a stage
    got = pipeline.forward_makespan([numpy.array(s) for s in stages], m)
    for b in range(4):
        want = pipeline.makespan(pipeline.GPIPE, [s[b] for s in stages], m)
        assert got[b] == pytest.approx(want, rel=1e-12)
    assert pipeline.forward_makespan([2.0] * p, m) == pytest.approx(pipeline.makespan(pipeline.GPIPE, [2.0] * p, m))
