"""Work split over this machine's CPUs by ``fork``: a search of many independent candidates (``costcalc
plan``) runs its chunks in child processes beside its own, each child's result pickled back through a pipe.

``run(work, chunks)`` returns ``[work(chunk) for chunk in chunks]`` -- the first chunk in this process, the
others in children where forking is safe: a platform that forks (not macOS, whose system libraries may not
survive it), and no other thread running here (a fork copies one thread; another's lock would stay held,
as in a notebook's kernel). A child that fails in any way (an exception, a signal, a result that does not
arrive whole, or none within ``PATIENCE`` times this process's own share and at least ``PATIENCE_S``) is
not trusted: it is killed and its chunk worked again here, so an error is raised where it would have been
without the children. A child writes nothing but its result (only this process reports progress).
Children take the default action on SIGINT and SIGTERM unless this process ignores them (then they do
too), and are killed when this process leaves early through an exception (the CLI turns SIGINT and SIGTERM
into one).
"""
from __future__ import annotations

import os
import pickle
import signal
import sys
import time
from typing import Any, Callable, Sequence


def cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


PATIENCE, PATIENCE_S = 20, 30.0     # a child's result is awaited this many times this process's share, at least


def safe() -> bool:
    """Whether this process may fork its work: a platform that forks, not macOS, no other thread."""
    import threading

    return hasattr(os, "fork") and sys.platform != "darwin" and threading.active_count() == 1


def run(work: Callable[[Any], Any], chunks: Sequence[Any]) -> list[Any]:
    """``work`` over each chunk, the first here and the rest in forked children (serially where forking is
    not ``safe``)."""
    if len(chunks) < 2 or not safe():
        return [work(chunk) for chunk in chunks]
    for stream in (sys.stdout, sys.stderr):     # nothing buffered is written twice (a closed stream: nothing)
        try:
            stream.flush()
        except (ValueError, OSError, AttributeError):
            pass
    children: list[tuple[int, int]] = []        # (pid, read end)
    try:
        for chunk in chunks[1:]:
            children.append(_spawn(work, chunk))
        start = time.monotonic()
        out = [work(chunks[0])]
        deadline = time.monotonic() + max(PATIENCE_S, PATIENCE * (time.monotonic() - start))
        for (pid, read), chunk in zip(list(children), chunks[1:]):
            got = _collect(pid, read, deadline)
            children.remove((pid, read))       # reaped: never signalled again
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
        for sig in (signal.SIGINT, signal.SIGTERM):     # no traceback of a child's; an ignored signal stays so
            if signal.getsignal(sig) is not signal.SIG_IGN:
                signal.signal(sig, signal.SIG_DFL)
        data = pickle.dumps(work(chunk), protocol=pickle.HIGHEST_PROTOCOL)
        with os.fdopen(write, "wb") as pipe:
            pipe.write(data)
        status = 0
    except BaseException:       # noqa: BLE001 -- the parent works the chunk again and raises what it raises
        pass
    finally:
        os._exit(status)


def _collect(pid: int, read: int, deadline: float) -> Any:
    """A child's result, or ``_FAILED`` where it did not end well (killed past ``deadline``)."""
    import select

    parts = []
    try:
        while True:
            ready, _, _ = select.select([read], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:       # a child that hangs: killed, its share worked again
                _end(pid, read)
                return _FAILED
            part = os.read(read, 1 << 20)
            if not part:
                break
            parts.append(part)
    finally:
        try:
            os.close(read)
        except OSError:
            pass
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
