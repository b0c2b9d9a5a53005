"""costcalc: exact, symbolically derived FLOPs of decoder LLM inference.

``presets.load(name)`` gives a model; ``calc`` evaluates workloads to rows of exact
integers; ``frame(rows)`` makes a pandas DataFrame; ``core`` holds the symbolic derivation.
``symbols`` (sympy) is imported on first use, so a plain calculation starts without sympy.
Every name here is imported on first use: ``import costcalc.cli`` (the command line's
entry) loads nothing else, so Ctrl-C at start-up lands where the CLI handles it.
"""
__all__ = ["calc", "presets", "symbols", "frame", "CostcalcError", "ModelSpec"]
__version__ = "0.1.0"

_FROM = {"frame": "render", "CostcalcError": "errors", "ModelSpec": "spec"}   # name: its module
_MODULES = ("calc", "presets", "symbols", "core", "formulas", "codegen")


def __getattr__(name: str):
    import importlib

    if name in _FROM:
        return getattr(importlib.import_module(f".{_FROM[name]}", __name__), name)
    if name in _MODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'costcalc' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_FROM, *_MODULES])
