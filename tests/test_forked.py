"""A search split over forked processes (costcalc/forked.py, plan.search(workers=...)): the same answer
as one process, in the same order; a child that fails has its chunk worked again here, so its error is
raised as it would be without children."""
import os
import signal

import pytest

from costcalc import devices, forked, plan, presets
from costcalc.errors import CostcalcError
from costcalc.roofline import Machine, Precision

pytestmark = pytest.mark.skipif(not forked.safe(), reason="forking is not safe here: forked.run is serial")


def test_chunks_come_back_in_order_worked_in_other_processes():
    got = forked.run(lambda chunk: (os.getpid(), [x * x for x in chunk]), [[1, 2], [3], [4, 5, 6]])
    assert [squares for _, squares in got] == [[1, 4], [9], [16, 25, 36]]
    pids = [pid for pid, _ in got]
    assert pids[0] == os.getpid() and len(set(pids)) == 3       # the first here, the others in children


def test_a_failing_child_is_worked_again_here_and_raises_here():
    here = os.getpid()

    def work(chunk):
        if chunk == "bad":
            raise CostcalcError(f"bad chunk in {os.getpid()}")
        return chunk

    with pytest.raises(CostcalcError, match=f"bad chunk in {here}$"):
        forked.run(work, ["good", "bad"])


def test_a_child_killed_by_a_signal_is_worked_again_here():
    here = os.getpid()

    def work(chunk):
        if os.getpid() != here:
            os.kill(os.getpid(), signal.SIGKILL)
        return chunk * 2

    assert forked.run(work, [1, 2, 3]) == [2, 4, 6]


def test_a_search_on_two_processes_is_the_search_on_one():
    spec = presets.load("olmoe-1b-7b")
    machine, precision = Machine(devices.load("h100")), Precision()
    setup = plan.Setup(spec, precision, machine, 8, plan.weight_choices(spec, precision, machine),
                       ("--preset", spec.name), ("--device", "h100"))
    request = plan.Request(1024, 64, 0.5, 0.01)
    one, two = plan.search(setup, request, workers=1), plan.search(setup, request, workers=2)
    assert one.rows and one.rows == two.rows
    assert list(one.skipped.items()) == list(two.skipped.items()) and one.evaluated == two.evaluated


def test_a_child_that_hangs_is_killed_and_its_chunk_worked_here(monkeypatch):
    import time

    here = os.getpid()
    monkeypatch.setattr(forked, "PATIENCE_S", 0.5)

    def work(chunk):
        if os.getpid() != here:
            time.sleep(60)
        return chunk + 1

    start = time.monotonic()
    assert forked.run(work, [1, 2]) == [2, 3]
    assert time.monotonic() - start < 10


def test_another_thread_running_keeps_the_work_here():
    import threading

    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not forked.safe()
        assert [pid for pid, _ in forked.run(lambda c: (os.getpid(), c), [1, 2])] == [os.getpid()] * 2
    finally:
        stop.set()
        thread.join()
