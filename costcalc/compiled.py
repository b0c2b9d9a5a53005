"""The derived expressions as cached generated code: exact evaluation without sympy.

``get(recipe, block, convention, logits)`` returns a ``Compiled`` recipe. The first use
derives it with the sympy core and prints it (``costcalc.codegen``); the source is cached
on disk under a key that hashes the core's own source files and the sympy version (its
behaviour shapes the generated code), so any change to either regenerates it. A later start
loads the cached module: no sympy import.

Cache directory: ``$COSTCALC_CACHE_DIR``, else ``$XDG_CACHE_HOME/costcalc``, else
``~/.cache/costcalc``. An unwritable or corrupt cache is never an error: the recipe is
derived again in memory (and rewritten where possible); the reason is logged (``costcalc
--verbose`` shows it).
"""
from __future__ import annotations

import hashlib
import itertools
import operator
import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

from .blocks import Block
from .vocab import Convention, Logits

_PACKAGE = Path(__file__).resolve().parent
# The files whose content decides the generated code.
SOURCES = ("symbols.py", "vocab.py", "blocks.py", "codegen.py", "compiled.py", "core/*.py")
INT64_SAFE = 2**62  # bound below which every intermediate fits int64 with room to spare


def log(message: str, *args: Any) -> None:
    """Say why a recipe is derived again (shown by ``costcalc --verbose``); logging loads only then."""
    import logging

    logging.getLogger("costcalc.compiled").info(message, *args)


@lru_cache(maxsize=None)
def core_hash() -> str:
    digest = hashlib.sha256(b"sympy " + sympy_version().encode())
    for pattern in SOURCES:
        for path in sorted(_PACKAGE.glob(pattern)):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def sympy_version() -> str:
    """The installed sympy's version, read from its ``release.py`` without importing sympy
    (importlib.metadata costs a fast start tens of milliseconds)."""
    import importlib.util

    spec = importlib.util.find_spec("sympy")
    try:
        text = (Path(spec.origin).parent / "release.py").read_text(encoding="utf-8")
        return text.split('__version__ = "', 1)[1].split('"', 1)[0]
    except (AttributeError, TypeError, OSError, IndexError):   # an unusual install: hash the package's path
        return f"unknown at {getattr(spec, 'origin', None)}"


def ident(name: str) -> str:
    """An output's name as a Python identifier (``experts.up_proj`` -> ``experts__up_proj``)."""
    return name.replace(".", "__")


