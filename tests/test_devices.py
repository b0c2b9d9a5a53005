"""Device profiles' links (costcalc/devices.py, interconnect.scale_up / scale_out): per direction,
held to the datasheets' own figures; old profiles still read; bad fields refused in one line."""
import json

import pytest

from cli_run import one_error, run
from costcalc import devices
from costcalc.errors import CostcalcError

GB = 10**9
# What the datasheets print (see each profile's note): the GPU-to-GPU total BOTH ways, and the NIC per
# GPU in gigaBITS per second. A profile stores one direction in bytes/s: half the first, an eighth the second.
DATASHEET = {   # device: (scale-up bidirectional GB/s, GPUs in the domain, NIC Gb/s per GPU or None)
    "a100": (600, 8, 200), "h100": (900, 8, 400), "h200": (900, 8, 400), "b200": (1800, 8, 400),
    "l40s": (64, 8, None), "mi300x": (7 * 128, 8, 400),
    "a100-40gb": (600, 8, None), "h100-nvl": (600, 2, None), "h800": (400, 8, None), "h20": (900, 8, None),
    "b300": (1800, 8, 800), "gb200": (1800, 72, None),
}
LINKLESS = ("h100-pcie", "l4", "mi325x", "mi355x", "a10g", "rtx-pro-6000")    # no source gave a GPU-to-GPU figure: no links, said in a note


@pytest.mark.parametrize("name", LINKLESS)
def test_a_profile_without_a_sourced_link_has_none_and_says_why(name):
    device = devices.load(name)
    assert device.scale_up is None and device.scale_out is None and device.interconnect["note"].startswith("no links")
    with pytest.raises(CostcalcError, match="no interconnect.scale_up"):
        device.link("scale_up")


def test_every_built_in_profile_is_in_one_of_the_tables():
    assert sorted(devices.names()) == sorted([*DATASHEET, *LINKLESS])


@pytest.mark.parametrize("name", sorted(DATASHEET))
def test_each_built_in_link_is_one_direction_of_the_datasheet_figure(name):
    device = devices.load(name)
    both_ways, domain, nic_gbit = DATASHEET[name]
    assert device.scale_up.bytes_per_s_each_way * 2 == both_ways * GB
    assert device.scale_up.domain == domain
    assert device.scale_up.latency_s > 0
    if nic_gbit is None:
        assert device.scale_out is None
        with pytest.raises(CostcalcError, match="no interconnect.scale_out"):
            device.link("scale_out")
    else:
        assert device.scale_out.bytes_per_s_each_way * 8 == nic_gbit * GB
    for kind in ("scale_up", "scale_out"):
        entry = device.interconnect.get(kind)
        if entry:
            assert entry["url"].startswith("https://") and entry["note"], (name, kind)
    assert "nvlink_bytes_per_s" not in device.interconnect     # the ambiguous field is gone from built-ins


def test_the_mi300x_mesh_gives_one_peer_pair_one_link():
    link = devices.load("mi300x").link("scale_up")
    assert link.topology == "mesh" and link.bandwidth(2) == 128 * GB / 2 and link.bandwidth(8) == 7 * 128 * GB / 2


OLD = {"name": "mine", "title": "old", "peak_flops": {"bf16": 1e15}, "mem_bw": 2e12, "mem_bytes": 8 * 10**10,
       "interconnect": {"nvlink_bytes_per_s": 900e9, "nvlink_note": "bidirectional", "pcie_bytes_per_s": 128e9}}


def test_an_old_profile_is_read_and_its_single_device_numbers_do_not_change(tmp_path, capsys):
    old, bare = tmp_path / "old.json", tmp_path / "bare.json"
    old.write_text(json.dumps(OLD))
    bare.write_text(json.dumps({k: v for k, v in OLD.items() if k != "interconnect"}))
    rows = []
    for path in (old, bare):
        code, out, err = run(capsys, "decode", "-p", "toy", "--context", "4k", "--device-file", str(path), "-f", "json")
        assert code == 0, err
        rows.append(json.loads(out))
    assert rows[0] == rows[1]
    device = devices.load_file(old)
    assert device.scale_up is None and device.interconnect["nvlink_bytes_per_s"] == 900e9   # kept as written
    with pytest.raises(CostcalcError) as caught:
        device.link("scale_up")
    message = str(caught.value)
    assert "bytes_per_s_each_way" in message and "domain_gpus" in message and "nvlink_bytes_per_s" in message
    assert "\n" not in message


def _with(scale_up=None, **interconnect):
    link = {"bytes_per_s_each_way": 450e9, "domain_gpus": 8, "topology": "switch", "latency_s": 7e-6,
            "url": "https://example.com", "note": "n"}
    return {**OLD, "interconnect": {"scale_up": {**link, **(scale_up or {})}, **interconnect}}


