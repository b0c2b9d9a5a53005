"""A training step's row under a layout (costcalc.training), for the training tests."""
from costcalc import calc, presets
from costcalc.evaluate import Options, Query
from costcalc.roofline import Machine
from costcalc.training import Plan, extend, single

LLAMA = dict(d=4096, h=32, h_kv=8, d_h=128, m=14336, V=128256, L=32)   # llama-3.1-8b (its preset)


def row(spec, plan=None, batch=8, seq=256, **layout):
    """One train row of ``spec`` (a preset name or a spec) at ``batch`` x ``seq`` under ``layout``'s Options."""
    spec, plan = presets.load(spec) if isinstance(spec, str) else spec, plan or Plan()
    options = Options(logits="all", recompute=plan.recompute.value, optimizer=plan.optimizer.name,
                      schedule=plan.schedule, virtual_stages=plan.virtual, **layout)
    query = Query(spec, "train", options, None, Machine(plan.device) if plan.device is not None else None)
    assert Plan.of(query) == plan          # the query asks what the plan says, and nothing else
    table = extend(query, calc.answer(single(query), batch=[batch], seq=[seq]))
    return {k: v[0] for k, v in table.items()}
