"""``costcalc plan``: the front checked by brute force, the targets and the chosen row recomputed from
each row's own times, every row's command reproducing its numbers through ``costcalc generate``, and
bad input as one line."""
import json
import shlex

import pytest

from costcalc import plan
from cli_run import one_error, run

QUESTION = ("plan", "-p", "olmoe-1b-7b", "--device", "h100", "--devices", "2", "--isl", "512", "--osl", "64",
            "--ttft", "150ms", "--tpot", "5ms")
TTFT, TPOT = 0.150, 0.005


def answer(args: tuple) -> list[dict]:
    """A plan's JSON rows, asked through the CLI's entry point."""
    from costcalc.cli import main
    import io
    import contextlib

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*args, "-f", "json"]) == 0
    return json.loads(out.getvalue())


@pytest.fixture(scope="module")
def rows():
    return answer(QUESTION)


def test_rows_have_exactly_the_interface_fields(rows):
    assert rows and all(list(r) == list(plan.FIELDS) for r in rows)
    assert {r["timing"] for r in rows} == {"roofline"} and all(r["fits"] is True for r in rows)


def dominated(r: dict, rows: list[dict]) -> bool:
    """Brute force: another row at least as fast on both rates and faster on one."""
    return any(o["tokens_per_s_per_gpu"] >= r["tokens_per_s_per_gpu"]
               and o["tokens_per_s_per_user"] >= r["tokens_per_s_per_user"]
               and (o["tokens_per_s_per_gpu"] > r["tokens_per_s_per_gpu"]
                    or o["tokens_per_s_per_user"] > r["tokens_per_s_per_user"]) for o in rows)


def test_front_is_every_undominated_candidate(rows):
    """A row is on the front exactly when no other row dominates it."""
    for r in rows:
        assert r["pareto"] is (not dominated(r, rows))
    assert 1 < sum(r["pareto"] for r in rows) < len(rows)


def test_front_keeps_ties_and_drops_the_dominated():
    assert plan.front([3, 3, 2, 1, 1], [1, 1, 2, 2, 5]) == [True, True, True, False, True]
    assert plan.front([1, 2], [1, 2]) == [False, True]


def test_rates_and_targets_follow_from_each_rows_times(rows):
    for r in rows:
        assert r["meets_targets"] is (r["ttft_s"] <= TTFT and r["tpot_s"] <= TPOT)
        assert r["tokens_per_s_per_user"] == pytest.approx(1 / r["tpot_s"], rel=1e-12)
        whole = r["ttft_s"] + (64 - 1) * r["tpot_s"]          # the generation's time, prefill and decode phase
        assert r["tokens_per_s_per_gpu"] == pytest.approx(r["batch"] * 64 / whole / r["devices"], rel=1e-9)
        assert 2 % r["devices"] == 0                           # a layout's devices divide the devices asked
    assert any(r["meets_targets"] for r in rows) and not all(r["meets_targets"] for r in rows)


def test_the_chosen_row_is_the_fastest_per_gpu_meeting_the_targets(rows, capsys):
    met = [r for r in rows if r["meets_targets"]]
    best = max(met, key=lambda r: (r["tokens_per_s_per_gpu"], r["tokens_per_s_per_user"]))
    code, out, err = run(capsys, *QUESTION)
    assert code == 0 and err == ""
    tail = out[out.index("best meeting the targets"):]
    assert f"\n  {best['command']}\n" in tail
    front = [r for r in rows if r["pareto"]]
    assert all(r["command"] in out for r in front)     # the terminal shows the front with its commands
    assert sum(line.startswith("costcalc generate", 4) for line in out.splitlines()) >= len(front)


def test_batches_are_powers_of_two_up_to_the_largest_that_fits(rows, capsys):
    """Each layout's batches are step x 2^k; the next one up does not fit (generate says so)."""
    by: dict = {}
    for r in rows:
        by.setdefault((r["layout"], r["weight_dtype"], r["speculation"]), []).append(r)
    for (layout, _, _), group in list(by.items())[:3]:
        sizes = sorted(r["batch"] for r in group)
        assert all(b == sizes[0] * 2 ** i for i, b in enumerate(sizes))
        top = max(group, key=lambda r: r["batch"])
        args = shlex.split(top["command"])[1:]
        at = args.index("--batch") + 1
        args[at] = str(2 * top["batch"])
        code, out, err = run(capsys, *args, "-f", "json")
        assert code == 0 and json.loads(out)[-1]["fits"] is False