def test_a_profile_of_ones_own_with_links(tmp_path, capsys):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(_with(scale_out={"bytes_per_s_each_way": 25e9, "latency_s": 1e-5, "url": "u",
                                                "note": "n"})))
    device = devices.load_file(path)
    assert device.link("scale_up").bytes_per_s_each_way == 450e9 and device.link("scale_out").domain is None
    code, out, err = run(capsys, "devices", "show", "--device-file", str(path))
    fields = dict(line.split(None, 1) for line in out.splitlines() if line.strip() and not line.startswith(" "))
    assert code == 0 and fields["scale_up.bytes_per_s_each_way"] == "450.0 GB/s each way (4.5e+11)", err
    assert fields["scale_out.latency_s"] == "10 us (1e-05)"
    assert fields["scale_up.all_reduce"] == "ring" and device.scale_up.all_reduce == "ring"    # unless named
    path.write_text(json.dumps(_with({"all_reduce": "in_network", "all_reduce_note": "NVLS"})))
    assert devices.load_file(path).scale_up.all_reduce == "in_network"


@pytest.mark.parametrize("data, message", [
    (_with({"bytes_per_s_each_way": -1}), "'interconnect.scale_up.bytes_per_s_each_way' must be between"),
    (_with({"bytes_per_s_each_way": float("inf")}), "'interconnect.scale_up.bytes_per_s_each_way' must be between"),
    (_with({"bytes_per_s_each_way": "450GB/s"}), "must be a number of bytes/s"),
    (_with({"latency_s": 5}), "'interconnect.scale_up.latency_s' must be between 0 and 1 seconds"),
    (_with({"domain_gpus": 0}), "'interconnect.scale_up.domain_gpus' must be between 1"),
    (_with({"domain_gpus": 7.5}), "whole number of GPUs"),
    (_with({"topology": "torus"}), "'interconnect.scale_up.topology' must be one of switch, mesh"),
    (_with({"topology": "mesh", "domain_gpus": 1}), "a mesh"),
    (_with({"bandwidth": 1}), "unknown field 'interconnect.scale_up.bandwidth'"),
    (_with({"note": 3}), "'interconnect.scale_up.note' must be a string"),
    (_with(scale_out={"bytes_per_s_each_way": 5e10}), "missing field 'interconnect.scale_out.latency_s'"),
    (_with(scale_out=[1]), "'interconnect.scale_out' must be an object"),
    (_with(scale_upp={}), "unknown field 'interconnect.scale_upp'"),
    (_with(note=["x"]), "'interconnect.note' must be a string"),
    (_with({"all_reduce": "nvls", "all_reduce_note": "n"}), "'interconnect.scale_up.all_reduce' must be one of ring"),
    (_with({"all_reduce": "in_network"}), "'interconnect.scale_up.all_reduce_note' (its source) go together"),
    (_with({"all_reduce_note": 3}), "'interconnect.scale_up.all_reduce_note' must be a string"),
    (_with(scale_out={"bytes_per_s_each_way": 5e10, "latency_s": 1e-5, "url": "u", "note": "n",
                      "all_reduce": "in_network"}), "unknown field 'interconnect.scale_out.all_reduce'"),
])
def test_bad_link_fields_are_one_line(data, message, tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data).replace("Infinity", "1e999"))      # JSON's overflow to infinity
    code, out, err = run(capsys, "decode", "-p", "toy", "--context", "4", "--device-file", str(path))
    assert code == 2 and out == "" and one_error(err, message), err


# --- memory as the device exposes it (source.memory_note), and `devices list` -------------------------------

def _exposed_mib(note: str) -> int | None:
    """The MiB total a profile's memory note quotes from nvidia-smi (None where it quotes another tool)."""
    import re

    found = re.match(r"exposed: nvidia-smi reports (\d+)MiB total", note)
    return int(found.group(1)) if found else None


@pytest.mark.parametrize("name", devices.names())
def test_each_profile_says_where_its_memory_figure_comes_from(name):
    device = devices.load(name)
    note = device.source.get("memory_note", "")
    assert note.startswith(("exposed:", "marketing:")), (name, note)     # the driver's figure, or said it is not
    assert device.source.get("memory_url", "").startswith("https://"), name
    mib = _exposed_mib(note)
    if mib is not None:            # the bytes are the quoted nvidia-smi total, to the byte
        assert device.mem_bytes == mib * 2**20, name


def test_80_gb_class_parts_hold_more_than_80e9_bytes():
    """The datasheets' '80GB' is decimal marketing; the driver exposes more (85.5-85.9e9): memory fits against that."""
    for name in ("a100", "h100"):
        assert 85e9 < devices.load(name).mem_bytes <= 80 * 2**30, name


def test_devices_list_is_the_devices_listing(capsys):
    for fmt in ([], ["-f", "csv"], ["-f", "json"], ["--wide"]):
        plain = run(capsys, "devices", *fmt)
        alias = run(capsys, "devices", "list", *fmt)
        assert plain[0] == alias[0] == 0 and plain[1] == alias[1] and "h100" in alias[1], fmt


@pytest.mark.parametrize("name", devices.names())
def test_dense_peaks_are_half_the_printed_with_sparsity_figure(name):
    """Where a profile quotes the vendor's 'with sparsity' figure for a dtype it stores, the stored peak is its half."""
    import re

    device = devices.load(name)
    for dtype, printed in device.source.get("printed_with_sparsity", {}).items():
        if dtype not in device.peak_flops:
            continue                                   # a per-system figure (b200), not one of the peaks
        sparse = float(re.findall(r"\d[\d,]*(?:\.\d+)?", printed)[-1].replace(",", "")) * 1e12   # the last number
        assert device.peak_flops[dtype] == pytest.approx(sparse / 2, rel=0.02), (name, dtype, printed)
