"""verify's parallel mode (issue 20): the verify decoder sharded over spawned torch.distributed ranks
(gloo, CPU), each rank's executed FLOPs per operator (FlopCounterMode on its local shards) and the
collectives it ran (a dispatch mode over the c10d ops) held exactly to costcalc's per-device numbers;
and sequence parallel in costcalc, by hand.

The fast subset: sequence parallel's collectives by hand, the CLI's refusals, one tp=2 run (prefill and
a decode step). The rest is slow (python -m pytest -m slow -n 0 -k parallel_verify): tp 4 with
h_kv < tp, sequence parallel, expert parallel at 2 and 4, a failing and a hanging rank, the GPU script.
"""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from costcalc import calc, presets
from costcalc.errors import CostcalcError
from costcalc.evaluate import Options, Query
from costcalc.layout import Layout

from cli_run import one_error, run

ROOT = Path(__file__).resolve().parents[1]
DENSE = ROOT / "verify" / "dry" / "dense.json"      # d 64, h_q 8, h_kv 2, d_h 8, m 224, V 256, L 2
MOE = ROOT / "verify" / "dry" / "moe.json"          # d 64, h_q 8, h_kv 2, d_h 16, E 16, k 4, m_e 24, V 256, L 2


def row(preset, workload, **kw):
    inputs = {k: [kw.pop(k)] for k in ("batch", "seq", "context") if k in kw}
    table = calc.answer(Query(presets.load(preset), workload, Options(**kw)), **inputs)
    return {k: v[0] for k, v in table.items()}


# --- sequence parallel in costcalc, by hand ------------------------------------------------------

def test_sequence_parallel_turns_each_all_reduce_into_reduce_scatter_and_all_gather():
    B, S, d, V, L = 3, 64, 4096, 128256, 32
    sp = row("llama-3.1-8b", "prefill", tp=4, sp=True, batch=B, seq=S)
    plain = row("llama-3.1-8b", "prefill", tp=4, batch=B, seq=S)
    message = B * S * d * 2                          # the whole B S x d bf16 tensor, before / after
    got = {(c["op"], c["where"]): (c["count"], c["bytes"]) for c in sp["collectives"]}
    assert got == {("reduce_scatter", "o_proj"): (L, message), ("all_gather", "o_proj"): (L, message),
                   ("reduce_scatter", "ffn down_proj"): (L, message), ("all_gather", "ffn down_proj"): (L, message),
                   ("reduce_scatter", "embedding"): (1, message), ("all_gather", "embedding"): (1, message),
                   ("all_gather", "lm_head"): (1, B * V * 2)}
    assert sp["comm_bytes_per_device"] == (4 * L + 2) * message + B * V * 2
    assert sp["flops_per_device"] == plain["flops_per_device"] and sp["layout"] == "tp4.sp"


def test_sequence_parallel_needs_tokens_that_divide_by_tp(capsys):
    code, _, err = run(capsys, "decode", "-p", "llama-3.1-8b", "--context", "8", "--batch", "3", "--tp", "2", "--sp")
    assert code != 0 and one_error(err, "a forward of 3 tokens does not divide by --tp 2"), err
    code, out, _ = run(capsys, "decode", "-p", "llama-3.1-8b", "--context", "8", "--batch", "4", "--tp", "2", "--sp",
                       "-f", "json")
    assert code == 0 and "reduce_scatter" in out


# --- the CLI: what the sharded verifier refuses, in one line, before any rank starts ---------------

@pytest.mark.parametrize("extra, message", [
    (["--tp", "2", "--workloads", "chunked"], "the sharded verifier runs prefill and decode"),
    (["--tp", "2", "--report", "x"], "--report with --tp 2"),
    (["--tp", "2", "--repeats", "3"], "it does not time"),
    (["--tp", "3"], "does not divide by 3"),
    (["--tp", "2", "--ep", "2"], "has no MoE layers"),
    (["--tp", "2", "--timeout", "0"], "--timeout: 0 is not positive"),
    (["--tp", "2", "--sp", "--batch", "1", "--workloads", "decode"], "a forward of 1 token does not divide"),
    (["--tp", "2", "--ep", "2", "--batch", "1"], "a decode forward of 1 token does not divide by 2"),   # MoE
])
def test_parallel_verify_refusals_are_one_line(capsys, extra, message):
    model = MOE if "--ep" in extra and "has no MoE" not in message else DENSE
    code, _, err = run(capsys, "verify", "--preset-file", str(model), "--seq", "8", *extra)
    assert code != 0 and one_error(err, message), err


