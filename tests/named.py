"""The core as the tests write it: block kinds, conventions and logits modes by name.

The core takes values (``Block``, ``Convention``, ``Logits``), parsed where they enter the
calculator (the CLI, ``calc``, a ``Query``); tests name them as a user does, and this module
parses each name before it calls the core's own function.
"""
import functools

from costcalc.blocks import parse
from costcalc.core import attention as _attention
from costcalc.core import crossover as _crossover
from costcalc.core import linear as _linear
from costcalc.core import traffic as _traffic
from costcalc.core import workloads as _workloads
from costcalc.vocab import Choice, Convention, Logits


def value(x):
    """A convention's, logits mode's or block kind's name as the value; anything else as is."""
    if not isinstance(x, str) or isinstance(x, Choice):
        return x
    for kind in (Convention, Logits):
        if x in kind._value2member_map_:
            return kind(x)
    try:
        return parse(x)
    except ValueError:
        return x            # a workload's name, say


def named(function):
    @functools.wraps(function)
    def call(*args, **kwargs):
        return function(*map(value, args), **{k: value(v) for k, v in kwargs.items()})
    return call


class Module:
    """A core module whose functions take names."""

    def __init__(self, module) -> None:
        self._module = module

    def __getattr__(self, name):
        got = getattr(self._module, name)
        return named(got) if callable(got) and not isinstance(got, type) else got


workloads, attention, linear = Module(_workloads), Module(_attention), Module(_linear)
traffic, crossover = Module(_traffic), Module(_crossover)
