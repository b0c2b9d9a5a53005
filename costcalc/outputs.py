"""Where output goes, checked before any work: standard output, a regular file, or a stream.

- ``-`` (or no path) is standard output.
- A regular file (or a new one in a writable folder) is written atomically: filled beside
  the target, then moved into place, so a failure never leaves half a file.
- A path that is this process's standard output (``/dev/stdout``, ``/proc/self/fd/1``, a link
  to either, or the very file stdout is redirected to) is standard output: written where the
  stream stands, never truncated or replaced.
- A FIFO, a terminal, a character device, or a name of an open descriptor (``/dev/stderr``
  redirected to a log, ``/proc/self/fd/3``) is written in place, streamed and appended to --
  never truncated, never replaced by a regular file. Any other path under ``/dev`` or
  ``/proc`` is what it leads to (``/proc/self/cwd/r.csv`` is the regular file ``r.csv``).
- A directory, an empty path, a socket or block device, a missing or unwritable folder:
  one ``CostcalcError`` naming the problem, raised by ``target`` before anything is computed.
- A file this command reads (a config, a preset or device file: whatever ``jsonfile.read``
  opened), by any name -- a symlink to it or a hard link, a descriptor or the standard output
  it is open as -- is never replaced or appended to: whichever of
  the check and the read comes second refuses it, before the work, and ``_atomic`` checks
  again just before the move.
- A replaced file keeps its mode, and its owner and group where the process may set them
  (root may; anyone else keeps the group if a member of it). Where it cannot, the file is
  still written, and one warning says who owns it now.
- The format follows the name given (``-o r.csv`` is CSV even as a link to ``store_12``);
  the temporary file is ``.costcalc-XXXXXXXX.tmp`` beside the target, so any name that fits
  the folder fits it too.
- A closed standard output is an error (``CostcalcError``), never a traceback. The CLI
  writes characters a non-UTF-8 standard output cannot encode as backslash escapes
  (``\\xe1``), and ``say`` drops a line for a closed or broken standard error.
"""
from __future__ import annotations

import os
import re
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Optional, Union

from .errors import CostcalcError
from .printable import escape

STDOUT = "-"
# A name of an open descriptor (``/dev/stderr``, ``/dev/fd/3``, ``/proc/self/fd/1``): written in
# place, appended to. Any other path, under /dev or /proc too, is what it leads to.
_DESCRIPTOR = re.compile(r"/(dev/(stdin|stdout|stderr|fd/\d+)|proc/(self|thread-self|\d+)/fd/\d+)\Z")


class ReaderGone(Exception):
    """Standard output's reader closed the pipe (``| head``): stop quietly, as Unix tools do."""


@dataclass(frozen=True)
class Target:
    """A checked destination: ``kind`` is ``stdout``, ``stream`` (write in place) or ``file``
    (atomic replace of ``path``, which may not exist yet)."""
    kind: str
    path: Optional[Path] = None
    shown: str = "standard output"
    option: str = "--output"

    @property
    def suffix(self) -> str:
        """The suffix of the name given (a FIFO named f.csv too; a link named r.csv to store_12)."""
        return Path(self.shown).suffix.lower() if self.path is not None else ""

    @property
    def printed(self) -> str:
        """The name given, as a message shows it: control characters escaped (a newline in a
        name does not split the line), the rest as typed."""
        return printable(self.shown)


def printable(text: str) -> str:
    """A name as a message shows it: ``printable.escape`` (control characters as Python escapes)."""
    return escape(text)


# Files this process reads and files it will replace, by (st_dev, st_ino): one may not be
# the other, whatever the names. ``forget`` starts a new command (the CLI's ``main``).
_read: dict[tuple[int, int], str] = {}
_replaced: dict[tuple[int, int], Target] = {}


def forget() -> None:
    """Start afresh: no file read, no target checked (a new command in this process)."""
    _read.clear()
    _replaced.clear()


def reading(info: os.stat_result, what: str) -> None:
    """Note that this process reads the file ``info`` describes (``what`` names it, as "config
    'c.json'"); a target already checked to be replaced is refused now, before any work."""
    key = (info.st_dev, info.st_ino)
    _read[key] = what
    if key in _replaced:
        raise _same_file(_replaced[key], what)


