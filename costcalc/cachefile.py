"""The code cache's files: where they live, whose they are, and a signature binding each to its key.

The cache holds data, never code (``costcalc.compiled`` reads it through a grammar of
arithmetic). Layout, under ``cache_dir()``:

- ``secret``: 32 random bytes, this user's key for the HMACs, mode 0600, created once;
- ``CORE/KEY.json`` (CORE the core hash): ``{"hmac": "<64 hex>", "recipe": {...}}``, the
  HMAC-SHA256 of the recipe's exact text, which names its key and core hash.

A folder, the secret or a file is used only if it is owned by the effective user and not
writable by group or others (the secret: not readable by them either); a file only if it is
a regular file (a symbolic link is not followed), at most ``LIMIT`` bytes, read without
blocking. Anything else is not used, with the reason returned for the log: the recipe is
then derived in memory, never an error.

Location: ``$COSTCALC_CACHE_DIR`` (a relative value is taken from the working directory
once, when first used); else ``$XDG_CACHE_HOME/costcalc`` if that is absolute (the XDG
specification ignores relative values); else ``$HOME/.cache/costcalc`` if ``HOME`` is an
absolute path other than ``/``. Otherwise there is no cache: never the filesystem root,
never the working directory by accident.
"""
from __future__ import annotations

import errno
import hmac
import os
import stat
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple, Optional

LIMIT = 4 * 2**20    # bytes: a recipe file is tens of kilobytes
SECRET = "secret"
SECRET_BYTES = 32
MISSING = "not cached yet"
_HEAD, _MID, _TAIL = b'{"hmac": "', b'", "recipe": ', b"}\n"
_BODY = len(_HEAD) + 64 + len(_MID)   # where the recipe's text starts
_READ = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_SECRETS: dict[str, bytes] = {}   # by cache folder: read (or created) once a process


def log(message: str, *args: object) -> None:
    """Say why a recipe is derived again or not cached (``costcalc --verbose`` shows it); logging
    loads only then."""
    import logging

    logging.getLogger("costcalc.compiled").info(message, *args)


def cache_dir() -> Optional[Path]:
    """The cache folder, or None where there is no usable one (see ``locate``)."""
    return locate()[0]


_LOCATED: dict = {}     # the environment's three names -> locate()'s answer (an absolute one: no working directory)


def locate() -> tuple[Optional[Path], str]:
    """The cache folder and, where there is none, why (remembered for the same environment: each recipe
    asks)."""
    names = tuple(os.environ.get(name) for name in ("COSTCALC_CACHE_DIR", "XDG_CACHE_HOME", "HOME"))
    if names in _LOCATED:
        return _LOCATED[names]
    found = _locate()
    if not names[0] or os.path.isabs(names[0]):     # a relative COSTCALC_CACHE_DIR follows the working directory
        _LOCATED[names] = found
    return found


def _locate() -> tuple[Optional[Path], str]:
    explicit = os.environ.get("COSTCALC_CACHE_DIR")
    if explicit:
        root = _absolute(explicit)
        if root is None:
            return None, f"no cache: COSTCALC_CACHE_DIR={explicit!r} is relative and the working directory is gone"
    else:
        xdg, home = (_below_root(os.environ.get(name, "")) for name in ("XDG_CACHE_HOME", "HOME"))
        if xdg:
            root = os.path.join(xdg, "costcalc")
        elif home:
            root = os.path.join(home, ".cache", "costcalc")
        else:
            return None, (f"no cache: neither XDG_CACHE_HOME={os.environ.get('XDG_CACHE_HOME', '')!r} nor "
                          f"HOME={os.environ.get('HOME', '')!r} is an absolute path below /")
    path = Path(root)
    if path.parent == path:
        return None, "no cache: never the filesystem root"
    return path, ""


def _below_root(value: str) -> str:
    """``value`` normalised (``/.`` and ``/a/..`` are ``/``) if it is an absolute path other
    than the filesystem root, else the empty string: not a place for a cache."""
    if not os.path.isabs(value):
        return ""
    value = os.path.normpath(value)
    return "" if os.path.dirname(value) == value else value


@lru_cache(maxsize=None)
def _absolute(value: str) -> Optional[str]:
    try:
        return os.path.abspath(value)   # once per value: a later chdir does not move the cache
    except OSError:
        return None


