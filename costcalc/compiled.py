"""The derived expressions as a cached recipe: exact evaluation without sympy.

``get(recipe, block, convention, logits)`` returns a ``Compiled`` recipe. The first use
derives it with the sympy core and prints it as data (``costcalc.codegen``: each term's
expression text and the tables around it); the data is cached on disk as JSON
(``costcalc.cachefile``: this user's files only, signed to their key) in a folder named by a
hash of the core's own source files and the sympy version (its behaviour shapes the printed
expressions), so any change to either derives again. A later start loads the data: no sympy
import.

Loading never executes the file: each expression is held to the grammar of
``costcalc.grammar`` (integer arithmetic and the helpers defined here) before it is compiled.
A file that fails anything is derived again: an unwritable, foreign, corrupt or hostile cache
is never an error; the reason is logged (``costcalc --verbose`` shows it).
"""
from __future__ import annotations

import hashlib
import itertools
import json
import operator
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

from . import cachefile, grammar
from .blocks import Block
from .cachefile import cache_dir, log
from .vocab import Convention, Logits

_PACKAGE = Path(__file__).resolve().parent
# The files whose content decides the compiled expressions.
SOURCES = ("symbols.py", "vocab.py", "blocks.py", "codegen.py", "compiled.py", "cachefile.py", "grammar.py",
           "core/*.py")
INT64_SAFE = 2**62  # bound below which every intermediate fits int64 with room to spare


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


class Compiled:
    """One recipe's compiled functions: ``evaluate`` at a point, ``columns`` over arrays."""

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

        A term is evaluated over whole arrays by its compiled function in int64 where its
        bound shows every intermediate fits. Past that, a polynomial term is taken as a
        polynomial in the swept variables whose coefficients (the model's values folded in)
        are exact Python ints, each monomial computed once in int64 and scaled as Python
        ints; a window term (Min/Max) runs its compiled function over arrays of Python
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




# --- the helpers a recipe's expressions call (defined here, never read from the cache) ---------

def _pick(numpy_name: str, builtin: Any) -> Any:
    def pick(*xs: Any) -> Any:
        if any(hasattr(x, "__array__") for x in xs):   # arrays: numpy.minimum / numpy.maximum
            import functools
            import numpy
            return functools.reduce(getattr(numpy, numpy_name), xs)
        return builtin(xs)
    return pick


_min = _pick("minimum", min)
_max = _pick("maximum", max)


def _cdiv(a: Any, b: Any) -> Any:
    return -((-a) // b)


CALLS = {"_min": _min, "_max": _max, "_cdiv": _cdiv, "sum": sum, "range": range}   # grammar.CALLS: all an expression sees


def _strings(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{what} is not a list of names")
    return value


def _table(value: Any, what: str) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"{what} is not a table")
    return value


def build(key: str, data: Any) -> Compiled:
    """A ``Compiled`` recipe from its data (``codegen.recipe``, as JSON gives it back), or
    ValueError where anything in it is not what codegen writes."""
    data = _table(data, "the recipe")
    args = tuple(grammar.name(a) for a in _strings(data["args"], "args"))
    terms, exprs, bounded = [], [], []   # exprs: (parameters, checked tree) of each term and bound
    for term in data["terms"]:
        name, bound = term["name"], term["bound"]
        if not isinstance(name, str) or name in terms:
            raise ValueError(f"term name {name!r}")
        terms.append(name)
        for part in ([term] if bound is None else [term, bound]):
            params = tuple(grammar.name(p) for p in _strings(part["params"], f"{name}'s parameters"))
            if not set(params) <= set(args) or len(set(params)) != len(params):
                raise ValueError(f"{name}'s parameters are not among the recipe's")
            try:
                exprs.append((params, grammar.check(part["expr"], params)))
            except (ValueError, SyntaxError, RecursionError, MemoryError) as exc:
                raise ValueError(f"{name}: {type(exc).__name__}: {exc}") from None
        if bound is not None:
            bounded.append(name)
    outputs = {out: tuple(_strings(parts, out)) for out, parts in _table(data["outputs"], "outputs").items()}
    vector = _table(data["vector"], "vector")
    poly = {name: (int(den), tuple((int(c), tuple((str(x), int(e)) for x, e in powers)) for c, powers in monos))
            for name, (den, monos) in _table(data["poly"], "poly").items()}
    known = set(terms)
    if (any(not set(parts) <= known for parts in outputs.values()) or vector != {t: t in bounded for t in terms}
            or not set(poly) <= set(bounded)
            or any(den < 1 or any(x not in args or e < 1 for _, powers in monos for x, e in powers)
                   for den, monos in poly.values())):
        raise ValueError("its tables do not match its terms")
    constants, term_of = _table(data["constants"], "constants"), _table(data["term_of"], "term_of")
    if not all(isinstance(k, str) and isinstance(v, str) for table in (constants, term_of) for k, v in table.items()):
        raise ValueError("its constants are not text")
    fns = iter(grammar.functions(f"<costcalc {key}>", exprs, CALLS))
    namespace: dict[str, Any] = {"TERMS": tuple(terms), "OUTPUTS": outputs, "VECTOR": vector, "POLY": poly,
                                 "ARGS": args, "CONSTANTS": constants, "TERM_OF": term_of}
    for name in terms:
        namespace[name] = next(fns)
        if name in bounded:
            namespace[f"{name}__bound"] = next(fns)
    return Compiled(key, namespace)


FORMAT = 1   # the layout of a recipe's data; a change is a change of this file, hence of core_hash


def _load(found: cachefile.Place, key: str) -> tuple[Optional[Compiled], str]:
    """The recipe cached for ``key``, or None and why it could not be used. A file is used only
    if its signature holds, it names this key and this core, and every expression passes the
    grammar; whatever else is wrong with it, it is derived again, never an error."""
    body, why = found.load(key)
    if body is None:
        return None, why
    try:
        data = json.loads(body)
        if data["format"] != FORMAT or data["key"] != key or data["core"] != core_hash():
            return None, "unusable (stored for another key or core)"
        return build(key, data), ""
    except Exception as exc:   # noqa: BLE001 -- whatever is wrong with a cache file, derive again
        return None, f"unusable ({type(exc).__name__}: {exc})"


_LOADED: dict[tuple[str, str], Compiled] = {}   # recipes of this process, by cache folder and key


def forget() -> None:
    """Drop the recipes this process holds (the disk cache stays): the next ``get`` loads again."""
    _LOADED.clear()
    cachefile.forget()


def get(recipe: str, block: Block, convention: Convention = Convention.causal, logits: Logits = Logits.last) -> Compiled:
    """The compiled recipe of a block kind, from the disk cache or derived now."""
    key = f"{recipe}-{block.key}-{convention.value}-{logits.value}"
    slot = (str(cache_dir()), key)
    if slot in _LOADED:
        return _LOADED[slot]
    where, why = cachefile.place(core_hash())
    found, why = _load(where, key) if where is not None else (None, why)
    if found is None:
        from . import codegen

        log("deriving %s: %s", key, why)
        data = {"format": FORMAT, "key": key, "core": core_hash(),
                **codegen.recipe(recipe, block, convention, logits)}
        body = json.dumps(data).encode()
        if where is not None:
            where.store(key, body)
        found = build(key, json.loads(body))   # as a later start reads it back
    _LOADED[slot] = found
    return found