def _same_file(dest: Target, what: str) -> CostcalcError:
    return CostcalcError(f"{dest.option}: {dest.shown!r} is the {what} this command reads, and would be "
                         f"replaced by its output; give another file")


def target(path: Union[str, Path, None], option: str = "--output") -> Target:
    """Check that ``path`` can be written, without writing it."""
    if path is None or str(path) == STDOUT:
        return Target("stdout")
    text = str(path)
    if not text.strip():
        raise CostcalcError(f"{option}: the path is empty (use - for standard output)")
    p = Path(text)
    if _is_stdout(p):     # its name still picks the format (-o r.json >> r.json)
        return _claim(os.fstat(sys.stdout.fileno()), Target("stdout", p, text, option))
    if _DESCRIPTOR.match(text):
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
    real = _real(p, text, option)
    if not os.access(real, os.W_OK):
        raise CostcalcError(f"{option}: cannot write {text!r}: permission denied")
    _writable_folder(real.parent, text, option)
    return _claim(info, Target("file", real, text, option))


def _claim(info: os.stat_result, dest: Target) -> Target:
    """``dest``, noted as a file this command writes when ``info`` is a regular file: refused
    if the command reads that file (a later read is refused by ``reading``)."""
    if stat.S_ISREG(info.st_mode):
        key = (info.st_dev, info.st_ino)
        if key in _read:
            raise _same_file(dest, _read[key])
        _replaced[key] = dest
    return dest


def _real(p: Path, text: str, option: str) -> Path:
    """The path with every link resolved (the file an atomic replace must put in place)."""
    try:
        return Path(os.path.realpath(p))
    except OSError as exc:     # a relative name in a folder removed since (getcwd fails)
        try:
            os.getcwd()
        except OSError:
            raise CostcalcError(f"{option}: cannot write {text!r}: the current directory no longer "
                                f"exists; give an absolute path") from None
        raise CostcalcError(f"{option}: cannot write {text!r}: {exc.strerror or exc}") from None


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
    return _claim(info, Target("stream", p, text, option))


def _new_file(p: Path, text: str, option: str) -> Target:
    if text.endswith(os.sep):
        raise CostcalcError(f"{option}: {text!r} names a directory that does not exist; give a file name")
    real = _real(p, text, option)
    _writable_folder(real.parent, text, option)
    return Target("file", real, text, option)


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
            if sys.stdout is None:      # started with standard output closed (>&-)
                raise CostcalcError("cannot write to standard output: it is closed (give -o FILE)")
            fill(sys.stdout.buffer if binary else sys.stdout)
            (sys.stdout.buffer if binary else sys.stdout).flush()
        elif dest.kind == "stream":    # in place: appended, never truncated (a log behind /dev/stderr)
            fd = os.open(dest.path, os.O_WRONLY | os.O_APPEND)
            with os.fdopen(fd, mode, **({} if binary else {"encoding": "utf-8", "newline": ""})) as handle:
                fill(handle)
        else:
            _atomic(dest, fill, mode)
    except BrokenPipeError:
        if dest.kind == "stdout":   # `costcalc ... | head`: the reader has what it wanted
            _quiet(sys.stdout)
            raise ReaderGone() from None
        raise CostcalcError(f"cannot write {dest.shown!r}: the reader closed the pipe") from None
    except OSError as exc:
        raise CostcalcError(f"cannot write {dest.shown!r}: {exc.strerror or exc}") from None


def write_text(dest: Target, text: str) -> None:
    write(dest, lambda handle: handle.write(text))


def say(line: str) -> None:
    """One line on standard error, if there is one: with standard error closed (``2>&-``) or
    its reader gone, the line is dropped -- never sent to standard output instead."""
    stream = sys.stderr
    if stream is None:
        return
    try:
        stream.write(line + "\n")
        stream.flush()
    except (OSError, ValueError):     # a broken pipe, a closed file
        _quiet(stream)


