"""costcalc: exact, symbolically derived FLOPs of decoder LLM inference.

``presets.load(name)`` gives a model; ``calc`` evaluates workloads to rows of exact
integers; ``frame(rows)`` makes a pandas DataFrame; ``core`` holds the symbolic derivation.
``symbols`` (sympy) is imported on first use, so a plain calculation starts without sympy.
"""
from . import calc, presets
from .errors import CostcalcError
from .render import frame
from .spec import ModelSpec

__all__ = ["calc", "presets", "symbols", "frame", "CostcalcError", "ModelSpec"]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in ("symbols", "core", "formulas", "codegen"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'costcalc' has no attribute {name!r}")
