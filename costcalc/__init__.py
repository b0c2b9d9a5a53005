"""costcalc: exact, symbolically derived FLOPs of decoder LLM inference.

``presets.load(name)`` gives a model; ``calc`` evaluates workloads to rows of exact
integers; ``frame(rows)`` makes a pandas DataFrame; ``core`` holds the symbolic derivation.
"""
from . import calc, presets, symbols
from .errors import CostcalcError
from .render import frame
from .spec import ModelSpec

__all__ = ["calc", "presets", "symbols", "frame", "CostcalcError", "ModelSpec"]
__version__ = "0.1.0"