def cache_dir() -> Path:
    root = os.environ.get("COSTCALC_CACHE_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "costcalc"


class Compiled:
    """One recipe's generated functions: ``evaluate`` at a point, ``columns`` over arrays."""

    def __init__(self, key: str, namespace: dict[str, Any]) -> None:
        self.key = key
        self.terms: tuple[str, ...] = namespace["TERMS"]           # the independent expressions
        self.outputs: dict[str, tuple[str, ...]] = namespace["OUTPUTS"]   # each output: a sum of them
        self.vector: dict[str, bool] = namespace["VECTOR"]
        self.args: tuple[str, ...] = namespace["ARGS"]
        self.constants: dict[str, str] = namespace["CONSTANTS"]
        self.term_of: dict[str, str] = namespace["TERM_OF"]        # operator -> its term
        self._fn = {name: namespace[name] for name in self.terms}
        self._bound = {name: namespace[f"{name}__bound"] for name in self.terms if self.vector[name]}
        self._poly: dict[str, tuple] = namespace["POLY"]

    def _wanted(self, names: Optional[Iterable[str]]) -> dict[str, tuple[str, ...]]:
        return self.outputs if names is None else {n: self.outputs[n] for n in names if n in self.outputs}

    def _check(self, values: Mapping[str, Any]) -> None:
        missing = [a for a in self.args if a not in values]
        if missing:
            raise ValueError(f"{self.key}: no value for {', '.join(missing)}")

    def evaluate(self, values: Mapping[str, int], names: Optional[Iterable[str]] = None) -> dict[str, int]:
        """Outputs (all, or ``names``) as exact ints at one point."""
        self._check(values)
        wanted = self._wanted(names)
        needed = {p for parts in wanted.values() for p in parts}
        got = {name: self._fn[name](**values) for name in self.terms if name in needed}
        return {name: got[parts[0]] if len(parts) == 1 else sum(got[p] for p in parts)
                for name, parts in wanted.items()}

    def columns(self, values: Mapping[str, Any], n: int, names: Optional[Iterable[str]] = None) -> dict[str, list[int]]:
        """Every output over ``n`` points; ``values`` maps names to ints or length-n arrays.

        A term is evaluated over whole arrays by its generated function in int64 where its
        bound shows every intermediate fits. Past that, a polynomial term is taken as a
        polynomial in the swept variables whose coefficients (the model's values folded in)
        are exact Python ints, each monomial computed once in int64 and scaled as Python
        ints; a window term (Min/Max) runs its generated function over arrays of Python
        ints. Sums over tiles run point by point. Every result is the exact integer.
        """
        import numpy as np

        self._check(values)
        arrays = {k: np.asarray(v, dtype=np.int64) for k, v in values.items() if not isinstance(v, int)}
        scalars = {k: v for k, v in values.items() if isinstance(v, int)}
        for k, a in list(arrays.items()):   # an axis with one value is a scalar
            if a.size and a.min() == a.max():
                scalars[k] = int(a[0])
                del arrays[k]
        peak = {k: float(a.max()) if a.size else 0.0 for k, a in arrays.items()}
        got: dict[str, Any] = {}   # int64 arrays, or lists of Python ints
        bounds: dict[str, float] = {}
        monomials: dict[tuple, list[int]] = {}   # shared by the terms
        wanted = self._wanted(names)
        needed = {p for parts in wanted.values() for p in parts}
        for name in (t for t in self.terms if t in needed):
            if not self.vector[name]:
                got[name] = self._pointwise(name, scalars, arrays, n)
                bounds[name] = float("inf")
                continue
            bounds[name] = self._bound[name](**scalars, **peak)
            if bounds[name] < INT64_SAFE:
                got[name] = np.broadcast_to(np.asarray(self._fn[name](**scalars, **arrays), np.int64), (n,))
            elif name in self._poly:
                got[name] = self._big(name, scalars, arrays, peak, n, monomials)
            else:   # Min/Max past int64: the same code over arrays of Python ints
                big = {k: a.astype(object) for k, a in arrays.items()}
                got[name] = np.broadcast_to(np.asarray(self._fn[name](**scalars, **big), object), (n,)).tolist()
        out: dict[str, list[int]] = {}
        done: dict[tuple[str, ...], list[int]] = {}   # sums already formed, by their parts
        for name, parts in wanted.items():
            if all(isinstance(got[p], np.ndarray) for p in parts) and sum(bounds[p] for p in parts) < INT64_SAFE:
                column = got[parts[0]]
                for part in parts[1:]:
                    column = column + got[part]
                out[name] = column.tolist()
            else:   # start from the largest sum already formed inside this one
                base = max((k for k in done if set(k) <= set(parts)), key=len, default=parts[:1])
                column = done[base] if base in done else _as_list(got[base[0]])
                for part in parts:
                    if part not in base:
                        column = list(map(operator.add, column, _as_list(got[part])))
                out[name] = column
            done[parts] = out[name]
        return out

    def _big(self, name: str, scalars: Mapping[str, int], arrays: Mapping[str, Any],
             peak: Mapping[str, float], n: int, cache: dict[tuple, list[int]]) -> list[int]:
        import numpy as np

        den, monomials = self._poly[name]
        grouped: dict[tuple, int] = {}
        for coeff, powers in monomials:
            swept = tuple((x, e) for x, e in powers if x in arrays)
            value = coeff
            for x, e in powers:
                if x not in arrays:
                    value *= scalars[x] ** e
            grouped[swept] = grouped.get(swept, 0) + value
        total: list[int] | None = None
        for swept, coeff in grouped.items():
            if coeff == 0:
                continue
            if not swept:
                column = [coeff] * n
            else:
                size = 1.0
                for x, e in swept:
                    size *= peak[x] ** e
                if size < INT64_SAFE:
                    if swept not in cache:
                        mono = np.ones(n, dtype=np.int64)
                        for x, e in swept:
                            mono = mono * arrays[x] ** e
                        cache[swept] = mono.tolist()
                    column = list(map(operator.mul, itertools.repeat(coeff), cache[swept]))
                else:
                    column = [coeff * _monomial(swept, dict(zip(arrays, row)))
                              for row in zip(*(a.tolist() for a in arrays.values()))]
            total = column if total is None else list(map(operator.add, total, column))
        total = total if total is not None else [0] * n
        return total if den == 1 else [v // den for v in total]

    def _pointwise(self, name: str, scalars: Mapping[str, int], arrays: Mapping[str, Any], n: int) -> list[int]:
        fn = self._fn[name]
        if not arrays:
            return [fn(**scalars)] * n
        names = list(arrays)
        return [fn(**scalars, **dict(zip(names, row))) for row in zip(*(a.tolist() for a in arrays.values()))]


def _as_list(column: Any) -> list[int]:
    return column if isinstance(column, list) else column.tolist()


def _monomial(powers: tuple, point: Mapping[str, int]) -> int:
    value = 1
    for x, e in powers:
        value *= point[x] ** e
    return value


CHECK = "# checksum "   # the last line of a cached module: the sha256 of everything above it


def _signed(text: str) -> str:
    return f"{text}{CHECK}{hashlib.sha256(text.encode()).hexdigest()}\n"


def _load(path: Path, key: str) -> tuple[Optional[Compiled], str]:
    """The cached recipe, or None and why it could not be used. A file is used only if its
    checksum holds (a partial, stale or hand-edited file is derived again); loading it may
    fail in any way, and never becomes an error."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, "not cached yet"
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"unreadable ({exc})"
    body, _, last = text.rstrip("\n").rpartition("\n")
    if not last.startswith(CHECK) or _signed(body + "\n") != text:
        return None, "unusable (its checksum does not hold: partial, stale or edited)"
    try:
        namespace: dict[str, Any] = {}
        exec(compile(text, str(path), "exec"), namespace)
        return Compiled(key, namespace), ""
    except Exception as exc:   # noqa: BLE001 -- whatever is wrong with a cache file, derive again
        return None, f"unusable ({type(exc).__name__}: {exc})"


def _store(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(_signed(text))
        os.replace(tmp, path)
    except OSError as exc:
        log("could not cache %s: %s (derived again next time)", path, exc)


_LOADED: dict[tuple[str, str], Compiled] = {}   # recipes of this process, by cache folder and key


def forget() -> None:
    """Drop the recipes this process holds (the disk cache stays): the next ``get`` loads again."""
    _LOADED.clear()


def get(recipe: str, block: Block, convention: Convention = Convention.causal, logits: Logits = Logits.last) -> Compiled:
    """The compiled recipe of a block kind, from the disk cache or derived now."""
    key = f"{recipe}-{block.key}-{convention.value}-{logits.value}"
    path = cache_dir() / core_hash() / f"{key}.py"
    slot = (str(path.parent), key)
    if slot in _LOADED:
        return _LOADED[slot]
    found, why = _load(path, key)
    if found is None:
        from . import codegen

        log("deriving %s: %s", key, why)
        text = codegen.source(recipe, block, convention, logits, stamp=f"core={core_hash()}")
        _store(path, text)
        namespace: dict[str, Any] = {}
        exec(compile(text, f"<costcalc {key}>", "exec"), namespace)
        found = Compiled(key, namespace)
    _LOADED[slot] = found
    return found