def _reproduced(capsys, row):
    args = shlex.split(row["command"])
    assert args[:2] == ["costcalc", "generate"]
    code, out, err = run(capsys, *args[1:], "-f", "json")
    assert code == 0, err
    total = json.loads(out)[-1]
    assert total["phase"] == "total"
    return total


ROUNDING = 1e-12    # the search sums a step's operators in another order than generate (costcalc.steptimes)


def test_commands_reproduce_their_rows(rows, capsys):
    """A few rows -- the chosen one, a pipeline, data-parallel experts, one device -- each equal to its
    generate command's total row (to the rounding of the search's order of sums)."""
    met = [r for r in rows if r["meets_targets"]]
    picks = [max(met, key=lambda r: r["tokens_per_s_per_gpu"])]
    for want in (".pp", ".dp", "tp1"):
        picks.append(next(r for r in rows if want in r["layout"] or r["layout"] == want))
    for row in picks:
        total = _reproduced(capsys, row)
        assert total["ttft_s"] == pytest.approx(row["ttft_s"], rel=ROUNDING)
        assert total["tpot_s"] == pytest.approx(row["tpot_s"], rel=ROUNDING)
        assert total["batch_tokens_per_s"] / total.get("devices", 1) == \
            pytest.approx(row["tokens_per_s_per_gpu"], rel=ROUNDING)
        assert 1 / total["tpot_s"] == pytest.approx(row["tokens_per_s_per_user"], rel=ROUNDING)
        assert total["weight_dtype"] == row["weight_dtype"] and total["fits"] is True
        assert total["batch"] == row["batch"] and total.get("layout", "tp1") == row["layout"]


def test_unmet_targets_say_so_and_name_the_closest(rows, capsys):
    """The candidates do not depend on the targets: under targets nothing meets, the closest of the same
    rows is the one missing them by the smallest factor."""
    closest = min(rows, key=lambda r: (max(r["ttft_s"] / 1e-6, r["tpot_s"] / 1e-6), -r["tokens_per_s_per_gpu"]))
    code, out, err = run(capsys, *QUESTION[:-4], "--ttft", "1us", "--tpot", "1us")
    assert code == 0 and "yes" not in out.split("commands")[0].split()
    tail = out[out.index("no configuration meets"):]
    assert "no configuration meets ttft <= 1.000 us and tpot <= 1.000 us" in " ".join(tail.split())
    assert f"\n  {closest['command']}\n" in tail


def test_the_default_axis_drafts_nothing_and_a_draft_alone_only_costs(capsys):
    """The default speculation axis is no draft, MTP layers or not; asked alone (no rate), --draft mtp
    drafts at every step and accepts nothing: each of its rows is slower than the same row without it."""
    from costcalc import presets

    assert plan.speculations(presets.load("qwen3-8b")) == (None,)
    assert plan.speculations(presets.load("deepseek-v3")) == (None,)
    code, out, err = run(capsys, "plan", "-p", "qwen3.5-35b-a3b", "--device", "h100", "--devices", "2", "--isl",
                         "512", "--osl", "16", "--ttft", "1s", "--tpot", "10ms", "--draft", "mtp", "-f", "json")
    assert code == 0, err
    got = json.loads(out)
    plain = {(r["layout"], r["batch"], r["weight_dtype"]): r for r in got if r["speculation"] is None}
    drafted = [r for r in got if r["speculation"] == "mtp"]
    assert drafted and all(r["tpot_s"] > plain[(r["layout"], r["batch"], r["weight_dtype"])]["tpot_s"]
                           for r in drafted)