def _atomic(dest: Target, fill: Callable[[IO[Any]], Any], mode: str) -> None:
    """Fill a temporary file beside the target, then move it into place. A replaced file keeps
    its permission bits, owner and group (``_keep_owner``); a new one gets the usual mode
    (mkstemp alone makes 0600). The temporary name has a fixed length, so it fits wherever
    the target's name fits. Any exception -- an interrupt or a signal the CLI turns into
    one included -- removes the temporary file."""
    path = dest.path
    try:
        old: Optional[os.stat_result] = os.stat(path)
        keep = stat.S_IMODE(old.st_mode)
    except FileNotFoundError:
        old, keep = None, 0o666 & ~_umask()
    global _creating
    held = _hold_signals()
    tmp = ""
    try:
        _creating = True    # a stop signal landing now waits (``deferring``) until ``tmp`` is known
        try:
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".costcalc-", suffix=".tmp")
        finally:
            _creating = False
        _release(held)      # a signal that came meanwhile is raised here, where the file is removed
        _raise_deferred()
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8", "newline": ""})) as handle:
            fill(handle)
        if old is not None:
            _keep_owner(tmp, old, dest)     # before chmod: a chown clears set-id bits
        os.chmod(tmp, keep)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            info = None
        if info is not None and not stat.S_ISREG(info.st_mode):   # made a FIFO (or else) since it was checked
            raise CostcalcError(f"cannot write {str(path)!r}: it is no longer a regular file; not replaced")
        if info is not None and (info.st_dev, info.st_ino) in _read:   # an input moved there since
            raise _same_file(dest, _read[info.st_dev, info.st_ino])
        os.replace(tmp, path)
    except BaseException:
        _release(held)
        if tmp:
            Path(tmp).unlink(missing_ok=True)
        _raise_deferred()
        raise


# The mask above keeps a stop signal from this thread only: a process-directed signal may reach
# another thread (numpy's), and its Python handler then runs here whatever this thread's mask. So
# the CLI's handler asks ``deferring`` first and, while a temporary file is being created, leaves
# the signal in ``_deferred``: it is raised again once the file's name is known.
_creating = False
_deferred: list[int] = []


def deferring(signum: int) -> bool:
    """Whether a stop signal landing now must wait (a temporary file is being created); if so it is
    kept, and raised again as soon as the file can be removed."""
    if _creating:
        _deferred.append(signum)
    return _creating


def _raise_deferred() -> None:
    if _deferred:
        import signal

        signal.raise_signal(_deferred.pop())


def _keep_owner(tmp: str, old: os.stat_result, dest: Target) -> None:
    """Give the new file the replaced file's owner and group, as far as this process may:
    root sets both; anyone else may set a group they belong to. What cannot be kept is said
    in one warning, and the file is written all the same (the shell's ``>`` would keep the
    owner; refusing would lose the work done)."""
    mine = os.stat(tmp)
    if (mine.st_uid, mine.st_gid) == (old.st_uid, old.st_gid):
        return
    for uid in (old.st_uid, -1):
        try:
            os.chown(tmp, uid, old.st_gid)
            break
        except OSError:          # EPERM; or a file system without owners
            continue
    mine = os.stat(tmp)
    lost = [f"{what} {had} (now {now})" for what, had, now in
            (("owner", old.st_uid, mine.st_uid), ("group", old.st_gid, mine.st_gid)) if had != now]
    if lost:
        say(f"warning: {dest.printed}: replaced, but its {' and '.join(lost)} could not be kept")


def _hold_signals():
    """Hold Ctrl-C, SIGTERM and SIGHUP (pending) while the temporary file is made: one landing
    after its creation but before ``tmp`` is known would leave it behind. The old mask, or
    None where there is no ``pthread_sigmask``."""
    import signal

    try:
        return signal.pthread_sigmask(signal.SIG_BLOCK, {getattr(signal, name) for name in
                                                         ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)})
    except (AttributeError, OSError, ValueError):
        return None


def _release(held) -> None:
    if held is not None:
        import signal

        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _quiet(stream) -> None:
    """After a closed pipe, point the stream's descriptor at /dev/null: Python writes nothing
    more there, nor complains again when it flushes at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
