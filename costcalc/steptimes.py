"""A search's step times: the roofline time of a layout's prefill and decode phase at many batches at
once, as ``parallel.columns`` works them out one point at a time (``costcalc plan``'s search; docs/
cost-model.md, "Planning").

The same recipes, byte rules, collectives, links and schedule, arranged for a search that asks
thousands of (layout, batch) questions of one model:

- a layer group's time is ``L`` times one layer's plus what it holds once (the LM head in the
  first group): every recipe is affine in ``L``, so each group is evaluated at L = 1 and L = 2 over
  all the search's batches in one ``recipes.columns`` call, and every stage of every pipeline that
  holds the group at those sizes, whatever its layer count, reads the same arrays (``Search``);
- each operator's time is ``max(FLOPs / peak, bytes / bandwidth)`` (``roofline.point``'s rule), its
  bytes by ``roofline.point``'s rules per traffic kind, over numpy arrays of the batches;
- the collectives are ``parallel.collectives``' at array batches, timed by ``collectives.times``;
  a pipeline's step is ``pipeline.forward_makespan``, the list schedule's closed form over arrays;
- a speculative generation's steps (the verify at each S + floor(i E) on the target's layout, the draft's
  steps on its own) at every (batch, step) at once.

Each number is ``roofline.point``'s in exact arithmetic; in floating point the sums are taken in
another order, so a time here equals ``costcalc generate``'s to rounding (tests/test_search_speed.py holds
them to 1e-12 relative on every preset and layout kind). Roofline timing only: ``--timing measured``
looks up kernels point by point (``parallel.columns``).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from . import collectives as links_model, parallel, pipeline, roofline
from .evaluate import DraftRecipe, Query
from .layout import device_spec
from .roofline import Share, routed_expert


class Search:
    """One search's memo over the batches it asks: ``batches`` (a replica's sequences a micro-batch,
    every value a candidate reaches), prompts of ``isl`` and ``osl`` output tokens. ``generation``
    gives a candidate's TTFT, TPOT and tokens/s at its batches."""

    def __init__(self, batches: Sequence[int], isl: int, osl: int) -> None:
        self.batches = sorted(set(int(b) for b in batches))
        self.at = {b: i for i, b in enumerate(self.batches)}
        self.isl, self.osl = isl, osl
        self.groups: dict[tuple, tuple] = {}      # one layer group's arrays (``_layer``), by what decides them
        self.counts: dict[tuple, tuple] = {}      # a recipe's elements and FLOPs at every batch, L = 1 and 2
        self.formats: dict[tuple, str] = {}       # a weight plan's group: its matrices and formats, as a key
        self.held: dict[tuple, tuple] = {}        # a model's groups under a layout (``_groups``)
        self.stages: dict[tuple, tuple] = {}      # a pipeline's stages, and which are alike
        self.plans: dict[tuple, Any] = {}         # a device's weight plan in each weight format
        self.touched: dict[tuple, float] = {}     # the routed experts a device's layer reads

    def generation(self, query: Query, batch: Sequence[int]) -> dict[str, list[float]]:
        """``composites.rates`` of a generation of ``batch`` sequences (each a list) under the query's
        layout: ``ttft_s`` (the prefill step), ``tpot_s`` (the decode phase / (N - 1)) and
        ``batch_tokens_per_s`` (B N / (TTFT + decode phase))."""
        batch = np.asarray(batch, dtype=np.int64)
        if query.options.acceptance is not None:
            return self.speculative(query, batch)
        prefill, phase = (query.but(workload=name) for name in query.workload.phases)
        first = self.step(prefill, {"B": batch, "S": self.isl})
        rest = self.step(phase, {"B": batch, "S": self.isl, "N": self.osl})
        return _rates(batch, self.osl, first, rest)

    def speculative(self, query: Query, batch: np.ndarray) -> dict[str, list[float]]:
        """``speculation.generation``'s rates with a draft model: the target's and the draft's prefill of
        S, then the steps over S + floor(i E) cached tokens (``speculation.contexts``), each the verify (a
        cached prefill of K + 1 over them, on the target's layout) and the draft's K decode steps (on its
        own layout), every (batch, step) at once."""
        from . import speculation

        k, model = query.options.draft_tokens, query.options.draft_model
        at = speculation.contexts(self.isl, self.osl, speculation.expected_tokens(speculation.rates(query.options)))
        prompt = {"B": batch, "S": self.isl}        # the target's prefill (with mtp, its module over the prompt)
        first = self.step(query.but(workload="prefill", draft_model=None, draft_tokens=1, acceptance=None,
                                    draft_tp=None), prompt)
        if model is not None:
            first = first + self.step(Query(model, "prefill", speculation.draft_options(query), query.precision,
                                            query.machine), prompt)
        if not at:
            return _rates(batch, self.osl, first, 0.0 * first)
        many = np.repeat(batch, len(at))
        held = np.tile(np.asarray(at, dtype=np.int64), len(batch))
        steps = self.step(speculation.verify(query), {"B": many, "T": held, "C": k + 1})
        for drafter, point in self._proposals(query, many, held, k):       # speculation.proposals' forwards
            if model is not None:
                steps = steps + self.step(drafter, point)
            else:       # the MTP module's own term and its own collectives (speculation._drafted's rule)
                mtp = [c for c in parallel.collectives(drafter, point) if c.where.startswith(parallel.MTP_WHERE)]
                own = parallel.comm_time(mtp, drafter.options.layout, drafter.machine.device)
                steps = steps + parallel.step_time(self.roofline(drafter, point, drafted=True), own + 0.0 * many,
                                                   drafter.options.overlap)
        return _rates(batch, self.osl, first, steps.reshape(len(batch), len(at)).sum(axis=1))

    @staticmethod
    def _proposals(query: Query, batch: np.ndarray, held: np.ndarray, k: int) -> list[tuple[Query, dict]]:
        """``speculation.proposals``' forwards at array points, each (its query, its inputs by symbol)."""
        from . import speculation

        out = []
        for drafter, inputs in speculation.proposals(query, batch, held, k):
            arrays = {i.symbol: np.broadcast_to(np.asarray(inputs[i.column], dtype=np.int64), batch.shape)
                      for i in drafter.workload.inputs}
            out.append((drafter, {key: (int(v[0]) if v.size and (v == v[0]).all() and key != "B" else v)
                                  for key, v in arrays.items()}))
        return out

    def step(self, query: Query, point: dict[str, Any]) -> np.ndarray:
        """One step of the query's workload on its layout at each point (``parallel.columns``' ``time_s``):
        ``point`` its inputs, the batches an array, the others numbers or arrays of as many."""
        layout, device = query.options.layout, query.machine.device
        batch = point["B"]
        if layout.pp == 1:
            own = self.roofline(query, point)
            comm = parallel.comm_time(parallel.collectives(query, point), layout, device)
            return parallel.step_time(own, comm, query.options.overlap)
        m = parallel.micro_batches(query)
        micro = {**point, "B": batch // m}
        o = query.options
        key = (id(query.spec), layout, query.workload.name, repr(o.draft), o.micro_batches, o.convention,
               query.logits, query.form, o.window_cache, o.tile)
        if key not in self.stages or self.stages[key][0] is not query.spec:
            stages = parallel.stage_queries(query)
            self.stages[key] = (query.spec, stages, parallel.same_stages(stages))
        _, stages, alike = self.stages[key]     # built in the first weight format asked: the roofline takes the
        done: dict[int, tuple] = {}             # query's own
        durations = []
        for index, stage in enumerate(stages):
            if alike[index] not in done:
                done[alike[index]] = (self.roofline(stage, micro, query.precision),
                                      parallel.stage_collectives(stage, micro, m))
            own, found = done[alike[index]]
            sends = [c for c in found if c.op == links_model.SEND_RECV]
            rest = [c for c in found if c.op != links_model.SEND_RECV]
            comm = parallel.comm_time(rest, layout, device) / m
            link = parallel.boundary_link(query, index) if sends else None
            send = sum(c.count * links_model.times(c.op, 2, c.bytes, link) for c in sends) / m
            durations.append(parallel.step_time(own, comm, query.options.overlap) + send)
        return pipeline.forward_makespan(durations, m)

    def roofline(self, query: Query, point: dict[str, Any], precision: Any = None, drafted: bool = False) -> np.ndarray:
        """One device's roofline time at each point (``parallel.device_traffic``'s ``time_s``): its
        groups at one tensor-parallel device's sizes, at its replica's batch, its share of the experts
        (``precision``: the dtypes, where not the query's own; ``drafted``: its MTP module's operators only,
        the ``draft`` term). Where only the batch varies, at every
        batch of the search (``batches``), picked; else at the points themselves."""
        layout = query.options.layout
        share = parallel.expert_share(layout)
        own_batch = parallel.replica(point, layout)["B"]
        rest = {k: v for k, v in point.items() if k != "B"}
        if all(isinstance(v, int) for v in rest.values()) and all(int(b) in self.at for b in own_batch):
            at = {"B": np.array(self.batches, dtype=np.int64), **rest}
            pick = np.array([self.at[int(b)] for b in own_batch])
        else:
            at = {**rest, "B": np.asarray(own_batch, dtype=np.int64)}
            pick = np.arange(len(own_batch))
        where = tuple((k, v.tobytes() if hasattr(v, "tobytes") else v) for k, v in sorted(at.items()))
        own, held = self._groups(query)
        precision = precision or query.precision
        dtypes = repr(precision)
        if (id(own.spec), dtypes) not in self.plans:       # device specs are kept (``layout.device_spec``)
            self.plans[id(own.spec), dtypes] = precision.weights(own.spec)
        plan = self.plans[id(own.spec), dtypes]
        total = np.zeros(len(pick))
        for index, (key, count, group, recipe, flops) in enumerate(held):
            if drafted and not isinstance(recipe, DraftRecipe):
                continue
            if (id(plan), index) not in self.formats:      # plans are kept (``Precision.weights``): ids stay theirs
                self.formats[id(plan), index] = repr(_weights(plan, index))
            key = key + (dtypes, self.formats[id(plan), index], where)
            for experts in (False, True):       # only the routed experts' operators depend on the device's share
                part = key + (experts, share if experts and group.block.ffn == "moe" else None)
                if part not in self.groups:
                    mine = own if own.precision == precision else own.but(precision=precision)
                    self.groups[part] = self._layer(mine, (index, group, recipe, flops), at, share, experts)
                once_c, layer_c, once_m, layer_m = (a[:, pick] for a in self.groups[part])
                total += np.maximum(once_c + count * layer_c, once_m + count * layer_m).sum(axis=0)
        return total

    def _groups(self, query: Query) -> tuple:
        """(the model's spec, the device's question, each of its groups with its recipes and what decides
        its arrays but the dtypes), worked out once per model, layout and workload (a search asks it again
        in every weight format and for every number of replicas)."""
        layout = query.options.layout
        o = query.options       # what picks the recipes besides the model and workload
        key = (id(query.spec), layout.tp, layout.ep, query.workload.name, repr(o.draft), o.convention, query.logits,
               query.form, o.window_cache, o.tile, getattr(query, "last", True), getattr(query, "first", True))
        hit = self.held.get(key)
        if hit is not None and hit[0] is query.spec:
            return hit[1:]
        own = parallel.device_query(query, device_spec(query.spec, layout))
        options = (own.options.draft, tuple(own.options.values().items()))
        groups = [((group.block, tuple(group.sizes.items()), type(recipe).__name__, getattr(recipe, "head", None),
                    id(recipe.code), id(flops.code), options), group.count, group, recipe, flops)
                  for (group, recipe), (_, flops) in zip(own.recipes("bytes"), own.recipes())]
        self.held[key] = (query.spec, own, groups)
        return own, groups

    def _layer(self, own: Query, entry: tuple, at: dict[str, Any], share: Share, experts: bool) -> tuple:
        """A group's operators at every point of ``at`` (``entry``: its index in the device's model, the group,
        its bytes and FLOPs recipes), its routed experts' (``experts``) or the others: (once compute time, a
        layer's compute time, once memory time, a layer's memory time), each an (operators x points) array
        -- ``roofline.point``'s rules per operator, from the recipes at L = 1 and L = 2."""
        index, group, recipe, flops_recipe = entry
        precision, wl = own.precision, own.workload
        plan = self.plans[id(own.spec), repr(precision)]
        peak, bandwidth = own.machine.peak(precision), own.machine.bandwidth()
        n = len(at["B"])
        args = set(recipe.code.args) | set(flops_recipe.code.args)
        values = {k: v for k, v in {**group.numbers(), **own.options.values()}.items() if k in args}
        fixed = {k: v for k, v in at.items() if k in args and isinstance(v, int)}
        swept = {k: np.asarray(v, dtype=np.int64) for k, v in at.items() if k in args and not isinstance(v, int)}
        key = (id(recipe.code), id(flops_recipe.code), type(recipe).__name__, getattr(recipe, "head", None),
               tuple(values.items()), tuple(sorted(fixed.items())),
               tuple((k, v.tobytes()) for k, v in sorted(swept.items())))
        if key not in self.counts:
            routed = [math.prod(int(at[x][i]) if x in swept else at[x] for x in wl.routed) for i in range(n)]
            values.update(fixed)
            values.update({k: np.concatenate([v, v]) for k, v in swept.items()})
            values["L"] = np.array([1] * n + [2] * n, dtype=np.int64)
            elements: dict[str, dict[str, np.ndarray]] = {}
            for name, column in recipe.columns(values, 2 * n).items():
                op, kind = name.rsplit(".", 1) if "." in name else (name, "")
                elements.setdefault(op, {})[kind] = np.asarray(column, dtype=float)
            ran = flops_recipe.columns(values, 2 * n, list(elements))
            self.counts[key] = (elements, {op: np.asarray(ran.get(op, [0] * (2 * n)), dtype=float) for op in elements},
                                routed)
        elements, ran, routed = self.counts[key]
        operators = [op for op in elements if routed_expert(op) == experts]
        if experts and operators:
            sizes = (group.sizes.get("E"), group.sizes.get("k"), group.block.ffn, share, repr(precision.routing))
            for r in routed:
                if sizes + (r,) not in self.touched:
                    self.touched[sizes + (r,)] = float(share.touched(group, r, precision))
            touched = np.array([self.touched[sizes + (r,)] for r in routed] * 2)
        compute, memory = [], []
        for op in operators:
            expert = routed_expert(op)
            runs = share.runs if expert else 1
            moved = np.zeros(2 * n)
            for kind, count in elements[op].items():
                if not count.any():     # nothing moved (point skips it: a weight held nowhere has no rate)
                    continue
                rate = float(roofline.element_bytes(own, plan, index, op, kind))    # point's rule, over arrays:
                if kind == "weight":                                                # an expert's weights those
                    moved += count * rate * (touched if expert else 1.0)            # touched, its other bytes
                else:                                                               # its share of the pairs
                    moved += count / runs * rate
            compute.append(ran[op] / runs / peak)
            memory.append(moved / bandwidth)
        out = []
        for rows in (compute, memory):
            table = np.array(rows, dtype=float).reshape(len(operators), 2 * n)
            one, two = table[:, :n], table[:, n:]
            out += [2 * one - two, two - one]       # what is held once, what each layer adds
        return out[0], out[1], out[2], out[3]


def _rates(batch: np.ndarray, new: int, first: np.ndarray, rest: np.ndarray) -> dict[str, list]:
    """``composites.generation_rates`` of the batches' prefill and decode-phase times."""
    from .composites import generation_rates

    n = len(batch)
    return generation_rates(batch.tolist(), [new] * n, np.broadcast_to(first, (n,)).tolist(),
                            np.broadcast_to(rest, (n,)).tolist())


def _weights(plan: Any, index: int) -> Any:
    """A group's matrices and formats in a weight plan (what its weight bytes depend on)."""
    return plan.groups[index] if index < len(plan.groups) else (plan.draft, plan.once)