def test_speculative_candidates_reproduce_through_generate(capsys):
    """With --acceptance the axis is speculative decoding over K (Qwen3.5-35B-A3B's MTP layers, one
    device): each K's rows are there, and a speculative row's command gives its numbers."""
    code, out, err = run(capsys, "plan", "-p", "qwen3.5-35b-a3b", "--device", "h100", "--devices", "1", "--isl",
                         "256", "--osl", "16", "--ttft", "1s", "--tpot", "10ms", "--weight-dtype", "fp8",
                         "--acceptance", "0.8", "--draft-tokens", "2", "-f", "json")
    assert code == 0, err
    got = json.loads(out)
    assert {r["speculation"] for r in got} == {None, "mtp k2 a0.8"}
    row = next(r for r in got if r["speculation"] and r["batch"] == 8)
    assert row["command"].endswith("--draft mtp --draft-tokens 2 --acceptance 0.8")
    total = _reproduced(capsys, row)
    assert total["expected_tokens_per_step"] == pytest.approx(1 + 0.8 + 0.8 ** 2)
    assert total["ttft_s"] == pytest.approx(row["ttft_s"], rel=ROUNDING)
    assert total["tpot_s"] == pytest.approx(row["tpot_s"], rel=ROUNDING)
    assert total["batch_tokens_per_s"] == pytest.approx(row["tokens_per_s_per_gpu"], rel=ROUNDING)


@pytest.mark.parametrize("args, message", [
    (("--ttft", "0s"), "--ttft: '0s' is not a positive duration"),
    (("--tpot", "fast"), "--tpot: 'fast' is not a positive duration"),
    (("--osl", "1"), "--osl must be an integer of at least 2"),
    (("--isl", "0"), "--isl must be an integer of at least 1"),
    (("--devices", "0"), "--devices must be a positive integer"),
    (("--devices", "1e9"), "--devices 1,000,000,000: at most 4,096"),
    (("--weight-dtype", "fp9"), "--weight-dtype"),
])
def test_bad_input_is_one_line(capsys, args, message):
    given = dict(zip(QUESTION[1::2], QUESTION[2::2]))
    given.update(dict(zip(args[0::2], args[1::2])))
    code, out, err = run(capsys, "plan", *[x for kv in given.items() for x in kv])
    assert code == 2 and one_error(err, message), err


@pytest.mark.parametrize("args, message", [
    (("--acceptance", "0.8"), "--acceptance: olmoe-1b-7b has no multi-token-prediction layers"),
    (("--draft-tokens", "2"), "--draft-tokens sizes speculative decoding: it needs --acceptance"),
    (("--draft", "qwen3-8b"), "a draft model runs only as speculative decoding"),
    (("--draft", "qwen3-8b", "--acceptance", "0.8,0.7", "--draft-tokens", "3"), "--acceptance"),
])
def test_bad_speculation_is_one_line(capsys, args, message):
    code, out, err = run(capsys, *QUESTION, *args)
    assert code == 2 and one_error(err, message), err


def test_no_device_and_no_valid_layout_are_one_line(capsys):
    code, _, err = run(capsys, "plan", "-p", "olmoe-1b-7b", "--devices", "2", "--isl", "1k", "--osl", "64",
                       "--ttft", "1s", "--tpot", "10ms")
    assert code == 2 and one_error(err, "plan needs a device")
    code, _, err = run(capsys, "plan", "-p", "llama-3.1-405b", "--device", "h100", "--devices", "1", "--isl", "1k",
                       "--osl", "64", "--ttft", "1s", "--tpot", "10ms", "--weight-dtype", "bf16")
    assert code == 2 and one_error(err, "no layout of llama-3.1-405b on 1 h100 is valid"), err
    assert "nothing fits" in err


def test_durations():
    assert plan.duration("2s", "--ttft") == 2.0 and plan.duration("30ms", "--tpot") == pytest.approx(0.03)
    assert plan.duration("0.5", "--ttft") == 0.5 and plan.duration("250us", "--tpot") == pytest.approx(250e-6)


