"""Spawned torch.distributed ranks for the slow gloo tests: a free local port, ``n`` processes
running ``target(rank, folder, port)``, a deadline, and every process ended on every exit path."""
import socket
import time

import pytest


def spawn(target, folder, n: int, deadline_s: float = 300) -> None:
    """Run ``target(rank, str(folder), port)`` on ``n`` spawned processes; a failing rank's traceback
    is raised (``join`` ends the others), a run past ``deadline_s`` fails the test."""
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    context = mp.start_processes(target, args=(str(folder), port), nprocs=n, join=False, start_method="spawn")
    try:
        end = time.monotonic() + deadline_s
        while not context.join(timeout=1):
            if time.monotonic() > end:
                pytest.fail(f"the {n} ranks did not finish in {deadline_s} s")
    finally:
        for p in context.processes:
            if p.is_alive():
                p.terminate()
            p.join(5)
