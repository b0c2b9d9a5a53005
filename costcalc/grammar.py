"""The grammar of a cached recipe's expressions, and checked expressions as functions.

``costcalc.codegen`` prints each derived term as Python arithmetic; ``costcalc.compiled``
reads those texts from the cache and must never run anything else. ``check`` parses one
(``ast``, mode ``eval``) and accepts only: int constants; the term's parameters (and,
inside a ``sum``, its loop variable); ``+ - * //``; ``**`` by an int constant up to
MAX_POWER; unary minus; calls of ``_min``, ``_max`` and ``_cdiv`` (no keywords, no
star-arguments); and ``sum(EXPR for NAME in range(...))`` with one ``for`` and no ``if``.
No attribute, subscript, string, float, comparison, lambda or other call. ``functions``
compiles checked trees, once per recipe, into functions whose only globals are the helpers
given (no builtins): a hostile expression can at worst produce a number.
"""
from __future__ import annotations

import ast
import keyword
from typing import Any, Iterable, Mapping

CALLS = ("_min", "_max", "_cdiv", "sum", "range")   # the names an expression may call
CALLED = frozenset(CALLS) - {"range"}                # as a call of its own (range: inside a sum only)
MAX_POWER = 64   # the largest exponent an expression may hold (the core's are below 5)
_BINARY = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Pow)


def name(text: Any) -> str:
    """A parameter or loop variable: an ASCII identifier that is no keyword, helper or dunder."""
    if not (isinstance(text, str) and text.isascii() and text.isidentifier() and not keyword.iskeyword(text)
            and not text.startswith("_") and text not in CALLS):
        raise ValueError(f"{text!r} is not a parameter name")
    return text


def check(text: Any, params: Iterable[str]) -> ast.expr:
    """The tree of an expression of printed integer arithmetic, or ValueError: int constants,
    names among ``params`` (and a loop's variable inside its ``sum``), ``+ - * //``, ``**``
    by an int constant up to MAX_POWER, unary minus, calls of ``_min``/``_max``/``_cdiv``, and
    ``sum(EXPR for NAME in range(...))`` with one ``for`` and no ``if``. Nothing else: no
    attribute, subscript, string, float, comparison, lambda or keyword argument."""
    if not isinstance(text, str):
        raise ValueError("an expression is not text")
    tree = ast.parse(text, mode="eval")
    stack: list[tuple[Any, frozenset]] = [(tree.body, frozenset(params))]
    while stack:
        node, names = stack.pop()
        kind = type(node)
        if kind is ast.Constant:
            if type(node.value) is not int:
                raise ValueError(f"constant {node.value!r} is not an int")
        elif kind is ast.Name:
            if node.id not in names:
                raise ValueError(f"name {node.id!r} is not a parameter")
        elif kind is ast.BinOp:
            if type(node.op) not in _BINARY:
                raise ValueError(f"operator {type(node.op).__name__} is not arithmetic")
            if type(node.op) is ast.Pow and not (type(node.right) is ast.Constant and type(node.right.value) is int
                                                 and 0 <= node.right.value <= MAX_POWER):
                raise ValueError("a power that is not a small int constant")
            stack += [(node.left, names), (node.right, names)]
        elif kind is ast.UnaryOp and type(node.op) is ast.USub:
            stack.append((node.operand, names))
        elif kind is ast.Call and type(node.func) is ast.Name and node.func.id in CALLED:
            call, args = node.func.id, node.args
            if node.keywords or not args or (call == "_cdiv" and len(args) != 2):
                raise ValueError(f"a call of {call} with other arguments")
            if call == "sum":
                stack += _loop(args, names)
            else:
                stack += [(a, names) for a in args]
        else:
            raise ValueError(f"{kind.__name__} is not part of the grammar")
    return tree.body


def _loop(args: list, names: frozenset) -> list[tuple[Any, frozenset]]:
    """The parts of ``sum(EXPR for NAME in range(...))`` to check, with NAME known inside EXPR."""
    gen = args[0]
    if len(args) != 1 or type(gen) is not ast.GeneratorExp or len(gen.generators) != 1:
        raise ValueError("sum over anything but one generator")
    loop = gen.generators[0]
    source = loop.iter
    if (type(loop.target) is not ast.Name or loop.ifs or loop.is_async or type(source) is not ast.Call
            or type(source.func) is not ast.Name or source.func.id != "range" or source.keywords
            or not 1 <= len(source.args) <= 3):
        raise ValueError("a loop other than `for NAME in range(...)`")
    var = name(loop.target.id)
    if var in names:
        raise ValueError(f"loop variable {var!r} hides a parameter")
    return [(a, names) for a in source.args] + [(gen.elt, names | {var})]


def functions(filename: str, exprs: list[tuple[tuple[str, ...], ast.expr]], helpers: Mapping[str, Any]) -> tuple:
    """Checked trees as functions ``f(p1, p2, ..., **_)``, compiled in one go, seeing only ``helpers``."""
    at = {"lineno": 1, "col_offset": 0, "end_lineno": 1, "end_col_offset": 0}   # (fix_missing_locations is slow)

    def arguments(params: tuple[str, ...]) -> ast.arguments:
        return ast.arguments(posonlyargs=[], args=[ast.arg(p, **at) for p in params], vararg=None, kwonlyargs=[],
                             kw_defaults=[], kwarg=ast.arg("_", **at), defaults=[])

    tree = ast.Expression(ast.Tuple([ast.Lambda(arguments(p), body, **at) for p, body in exprs], ast.Load(), **at))
    return eval(compile(tree, filename, "eval"), {"__builtins__": {}, **helpers})   # noqa: S307 -- checked trees