def test_all_lists_every_candidate_in_the_table(rows, capsys):
    code, out, err = run(capsys, *QUESTION, "--all")
    assert code == 0
    table = out[:out.index("commands (each")].splitlines()
    numbered = [line for line in table if line.split() and line.split()[0].rstrip("*").isdigit()]
    assert len(numbered) == len(rows) and "every candidate" in " ".join(out.split())


def test_measured_candidates_reproduce_through_generate(capsys):
    """--timing measured reaches every command: a layout's row equals its generate line's (the measured
    tables, where the extra is installed)."""
    pytest.importorskip("pyarrow")
    pytest.importorskip("aiconfigurator_core")
    code, out, err = run(capsys, "plan", "-p", "qwen3-8b", "--device", "h100", "--devices", "2", "--isl", "1k",
                         "--osl", "64", "--ttft", "1s", "--tpot", "20ms", "--weight-dtype", "bf16", "--timing",
                         "measured", "-f", "json")
    assert code == 0, err
    got = json.loads(out)
    assert {r["timing"] for r in got} == {"measured"}
    for row in (next(r for r in got if r["layout"] == "tp2"), next(r for r in got if r["layout"] == "tp1")):
        assert "--timing measured" in row["command"]
        total = _reproduced(capsys, row)
        assert (total["ttft_s"], total["tpot_s"]) == (row["ttft_s"], row["tpot_s"])


# --batching continuous: serve's engine as the candidates

CONTINUOUS = (*QUESTION, "--batching", "continuous")


@pytest.fixture(scope="module")
def continuous_rows():
    return answer(CONTINUOUS)


def test_static_rows_say_static(rows):
    assert {r["batching"] for r in rows} == {"static"}


def test_continuous_rows_are_tp_ep_engines_with_the_interface_fields(continuous_rows):
    rows = continuous_rows
    assert rows and all(list(r) == list(plan.FIELDS) for r in rows)
    assert {r["batching"] for r in rows} == {"continuous"} and {r["speculation"] for r in rows} == {None}
    # no pipeline; data-parallel replicas only with the experts over them (copies are implied)
    assert {r["layout"] for r in rows} == {"tp1", "tp2", "tp2.ep2", "tp1.ep2.dp2"}
    assert all(r["fits"] is True and r["command"].startswith("costcalc serve ") for r in rows)


def test_continuous_front_is_every_undominated_candidate(continuous_rows):
    rows = continuous_rows
    for r in rows:
        assert r["pareto"] is (not dominated(r, rows))
        assert r["meets_targets"] is (r["ttft_s"] <= TTFT and r["tpot_s"] <= TPOT)
    assert 1 < sum(r["pareto"] for r in rows) < len(rows)


def _served(capsys, command, *extra):
    args = shlex.split(command)
    assert args[:2] == ["costcalc", "serve"]
    code, out, err = run(capsys, *args[1:], *extra, "-f", "json")
    assert code == 0, err
    return json.loads(out)


def test_continuous_commands_reproduce_their_rows(continuous_rows, capsys):
    """The chosen row, the front's ends and a bf16 row: each equal to its serve line's, float for float."""
    rows = continuous_rows
    front = [r for r in rows if r["pareto"]]
    met = [r for r in rows if r["meets_targets"]]
    picks = [max(met, key=lambda r: (r["tokens_per_s_per_gpu"], r["tokens_per_s_per_user"])), front[0], front[-1],
             next(r for r in rows if r["weight_dtype"] == "bf16" and r["layout"] == "tp2"),
             next(r for r in rows if r["layout"] == "tp1.ep2.dp2" and r["batch"] > 2)]
    for row in picks:
        got, = _served(capsys, row["command"])
        for key in ("ttft_s", "tpot_s", "tokens_per_s_per_gpu", "tokens_per_s_per_user", "layout", "devices"):
            assert got[key] == row[key], key
        assert got["concurrency"] == row["batch"] and got["queued"] == 0 and got["fits"] is True