def test_the_cli_and_the_verifier_run_the_same_workloads():
    from costcalc.cli import verify_cmd
    from costcalc.verify import parallel

    assert verify_cmd.PARALLEL_WORKLOADS == parallel.WORKLOADS
    assert verify_cmd.PARALLEL_TIMEOUT_S == parallel.TIMEOUT_S


# --- one sharded run (fast): tp 2, a prefill and a decode step -------------------------------------

def _run(spec_path, tp, ep=1, sp=False, batch=2, seq=8):
    from costcalc.verify import parallel

    rows = parallel.verify(presets.load_file(spec_path), Layout(tp, ep, sp=sp), ("prefill", "decode"), [seq], batch)
    return rows


def _by(rows, rank, job):
    return {r["check"]: r for r in rows if r["rank"] == rank and r["job"] == job}


def test_tp2_prefill_and_decode_held_exactly(tmp_path):
    """Two gloo ranks: every operator's counted FLOPs, every collective (op, where, count, message
    bytes) equal to costcalc's per-device numbers; and by hand where the rule is short: the all-reduce
    message is B n d bf16 bytes, q_proj is 2 n d (h_q / tp) d_h, the logits match the whole decoder."""
    rows = _run(DENSE, 2)
    assert rows and all(r["match"] for r in rows), [r for r in rows if not r["match"]]
    B, S, d, d_h, h_q, V, L = 2, 8, 64, 8, 8, 256, 2
    for rank in (0, 1):
        pre, dec = _by(rows, rank, "prefill B=2 S=8"), _by(rows, rank, "decode B=2 T=8")
        assert pre[f"all_reduce o_proj x {B * S * d * 2} B"]["counted"] == L
        assert pre[f"all_reduce ffn down_proj x {B * S * d * 2} B"]["counted"] == L
        assert dec[f"all_reduce o_proj x {B * d * 2} B"]["counted"] == L
        assert pre[f"all_gather lm_head x {B * V * 2} B"]["counted"] == 1
        assert pre["flops q_proj"]["counted"] == L * 2 * B * S * d * (h_q // 2) * d_h
        assert pre["flops k_proj"]["counted"] == L * 2 * B * S * d * 1 * d_h      # h_kv 2 over 2 ranks: one each
        assert dec["flops lm_head"]["counted"] == 2 * B * d * V // 2
        assert {c.split(" x ")[0] for c in pre if " x " in c} == {"all_reduce o_proj", "all_reduce ffn down_proj",
                                                                   "all_reduce embedding", "all_gather lm_head"}
        assert pre[f"all_reduce embedding x {B * S * d * 2} B"]["counted"] == 1   # the vocabulary-split lookups


# --- slow: the other layouts -----------------------------------------------------------------------

SLOW_LAYOUTS = [
    pytest.param(DENSE, 4, 1, False, 4, id="tp4-kv-heads-replicated"),    # h_kv 2 < tp 4
    pytest.param(DENSE, 2, 1, True, 2, id="tp2-sp"),
    pytest.param(DENSE, 4, 1, True, 4, id="tp4-sp-kv-heads-replicated"),
    pytest.param(MOE, 2, 1, False, 4, id="moe-tp2"),                      # experts split by width
    pytest.param(MOE, 2, 2, False, 4, id="moe-tp2-ep2"),
    pytest.param(MOE, 4, 4, False, 4, id="moe-tp4-ep4"),
    pytest.param(MOE, 4, 4, True, 4, id="moe-tp4-ep4-sp"),
]


@pytest.mark.slow
@pytest.mark.parametrize("path, tp, ep, sp, batch", SLOW_LAYOUTS)
def test_layouts_held_exactly(path, tp, ep, sp, batch):
    rows = _run(path, tp, ep, sp, batch)
    assert rows and all(r["match"] for r in rows), [r for r in rows if not r["match"]]
    S, d, L = 8, 64, 2
    for rank in range(tp):
        pre = _by(rows, rank, f"prefill B={batch} S={S}")
        kinds = {c.split(" x ")[0]: r["counted"] for c, r in pre.items() if " x " in c}
        if sp:       # each all-reduce a reduce-scatter and an all-gather of the whole B S x d tensor
            assert pre[f"reduce_scatter o_proj x {batch * S * d * 2} B"]["counted"] == L
            assert pre[f"all_gather ffn down_proj x {batch * S * d * 2} B"]["counted"] == L
            assert not any(k.startswith("all_reduce") for k in kinds)
        if ep > 1:   # dispatch and combine of this rank's B S / ep tokens' k copies
            k = 4
            assert pre[f"all_to_all experts dispatch x {batch * S // ep * k * d * 2} B"]["counted"] == L
            assert pre[f"all_to_all experts combine x {batch * S // ep * k * d * 2} B"]["counted"] == L
            E, m_e = 16, 24   # the routed pairs a rank runs: B S k / ep, each 3 x 2 d m_e FLOPs
            assert pre["flops experts.up_proj"]["counted"] == L * batch * S * k // ep * 2 * d * m_e
            assert pre["flops router"]["counted"] == L * 2 * batch * S * d * E    # whole on every rank
        if path == DENSE and tp == 4:   # h_kv 2 < tp 4: one KV head a rank (vLLM), not h_kv / tp
            assert pre["flops k_proj"]["counted"] == L * 2 * batch * S * d * 8


# --- slow: the ranks end on every way out ---------------------------------------------------------

def fail_on_rank_one(rank):
    if rank == 1:
        raise ValueError("rank one was told to fail")
    import torch.distributed as dist

    dist.barrier()                 # rank 0 waits for a rank that is gone: the parent must end it
    return {}


def hang(rank):
    time.sleep(600)


def _alive(pids):
    return [p for p in pids if os.path.exists(f"/proc/{p}") and "Z" not in _state(p)]


def _state(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return "Z"


@pytest.mark.slow
def test_a_failing_rank_fails_the_run_with_its_message_and_ends_the_others():
    import multiprocessing

    from costcalc.verify import parallel

    t0 = time.monotonic()
    with pytest.raises(CostcalcError, match="rank 1: ValueError: rank one was told to fail"):
        parallel.launch(2, "test_parallel_verify:fail_on_rank_one", {}, timeout=100)
    assert time.monotonic() - t0 < 60       # not the timeout: the failure is seen as it happens
    assert not multiprocessing.active_children()


@pytest.mark.slow
def test_a_hanging_rank_is_ended_at_the_timeout():
    import multiprocessing

    from costcalc.verify import parallel

    t0 = time.monotonic()
    with pytest.raises(CostcalcError, match="did not finish in 8 s"):
        parallel.launch(2, "test_parallel_verify:hang", {}, timeout=8)
    assert time.monotonic() - t0 < 30
    assert not multiprocessing.active_children()      # every rank ended and reaped


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGINT", "SIGKILL"])
def test_an_interrupted_or_killed_launcher_leaves_no_rank(tmp_path, how):
    """Ctrl-C (SIGINT) to the command while its ranks run: it ends them and exits; killed outright
    (SIGKILL: no cleanup of its own runs), the ranks see it gone and end themselves."""
    import signal

    pids = tmp_path / "pids"
    code = ("import sys, time; sys.path.insert(0, %r)\n"
            "from costcalc.verify import parallel\n"
            "if __name__ == '__main__':\n"
            "    import multiprocessing, threading\n"
            "    def note():\n"
            "        while len(multiprocessing.active_children()) < 2: time.sleep(0.1)\n"
            "        open(%r, 'w').write(' '.join(str(p.pid) for p in multiprocessing.active_children()))\n"
            "    threading.Thread(target=note, daemon=True).start()\n"
            "    parallel.launch(2, 'test_parallel_verify:hang', {}, timeout=300)\n") % (str(ROOT / "tests"), str(pids))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not pids.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert pids.exists(), proc.stderr.read() if proc.poll() is not None else "no ranks started"
    ranks = [int(p) for p in pids.read_text().split()]
    proc.send_signal(getattr(signal, how))
    proc.wait(timeout=60)
    deadline = time.monotonic() + 20
    while _alive(ranks) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert proc.returncode != 0 and not _alive(ranks)


@pytest.mark.slow
def test_gpu_check_parallel_case_dry(tmp_path):
    """verify/gpu_check.sh's parallel case on CPU (DRY=1: two gloo processes): it runs and matches."""
    env = {**os.environ, "DRY": "1", "OUT": str(tmp_path), "PYTHONPATH": str(ROOT),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(["bash", str(ROOT / "verify" / "gpu_check.sh")], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    log = (tmp_path / "parallel-tp2.log").read_text()
    assert "tp2: " in log and " 0 mismatches" in log
    rows = (tmp_path / "parallel-tp2.csv").read_text().splitlines()
    assert rows[0].startswith("rank,job,check,counted,costcalc,match") and len(rows) > 40


def test_gpu_check_skips_the_parallel_case_on_fewer_than_two_gpus():
    text = (ROOT / "verify" / "gpu_check.sh").read_text()
    assert "--tp 2" in text and 'skipped: $GPUS GPU(s) visible, 2 needed' in text