class Place(NamedTuple):
    """A usable core folder and this user's secret."""
    folder: Path
    secret: bytes

    def load(self, key: str) -> tuple[Optional[bytes], str]:
        """The recipe text (JSON) stored for ``key``, or None and why. The text is returned
        only if its HMAC holds; the caller checks that it names ``key`` and the core hash."""
        raw, why = read(self.folder / f"{key}.json", LIMIT)
        if raw is None:
            return None, why
        body = raw[_BODY:-len(_TAIL)]
        if (not raw.startswith(_HEAD) or raw[_BODY - len(_MID):_BODY] != _MID or not raw.endswith(_TAIL)
                or not hmac.compare_digest(raw[len(_HEAD):_BODY - len(_MID)], _sign(self.secret, body))):
            return None, "unusable (its signature does not hold: partial, edited, or signed with another secret)"
        return body, ""

    def store(self, key: str, body: bytes) -> None:
        """Write the recipe text signed, atomically; a failure is logged and leaves no temp file."""
        write(self.folder / f"{key}.json", _HEAD + _sign(self.secret, body) + _MID + body + _TAIL)


def place(core: str) -> tuple[Optional[Place], str]:
    """The folder of core hash ``core`` and the secret, created if need be, or None and why."""
    root, why = locate()
    if root is None:
        return None, why
    why = _folder(root)
    if why:
        return None, why
    secret, why = _secret(root)
    if secret is None:
        return None, why
    why = _folder(root / core)
    if why:
        return None, why
    return Place(root / core, secret), ""


def _folder(path: Path) -> str:
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.stat(path)
    except OSError as exc:
        return f"cache folder {path} unusable ({exc.strerror or exc})"
    if not stat.S_ISDIR(st.st_mode):
        return f"cache folder {path} is not a folder"
    why = _foreign(st, private=False)
    hint = f" (`chmod go-w {path}` if it is yours alone)" if why.startswith("mode") else ""
    return f"cache folder {path} not used: {why}{hint}" if why else ""


def _foreign(st: os.stat_result, private: bool) -> str:
    """Why a file or folder is not this user's alone to write (or, ``private``, to read), or ''."""
    me = os.geteuid()
    if st.st_uid != me:
        return f"owned by uid {st.st_uid}, not by you (uid {me})"
    if st.st_mode & (0o077 if private else 0o022):
        return f"mode {stat.S_IMODE(st.st_mode):o}: {'open to' if private else 'writable by'} group or others"
    return ""


def read(path: Path, limit: int, private: bool = False) -> tuple[Optional[bytes], str]:
    """The bytes of a regular file of this user's, at most ``limit`` of them, or None and why.
    Never blocks (a FIFO) and never reads without end (a device); a symbolic link is refused."""
    try:
        fd = os.open(path, _READ)
    except FileNotFoundError:
        return None, MISSING
    except OSError as exc:
        link = ", a symbolic link" if exc.errno == errno.ELOOP else ""
        return None, f"{path.name} unreadable ({exc.strerror or exc}{link})"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, f"{path.name} is not a regular file"
        why = _foreign(st, private)
        if why:
            return None, f"{path.name} not used: {why}"
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                return b"".join(chunks), ""
            chunks.append(chunk)
            size += len(chunk)
        return None, f"{path.name} is larger than {limit} bytes"
    except OSError as exc:
        return None, f"{path.name} unreadable ({exc.strerror or exc})"
    finally:
        os.close(fd)


def _secret(root: Path) -> tuple[Optional[bytes], str]:
    """This user's secret in ``root``: read, or created whole (a temp file linked into place, so
    that concurrent first runs agree: a loser reads the winner's)."""
    if str(root) in _SECRETS:
        return _SECRETS[str(root)], ""
    path = root / SECRET
    data, why = read(path, SECRET_BYTES, private=True)
    if why == MISSING:
        tmp = None
        try:
            fd, tmp = _temp(path)
            with os.fdopen(fd, "wb") as handle:
                handle.write(os.urandom(SECRET_BYTES))
            os.link(tmp, path)
        except FileExistsError:
            pass
        except OSError as exc:
            return None, f"could not create the cache's secret {path} ({exc.strerror or exc})"
        finally:
            _unlink(tmp)
        data, why = read(path, SECRET_BYTES, private=True)
    if data is None:
        return None, f"cache's secret: {why}"
    if len(data) != SECRET_BYTES:
        return None, f"cache's secret {path} is not {SECRET_BYTES} bytes: remove it to start a new cache"
    _SECRETS[str(root)] = data
    return data, ""


def _sign(secret: bytes, body: bytes) -> bytes:
    return hmac.digest(secret, body, "sha256").hex().encode()


def _temp(path: Path) -> tuple[int, str]:
    import tempfile

    return tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")   # mode 0600


def _unlink(tmp: Optional[str]) -> None:
    if tmp is not None:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def write(path: Path, data: bytes) -> None:
    """``data`` into ``path`` atomically (mode 0600). On any failure the temp file is removed and
    the reason logged: the cache is an optimisation."""
    tmp = None
    try:
        fd, tmp = _temp(path)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        log("could not cache %s: %s (derived again next time)", path, exc)
    finally:
        _unlink(tmp)


def forget() -> None:
    _SECRETS.clear()
    _LOCATED.clear()
