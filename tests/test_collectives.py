"""Collectives (costcalc/collectives.py): the factors held to a simulated ring that really reduces,
the link a group spans, n = 1, and bad input as one line."""
from fractions import Fraction

import pytest

from costcalc import collectives as cc
from costcalc.errors import CostcalcError

NVLINK = cc.Link("nvlink", 450e9, 7e-6, 8, cc.SWITCH)
NIC = cc.Link("nic", 50e9, 9e-6)


def ring(n: int, size: int) -> dict[str, list[int]]:
    """A ring all-reduce run chunk by chunk on n ranks holding ``size`` elements of one byte each
    (rank r holds r+1 everywhere): reduce-scatter, then all-gather, each n-1 steps of one chunk
    to the right neighbour. Returns the bytes each rank sent in each phase (and checks the sum)."""
    bounds = [size * c // n for c in range(n + 1)]
    data = [[r + 1] * size for r in range(n)]
    sent = {"reduce_scatter": [0] * n, "all_gather": [0] * n}
    for phase, steps in (("reduce_scatter", range(n - 1)), ("all_gather", range(n - 1))):
        for step in steps:
            outgoing = []
            for r in range(n):
                c = (r - step + (0 if phase == "reduce_scatter" else 1)) % n
                outgoing.append((r, c, data[r][bounds[c]:bounds[c + 1]]))
            for r, c, chunk in outgoing:
                sent[phase][r] += len(chunk)
                right = (r + 1) % n
                if phase == "reduce_scatter":
                    data[right][bounds[c]:bounds[c + 1]] = [a + b for a, b in zip(data[right][bounds[c]:bounds[c + 1]],
                                                                                      chunk)]
                else:
                    data[right][bounds[c]:bounds[c + 1]] = chunk
    assert all(row == [n * (n + 1) // 2] * size for row in data)   # every rank holds the sum: a real all-reduce
    return sent


def switch_reduced(n: int, size: int) -> tuple[list[int], list[int]]:
    """An all-reduce the switch reduces (NVLS's shape): each rank writes its ``size`` one-byte elements
    (rank r holds r+1) to the switch, which sums them and multicasts the result to every rank. Returns
    the bytes each rank sent and received over its own link (and checks the sum)."""
    data = [[r + 1] * size for r in range(n)]
    sent, received = [0] * n, [0] * n
    total = [0] * size
    for r in range(n):                       # every rank's input crosses its link once, upward
        sent[r] += len(data[r])
        total = [a + b for a, b in zip(total, data[r])]
    for r in range(n):                       # the result crosses each rank's link once, downward
        received[r] += len(total)
        data[r] = list(total)
    assert all(row == [n * (n + 1) // 2] * size for row in data)
    return sent, received


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_the_in_network_factor_is_what_a_switch_reduced_all_reduce_moves(n):
    size = 24 * n
    sent, received = switch_reduced(n, size)
    assert set(sent) == set(received) == {cc.link_bytes(cc.ALL_REDUCE, n, size, cc.IN_NETWORK)}
    # the least any all-reduce moves: never more than the ring's, equal to it at n = 2
    assert cc.factor(cc.ALL_REDUCE, n, cc.IN_NETWORK) <= cc.factor(cc.ALL_REDUCE, n)
    assert (cc.factor(cc.ALL_REDUCE, n, cc.IN_NETWORK) == cc.factor(cc.ALL_REDUCE, n)) == (n == 2)


def test_an_all_reduce_runs_the_links_algorithm_unless_told():
    switch = cc.Link("nvls", 450e9, 2e-6, 8, cc.SWITCH, all_reduce=cc.IN_NETWORK)
    size = 64 * 2**20
    assert cc.time(cc.ALL_REDUCE, 8, size, switch) == pytest.approx(2e-6 + size / 450e9, rel=1e-12)
    assert cc.time(cc.ALL_REDUCE, 8, size, switch, algorithm=cc.RING) == \
        pytest.approx(2e-6 + 2 * 7 / 8 * size / 450e9, rel=1e-12)
    assert cc.time(cc.ALL_GATHER, 8, size, switch) == pytest.approx(2e-6 + 7 / 8 * size / 450e9, rel=1e-12)
    assert cc.time(cc.ALL_REDUCE, 8, size, NVLINK) == pytest.approx(7e-6 + 2 * 7 / 8 * size / 450e9, rel=1e-12)
    assert cc.link_for(16, switch, NIC).all_reduce == cc.RING      # across domains: the network, a ring


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_ring_factors_are_what_a_simulated_ring_sends(n):
    size = 24 * n      # chunks of equal size, so every rank sends the same
    sent = ring(n, size)
    assert set(sent["reduce_scatter"]) == {cc.link_bytes(cc.REDUCE_SCATTER, n, size)}
    assert set(sent["all_gather"]) == {cc.link_bytes(cc.ALL_GATHER, n, size)}
    assert {a + b for a, b in zip(*sent.values())} == {cc.link_bytes(cc.ALL_REDUCE, n, size)}
    # all-to-all: each rank keeps its own 1/n and sends 1/n to each of the n-1 others
    assert cc.link_bytes(cc.ALL_TO_ALL, n, size) == (n - 1) * (size // n)
    assert cc.link_bytes(cc.SEND_RECV, n, size) == size


def test_factors_are_exact_fractions():
    assert cc.factor(cc.ALL_REDUCE, 8) == Fraction(7, 4) and isinstance(cc.factor(cc.ALL_REDUCE, 3), Fraction)
    assert cc.factor(cc.ALL_GATHER, 3) == cc.factor(cc.REDUCE_SCATTER, 3) == Fraction(2, 3)
    assert cc.factor(cc.ALL_REDUCE, 8, cc.IN_NETWORK) == Fraction(1)
    assert cc.link_bytes(cc.ALL_REDUCE, 3, 1) == Fraction(4, 3)     # never rounded


def test_time_is_alpha_plus_factor_bytes_over_the_per_direction_bandwidth():
    size = 64 * 2**20
    t = cc.time(cc.ALL_REDUCE, 8, size, NVLINK)
    assert t == pytest.approx(7e-6 + 2 * 7 / 8 * size / 450e9, rel=1e-12)
    assert cc.time(cc.ALL_REDUCE, 8, size, NVLINK, alpha=0) == pytest.approx(2 * 7 / 8 * size / 450e9, rel=1e-12)
    assert cc.time(cc.ALL_GATHER, 8, 0, NVLINK) == 7e-6          # no bytes: the latency alone


def test_one_rank_moves_nothing_and_takes_no_time():
    for op in cc.OPS:
        assert cc.factor(op, 1) == 0 and cc.link_bytes(op, 1, 10**9) == 0 and cc.time(op, 1, 10**9, NVLINK) == 0


def test_the_link_is_the_domains_while_the_group_fits_it_else_the_slowest_hop():
    assert cc.link_for(8, NVLINK, NIC) is NVLINK
    assert cc.link_for(2, NVLINK, NIC, within=False).bytes_per_s_each_way == 50e9
    across = cc.link_for(16, NVLINK, NIC)
    assert across.bytes_per_s_each_way == 50e9 and across.latency_s == 9e-6
    fast_nic = cc.Link("nic", 900e9, 1e-6)            # a NIC faster than the domain: the domain is the slow hop
    assert cc.link_for(16, NVLINK, fast_nic).bytes_per_s_each_way == 450e9
    with pytest.raises(CostcalcError, match="no interconnect.scale_out"):
        cc.link_for(9, NVLINK, None)


def test_a_mesh_gives_a_group_of_n_its_n_minus_1_links():
    mesh = cc.Link("if", 448e9, 7e-6, 8, cc.MESH)      # 7 links of 64 GB/s each way
    assert [mesh.bandwidth(n) for n in (2, 4, 8)] == [64e9, 192e9, 448e9]
    assert NVLINK.bandwidth(2) == 450e9


@pytest.mark.parametrize("call, message", [
    (lambda: cc.factor("allreduce", 2), "unknown collective 'allreduce'"),
    (lambda: cc.factor(cc.ALL_REDUCE, 0), "ranks must be a whole number >= 1"),
    (lambda: cc.factor(cc.ALL_REDUCE, 2.0), "ranks must be a whole number >= 1"),
    (lambda: cc.factor(cc.ALL_REDUCE, True), "ranks must be a whole number >= 1"),
    (lambda: cc.factor(cc.ALL_GATHER, 4, cc.IN_NETWORK), "an all-reduce's only"),
    (lambda: cc.factor(cc.ALL_REDUCE, 4, "tree"), "algorithm 'tree'"),
    (lambda: cc.link_bytes(cc.ALL_REDUCE, 4, -1), "size must be"),
    (lambda: cc.link_bytes(cc.ALL_REDUCE, 4, 1.5), "size must be"),
    (lambda: cc.time(cc.ALL_REDUCE, 4, 8, NVLINK, alpha=float("nan")), "alpha must be"),
    (lambda: cc.time(cc.ALL_REDUCE, 4, 8, NVLINK, alpha=-1e-6), "alpha must be"),
    (lambda: cc.time(cc.ALL_REDUCE, 4, 8, cc.Link("bad", 0.0, 0.0)), "bandwidth must be a positive"),
])
def test_bad_input_is_one_line(call, message):
    with pytest.raises(CostcalcError, match=message) as caught:
        call()
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("op,n", [(op, n) for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
                                  for n in (1, 2, 8, 64)] + [("send_recv", 2)])
def test_times_over_an_array_of_sizes_is_time_at_each(op, n):
    import numpy

    link = cc.link_for(n, NVLINK, NIC)
    sizes = numpy.array([0, 1, 4096, 3 * 2**30 + 7])
    got = cc.times(op, n, sizes, link)
    for size, t in zip(sizes.tolist(), numpy.broadcast_to(got, sizes.shape).tolist()):
        assert t == pytest.approx(cc.time(op, n, size, link), rel=1e-15)
