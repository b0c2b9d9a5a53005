"""A pipeline's stages: which of a model's layers each of ``pp`` stages holds.

The layers split as vLLM splits them (``vllm/distributed/utils.py`` ``get_pp_indices``, copied in
docs/cost-model.md, "Pipeline parallelism"): ``L // pp`` layers a stage, and the ``L % pp`` left over one
each to the stages before the last, from the back (the last stage holds the final norm and the LM head,
the first the embedding). A model's layer groups are taken in the order its preset lists them (a
uniform model: its one group; DeepSeek-V3: its dense layers, then its MoE layers) -- the order of a
hybrid whose kinds interleave (Gemma 3's five window layers to one global) is not kept by a preset, so
its stages hold the groups' layers in that listed order: a named convention, said where it is used.
"""
from __future__ import annotations

from .errors import CostcalcError
from .spec import Group, ModelSpec


def partition(layers: int, pp: int) -> list[int]:
    """Layers per stage, first to last: vLLM's ``get_pp_indices`` without a manual partition."""
    if pp > layers:
        raise CostcalcError(f"--pp {pp}: more stages than the model's {layers} layers")
    counts = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        counts[-i] += 1
    return counts


def stages(spec: ModelSpec, pp: int) -> list[tuple[Group, ...]]:
    """Each stage's layer groups (a group split across a boundary is two groups of the same block
    and sizes), first to last, from ``partition`` over the groups in their listed order."""
    queue = [(g.count, g) for g in spec.groups]
    out: list[tuple[Group, ...]] = []
    for count in partition(sum(g.count for g in spec.groups), pp):
        held: list[Group] = []
        while count:
            left, group = queue[0]
            take = min(left, count)
            held.append(Group(take, group.block, group.sizes))
            count -= take
            queue[0] = (left - take, group)
            if queue[0][0] == 0:
                queue.pop(0)
        out.append(tuple(held))
    return out
