"""Work split over this machine's CPUs by ``fork``: a search of many independent candidates (``costcalc
plan``) runs its chunks in child processes beside its own, each child's result pickled back through a pipe.

``run(work, chunks)`` returns ``[work(chunk) for chunk in chunks]`` -- the first chunk in this process, the
others in children where the platform forks. A child that fails in any way (an exception, a signal, a
result that does not arrive whole) is not trusted: its chunk is worked again here, so an error is raised
where it would have been without the children, and nothing a child prints or leaves reaches the output.
Children take the default action on SIGINT and SIGTERM (no traceback of theirs) and are killed if this
process leaves early.
"""
from __future__ import annotations

import os
import pickle
import signal
import sys
from typing import Any, Callable, Sequence


def cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def run(work: Callable[[Any], Any], chunks: Sequence[Any]) -> list[Any]:
    """``work`` over each chunk, the first here and the rest in forked children (serially where the
    platform has no fork)."""
    if len(chunks) < 2 or not hasattr(os, "fork"):
        return [work(chunk) for chunk in chunks]
    sys.stdout.flush()
    sys.stderr.flush()
    children: list[tuple[int, int]] = []        # (pid, read end)
    try:
        for chunk in chunks[1:]:
            children.append(_spawn(work, chunk))
        out = [work(chunks[0])]
        for (pid, read), chunk in zip(children, chunks[1:]):
            got = _collect(pid, read)
            out.append(work(chunk) if got is _FAILED else got)
        children = []
        return out
    finally:        # left early (an error, an interrupt): no child outlives the search
        for pid, read in children:
            _end(pid, read)


_FAILED = object()


def _spawn(work: Callable[[Any], Any], chunk: Any) -> tuple[int, int]:
    read, write = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write)
        return pid, read
    status = 1
    try:            # the child: its result down the pipe, then out without running anything of the parent's
        os.close(read)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        data = pickle.dumps(work(chunk), protocol=pickle.HIGHEST_PROTOCOL)
        with os.fdopen(write, "wb") as pipe:
            pipe.write(data)
        status = 0
    except BaseException:       # noqa: BLE001 -- the parent works the chunk again and raises what it raises
        pass
    finally:
        os._exit(status)


def _collect(pid: int, read: int) -> Any:
    """A child's result, or ``_FAILED`` where it did not end well."""
    parts = []
    try:
        while True:
            part = os.read(read, 1 << 20)
            if not part:
                break
            parts.append(part)
    finally:
        os.close(read)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        return _FAILED
    try:
        return pickle.loads(b"".join(parts))
    except Exception:       # noqa: BLE001 -- a result cut short
        return _FAILED


def _end(pid: int, read: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        os.close(read)
    except OSError:
        pass
    try:
        os.waitpid(pid, 0)
    except OSError:
        pass