def test_continuous_concurrencies_are_powers_of_two_up_to_serves_max(continuous_rows, capsys):
    by: dict = {}
    for r in continuous_rows:
        by.setdefault((r["layout"], r["weight_dtype"]), []).append(r)
    for (layout, dtype), group in by.items():
        sizes = sorted(r["batch"] for r in group)
        replicas = int(layout.split(".dp")[1]) if ".dp" in layout else 1
        assert sizes == [replicas * 2 ** i for i in range(len(sizes))]
    for layout in ("tp2.ep2", "tp1.ep2.dp2"):
        top = max(by[(layout, "fp8")], key=lambda r: r["batch"])
        most, = _served(capsys, top["command"].replace(f"--concurrency {top['batch']}", "--concurrency max"))
        assert top["batch"] <= most["concurrency"] < 2 * top["batch"]


def test_continuous_budget_reaches_the_commands(capsys):
    code, out, err = run(capsys, *CONTINUOUS[:6], "1", *CONTINUOUS[7:], "--max-batched-tokens", "1k",
                         "--weight-dtype", "bf16", "-f", "json")
    assert code == 0, err
    got = json.loads(out)
    assert max(r["batch"] for r in got) <= 1024 and {r["layout"] for r in got} == {"tp1"}
    row = got[len(got) // 2]
    assert row["command"].endswith("--max-batched-tokens 1024")
    served, = _served(capsys, row["command"])
    assert (served["ttft_s"], served["tpot_s"]) == (row["ttft_s"], row["tpot_s"])
    assert served["max_batched_tokens"] == 1024


@pytest.mark.parametrize("args, message", [
    (("--batching", "continuous", "--draft", "mtp"), "--batching continuous: serve models no speculative decoding"),
    (("--batching", "continuous", "--acceptance", "0.8"), "--batching continuous: serve models no speculative"),
    (("--batching", "dynamic"), "--batching: 'dynamic' is not one of static, continuous"),
    (("--max-batched-tokens", "4k"), "--max-batched-tokens is continuous batching's token budget"),
    (("--batching", "continuous", "--max-batched-tokens", "0"), "--max-batched-tokens must be a positive integer"),
])
def test_bad_batching_is_one_line(capsys, args, message):
    code, out, err = run(capsys, *QUESTION, *args)
    assert code == 2 and one_error(err, message), err


def test_measured_continuous_candidates_reproduce_through_serve(capsys):
    """--timing measured reaches serve's lines too: an engine's row equals its serve command's."""
    pytest.importorskip("pyarrow")
    pytest.importorskip("aiconfigurator_core")
    code, out, err = run(capsys, "plan", "-p", "qwen3-8b", "--device", "h100", "--devices", "2", "--isl", "1k",
                         "--osl", "64", "--ttft", "1s", "--tpot", "20ms", "--weight-dtype", "bf16", "--timing",
                         "measured", "--batching", "continuous", "-f", "json")
    assert code == 0, err
    got = json.loads(out)
    assert {r["timing"] for r in got} == {"measured"} and {r["batching"] for r in got} == {"continuous"}
    for row in (next(r for r in got if r["layout"] == "tp2" and r["batch"] == 8), got[0]):
        assert "--timing measured" in row["command"]
        served, = _served(capsys, row["command"])
        assert (served["ttft_s"], served["tpot_s"], served["tokens_per_s_per_gpu"]) == \
            (row["ttft_s"], row["tpot_s"], row["tokens_per_s_per_gpu"])


DISAGG = ("plan", "-p", "olmoe-1b-7b", "--device", "h100", "--devices", "4", "--isl", "512", "--osl", "64", "--ttft",
          "150ms", "--tpot", "5ms", "--weight-dtype", "bf16", "--batching", "continuous", "--disagg")


def test_disaggregated_splits_fill_the_devices_and_reproduce_through_serve(capsys):
    """--disagg adds every prefill x decode split of the 4 devices: each row's pools fill them, the front
    still is every undominated row of both kinds, and a split's serve --disagg line gives its numbers,
    its decode concurrencies powers of two up to serve's --concurrency max."""
    code, out, err = run(capsys, *DISAGG, "-f", "json")
    assert code == 0, err
    got = json.loads(out)
    split = [r for r in got if r["batching"] == "disaggregated"]
    assert split and {r["batching"] for r in got} == {"continuous", "disaggregated"}
    pools = {r["layout"] for r in split}
    assert {"p:1xtp1 d:3xtp1", "p:2xtp1 d:1xtp2.ep2", "p:1xtp2.ep2 d:2xtp1"} <= pools
    for r in split:
        assert r["devices"] == 4 and r["fits"] is True and " --disagg " in r["command"]
        sizes = []
        for part, pool in zip(r["layout"].split(), ("prefill", "decode")):     # p:AxL: A engines of L's tp devices
            engines, layout = part[2:].split("x", 1)
            tp = int(layout.split(".")[0][2:])
            sizes.append(int(engines) * tp)
            assert f"--{pool}-tp {tp} " in r["command"] and f"--{pool}-devices {sizes[-1]}" in r["command"]
        assert sum(sizes) == 4
    for r in got:
        assert r["pareto"] is (not dominated(r, got))
    group = [r for r in split if r["layout"] == "p:2xtp1 d:1xtp2.ep2"]
    assert sorted(r["batch"] for r in group) == [2 ** i for i in range(len(group))]
    top = max(group, key=lambda r: r["batch"])
    for row in (top, min(group, key=lambda r: r["batch"])):
        served, = _served(capsys, row["command"])
        for key in ("ttft_s", "tpot_s", "tokens_per_s_per_gpu", "tokens_per_s_per_user", "devices"):
            assert served[key] == row[key], key
        assert served["concurrency"] == row["batch"]
    most, = _served(capsys, top["command"].replace(f"--concurrency {top['batch']}", "--concurrency max"))
    assert top["batch"] <= most["concurrency"] < 2 * top["batch"]


def test_disagg_needs_continuous_batching(capsys):
    code, out, err = run(capsys, *QUESTION, "--disagg")
    assert code == 2 and one_error(err, "--disagg splits the devices into continuous-batching pools"), err


def test_a_draft_model_is_searched_on_parallel_layouts_and_reproduces(capsys):
    """Speculative decoding with a draft model on a tensor-parallel layout (the draft at the target's tp):
    the rows are there, and one's command gives its numbers."""
    code, out, err = run(capsys, "plan", "-p", "llama-3.1-70b", "--device", "h200", "--devices", "2", "--isl", "1k",
                         "--osl", "64", "--ttft", "1s", "--tpot", "20ms", "--weight-dtype", "fp8", "--draft",
                         "llama-3.1-8b", "--acceptance", "0.8", "--draft-tokens", "2", "-f", "json")
    assert code == 0, err
    got = json.loads(out)
    spec = [r for r in got if r["layout"] == "tp2" and r["speculation"] == "llama-3.1-8b k2 a0.8"]
    assert spec and not any(".pp" in r["layout"] and r["speculation"] for r in got)   # no draft under --pp
    row = spec[len(spec) // 2]
    total = _reproduced(capsys, row)
    assert total["ttft_s"] == pytest.approx(row["ttft_s"], rel=ROUNDING)
    assert total["tpot_s"] == pytest.approx(row["tpot_s"], rel=ROUNDING)
    assert total["draft_layout"] == "tp2" and total["layout"] == "tp2"


# --requests: a mix of request shapes (static batching)

MIX_BASE = ("plan", "-p", "olmoe-1b-7b", "--device", "h100", "--devices", "2", "--ttft", "150ms", "--tpot", "5ms")


def _mix_file(tmp_path, entries, name="mix.json"):
    path = tmp_path / name
    path.write_text(json.dumps(entries))
    return str(path)


def test_a_mix_of_one_shape_is_the_plain_search(rows, tmp_path):
    got = answer((*MIX_BASE, "--requests", _mix_file(tmp_path, [{"isl": 512, "osl": 64}])))
    assert got == rows


def test_a_mix_holds_every_shape_to_the_targets_and_mixes_their_throughput(tmp_path):
    """Each row from the shapes' own searches: ttft and tpot the worst shape's, tokens/s per GPU the
    mixture's (each shape's batches in proportion to its share of the requests)."""
    shapes = [(256, 32, 3), (2048, 128, 1)]
    got = answer((*MIX_BASE, "--requests", _mix_file(tmp_path, [{"isl": i, "osl": o, "share": w}
                                                                 for i, o, w in shapes])))
    alone = [{(r["layout"], r["weight_dtype"], r["speculation"], r["batch"]): r
              for r in answer((*MIX_BASE, "--isl", str(i), "--osl", str(o)))} for i, o, _ in shapes]
    assert got and all(list(r) == list(plan.FIELDS) for r in got)
    assert len(got) == len(set(alone[0]) & set(alone[1]))
    for row in got:
        own = [a[(row["layout"], row["weight_dtype"], row["speculation"], row["batch"])] for a in alone]
        assert row["ttft_s"] == max(r["ttft_s"] for r in own) and row["tpot_s"] == max(r["tpot_s"] for r in own)
        b, n = row["batch"], row["devices"]
        times = [b * o / (r["tokens_per_s_per_gpu"] * n) for (_, o, _), r in zip(shapes, own)]
        want = sum(w * b * o for _, o, w in shapes) / sum(w * t for (_, _, w), t in zip(shapes, times)) / n
        assert row["tokens_per_s_per_gpu"] == pytest.approx(want, rel=1e-12)
        assert row["command"] == "; ".join(r["command"] for r in own)
        assert row["meets_targets"] is (row["ttft_s"] <= TTFT and row["tpot_s"] <= TPOT)


@pytest.mark.parametrize("content, message", [
    ('{"isl": 512}', "expected a non-empty array of request shapes"),
    ("[]", "got an empty array"),
    ('{"requests": [{"isl": 512, "osl": 64}], "mode": 1}', "unknown key 'mode' beside"),
    ('[{"isl": 512}]', "osl must be a whole number from 2"),
    ('[{"isl": 512, "osl": 1}]', "osl must be a whole number from 2"),
    ('[{"isl": 512, "osl": 64, "share": 0}]', "share must be a positive number"),
    ('[{"isl": 512, "osl": 64, "weight": 1}]', "unknown field 'weight'"),
    ('[3]', "request shape 1 is a number"),
    ("[{", "not valid JSON"),
    (b"\xff\xfe", "not UTF-8 text"),
])
def test_a_bad_requests_file_is_one_line(capsys, tmp_path, content, message):
    path = tmp_path / "mix.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    code, out, err = run(capsys, *MIX_BASE, "--requests", str(path))
    assert code == 2 and one_error(err, message), err


@pytest.mark.parametrize("extra, message", [
    (("--isl", "512", "--osl", "64"), "give --isl and --osl, or --requests FILE"),
    (("--batching", "continuous"), "--requests: continuous batching serves one request shape"),
    ((), "cannot read requests file"),
])
def test_requests_beside_isl_continuous_or_a_folder_is_one_line(capsys, tmp_path, extra, message):
    """(A file of one shape is --isl and --osl: continuous batching serves it; two it does not.)"""
    target = str(tmp_path) if not extra else _mix_file(tmp_path, [{"isl": 512, "osl": 64}, {"isl": 256, "osl": 32}])
    code, out, err = run(capsys, *MIX_BASE, "--requests", target, *extra)
    assert code == 2 and one_error(err, message), err


def test_no_shape_at_all_is_one_line(capsys):
    code, out, err = run(capsys, *MIX_BASE)
    assert code == 2 and one_error(err, "give --isl and --osl"), err


def test_divisors_are_every_divisor_in_order():
    for n in (1, 2, 12, 36, 64, 97, 4096):
        assert plan.divisors(n) == [d for d in range(1, n + 1) if n % d == 0]


def test_disaggregated_splits_of_too_many_devices_are_one_line(capsys):
    code, out, err = run(capsys, "plan", "-p", "llama-3.1-8b", "--device", "h200", "--devices", "512", "--isl", "1k",
                         "--osl", "64", "--ttft", "1s", "--tpot", "30ms", "--batching", "continuous", "--disagg")
    assert code == 2 and one_error(err, "--disagg on 512 devices: at most 256"), err
