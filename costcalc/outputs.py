"""Where output goes, checked before any work: standard output, a regular file, or a stream.

- ``-`` (or no path) is standard output.
- A regular file (or a new one in a writable folder) is written atomically: filled beside
  the target, then moved into place, so a failure never leaves half a file.
- A path that is this process's standard output (``/dev/stdout``, ``/proc/self/fd/1``, a link
  to either, or the very file stdout is redirected to) is standard output: written where the
  stream stands, never truncated or replaced.
- A FIFO, a terminal, a character device, or any other path under ``/dev`` or ``/proc`` (such
  as ``/dev/stderr`` redirected to a log) is written in place, streamed and appended to --
  never truncated, never replaced by a regular file.
- A directory, an empty path, a socket or block device, a missing or unwritable folder:
  one ``CostcalcError`` naming the problem, raised by ``target`` before anything is computed.
"""
from __future__ import annotations

import os
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Optional, Union

from .errors import CostcalcError

STDOUT = "-"
_STREAM_ROOTS = ("/dev/", "/proc/")


class ReaderGone(Exception):
    """Standard output's reader closed the pipe (``| head``): stop quietly, as Unix tools do."""


@dataclass(frozen=True)
class Target:
    """A checked destination: ``kind`` is ``stdout``, ``stream`` (write in place) or ``file``
    (atomic replace of ``path``, which may not exist yet)."""
    kind: str
    path: Optional[Path] = None
    shown: str = "standard output"

    @property
    def suffix(self) -> str:
        return self.path.suffix.lower() if self.path is not None else ""   # a FIFO named f.csv too


def target(path: Union[str, Path, None], option: str = "--output") -> Target:
    """Check that ``path`` can be written, without writing it."""
    if path is None or str(path) == STDOUT:
        return Target("stdout")
    text = str(path)
    if not text.strip():
        raise CostcalcError(f"{option}: the path is empty (use - for standard output)")
    p = Path(text)
    if _is_stdout(p):
        return Target("stdout", p, text)     # its name still picks the format (-o r.json >> r.json)
    if text.startswith(_STREAM_ROOTS):
        return _existing_stream(p, text, option)
    try:
        info = os.stat(p)
    except FileNotFoundError:
        return _new_file(p, text, option)
    except OSError as exc:
        raise CostcalcError(f"{option}: cannot write {text!r}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise CostcalcError(f"{option}: {text!r} is a directory; give a file name")
    if stat.S_ISFIFO(info.st_mode) or stat.S_ISCHR(info.st_mode):
        if not os.access(p, os.W_OK):
            raise CostcalcError(f"{option}: cannot write {text!r}: permission denied")
        return Target("stream", p, text)
    if not stat.S_ISREG(info.st_mode):
        raise CostcalcError(f"{option}: {text!r} is not a regular file, a FIFO or a character device")
    real = Path(os.path.realpath(p))
    if not os.access(real, os.W_OK):
        raise CostcalcError(f"{option}: cannot write {text!r}: permission denied")
    _writable_folder(real.parent, text, option)
    return Target("file", real, text)


def _is_stdout(p: Path) -> bool:
    try:
        return os.path.samestat(os.stat(p), os.fstat(sys.stdout.fileno()))
    except (OSError, ValueError, AttributeError):     # no such path, or no real stdout (a test's capture)
        return False


def _existing_stream(p: Path, text: str, option: str) -> Target:
    try:
        info = os.stat(p)
    except OSError as exc:
        raise CostcalcError(f"{option}: cannot write {text!r}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise CostcalcError(f"{option}: {text!r} is a directory; give a file name")
    if not os.access(p, os.W_OK):
        raise CostcalcError(f"{option}: cannot write {text!r}: permission denied")
    return Target("stream", p, text)


def _new_file(p: Path, text: str, option: str) -> Target:
    if text.endswith(os.sep):
        raise CostcalcError(f"{option}: {text!r} names a directory that does not exist; give a file name")
    real = Path(os.path.realpath(p))
    _writable_folder(real.parent, text, option)
    return Target("file", real, text)


def _writable_folder(folder: Path, text: str, option: str) -> None:
    if not folder.is_dir():
        raise CostcalcError(f"{option}: cannot write {text!r}: no directory {str(folder)!r}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise CostcalcError(f"{option}: cannot write {text!r}: directory {str(folder)!r} is not writable")


def folder(path: Union[str, Path], option: str) -> Path:
    """Check that a report folder can be created (or is a writable directory), before any work."""
    text = str(path)
    if not text.strip():
        raise CostcalcError(f"{option}: the path is empty")
    p = Path(os.path.realpath(text))
    probe = p
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        where = "is not a directory" if probe == p else f"lies under {str(probe)!r}, which is not a directory"
        raise CostcalcError(f"{option}: {text!r} {where}")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise CostcalcError(f"{option}: cannot write into {str(probe)!r}: permission denied")
    return p


def write(dest: Target, fill: Callable[[IO[Any]], Any], binary: bool = False) -> None:
    """Write through ``fill(handle)``: to standard output, in place into a stream, or atomically."""
    mode = "wb" if binary else "w"
    try:
        if dest.kind == "stdout":
            fill(sys.stdout.buffer if binary else sys.stdout)
            (sys.stdout.buffer if binary else sys.stdout).flush()
        elif dest.kind == "stream":    # in place: appended, never truncated (a log behind /dev/stderr)
            fd = os.open(dest.path, os.O_WRONLY | os.O_APPEND)
            with os.fdopen(fd, mode, **({} if binary else {"encoding": "utf-8", "newline": ""})) as handle:
                fill(handle)
        else:
            _atomic(dest.path, fill, mode)
    except BrokenPipeError:
        _quiet_stdout()
        if dest.kind == "stdout":   # `costcalc ... | head`: the reader has what it wanted
            raise ReaderGone() from None
        raise CostcalcError(f"cannot write {dest.shown}: the reader closed the pipe") from None
    except OSError as exc:
        raise CostcalcError(f"cannot write {dest.shown!r}: {exc.strerror or exc}") from None


def write_text(dest: Target, text: str) -> None:
    write(dest, lambda handle: handle.write(text))


def _atomic(path: Path, fill: Callable[[IO[Any]], Any], mode: str) -> None:
    """Fill a temporary file beside ``path``, then move it into place. A replaced file keeps
    its permission bits; a new one gets the usual mode (mkstemp alone makes 0600)."""
    try:
        keep = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        keep = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8", "newline": ""})) as handle:
            fill(handle)
        os.chmod(tmp, keep)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            info = None
        if info is not None and not stat.S_ISREG(info.st_mode):   # made a FIFO (or else) since it was checked
            raise CostcalcError(f"cannot write {str(path)!r}: it is no longer a regular file; not replaced")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _quiet_stdout() -> None:
    """After a closed pipe, stop Python complaining again when it flushes stdout at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
