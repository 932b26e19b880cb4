"""The load axes (mode, cluster, mask, map) parsed from case ids, and ``reports diff``'s
by_axis breakdown on hand-made runs (CPU only); the matrix's tables: test_reports_matrix.py."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reports import axes
from reports.__main__ import main

from reports_helpers import env, junit, run_dir

ROOT = Path(__file__).resolve().parents[1]
MC = "suites/test_multicast.py::test_multicast"
IM = "suites/test_im2col_load.py::test_im2col_load"
TL = "suites/test_tma_load.py::test_tma_load"


def test_the_issues_example_ids():
    assert axes.parse(f"{MC}[tile-cl4-mask0b1011-src0-f16-r2-box64x8-swz128-zerofill-interior]") == {
        "mode": "tile", "cluster": "4", "mask": "sparse", "map": "host",
        "dtype": "f16", "rank": "2", "swizzle": "swz128", "fill": "zerofill"}
    assert axes.parse(f"{MC}[tile-cl16-mask0b1111111111111111-src3-u8-r3-box32x2x2-swz0-nanfill-dev-zeros]") == {
        "mode": "tile", "cluster": "16", "mask": "all", "map": "dev-zeros",
        "dtype": "u8", "rank": "3", "swizzle": "swz0", "fill": "nanfill"}
    assert axes.parse(f"{IM}[f32-r4-im2col-cpp16-ppc32-swz64-il0-zerofill-lom1m1-hi00-es1-offw1h0-straddle-lo-"
                      "dev-copy]") == {
        "mode": "im2col", "map": "dev-copy",
        "dtype": "f32", "rank": "4", "swizzle": "swz64", "interleave": "il0", "fill": "zerofill"}


@pytest.mark.parametrize("case_id,mode", [
    (f"{MC}[tile-cl2-mask0b11-src0-f16-r2]", "tile"),
    (f"{IM}[f16-r3-im2col-cpp8]", "im2col"),
    (f"{IM}[f16-r3-im2colw-cpp8]", "im2col-w"),          # the id's fragment, not the function's name
    (f"{IM}[f16-r3-im2colw128-cpp8]", "im2col-w128"),
    (f"{TL}[f16-r2-box64x8-swz128-il0-zerofill-es1-interior]", "tile"),        # the file's mode
    (f"{TL}_trap[trap-f16-r2-box64x8-swz0-il0-zerofill-c0=4]", "tile"),
    ("suites/test_tma_load.py::test_large_global_dim[u8-2^31]", "tile"),
    (f"{MC}_trap[cl4-f16-r2]", "tile"),
    ("suites/test_im2col_load.py::test_im2col_load_trap[f32-r4-c0=4]", "im2col"),
    ("suites/test_multicast.py", "tile"),                                       # the file's collection error
    ("/ci/checkout/suites/test_im2col_load.py::test_im2col_load[u8-r5]", "im2col"),
    # the host-encoding suite's own spellings (tiled, im2col, im2colwide + wideW / wideW128)
    ("suites/test_host_encode.py::test_rule_case[tiled-f16-r3-box_dim.range-d2-eq257-out]", "tile"),
    ("suites/test_host_encode.py::test_rule_case[im2col-f16-r5-c8-px64-il16-swz0]", "im2col"),
    ("suites/test_host_encode.py::test_rule_case[im2colwide-f16-r3-c8-px128-wideW-wm1_m1-il16-swz64]", "im2col-w"),
    ("suites/test_host_encode.py::test_rule_case[im2colwide-b6x16p32-r3-c128-px128-wideW128-wm1_m1]", "im2col-w128"),
    # other suites: no mode of their own
    ("suites/test_device_encode.py::test_replace_field[replace-elemtype=bf16-from-zeros-shared-ptxwrap]", None),
    ("suites/test_fence_scopes.py::test_publish[scope-gpu]", None),
    ("suites/test_host_encode.py::test_encode_is_deterministic[seed3]", None),
    ("suites/test_node.py::test_usable_gpus", None),
    ("node::usable-gpus", None),
    # a word that only contains a mode is not one
    ("suites/test_host_encode.py::test_rule_case[tiles-im2colx-untile]", None),
])
def test_mode(case_id, mode):
    assert axes.parse(case_id).get("mode") == mode


@pytest.mark.parametrize("frag,cluster", [("cl1", "1"), ("cl2", "2"), ("cl4", "4"), ("cl8", "8"), ("cl16", "16"),
                                          ("cl0", None), ("cl17", None), ("cl32", None), ("cls4", None),
                                          ("xcl4", None)])
def test_cluster(frag, cluster):
    assert axes.parse(f"{MC}[tile-{frag}-f16]").get("cluster") == cluster


@pytest.mark.parametrize("bits,cluster,kind", [
    ("11", None, "all"), ("1111", None, "all"), ("1" * 16, None, "all"), ("1", None, "all"),
    ("01", None, "one"), ("1000", None, "one"), ("0000000000000001", None, "one"),
    ("1011", None, "sparse"), ("0110", None, "sparse"), ("10101010", None, "sparse"),
    ("0000", None, "sparse"),
    # the cluster size from cl{N}: all CTAs only when there is one digit per CTA
    ("111", 4, "sparse"), ("1111", 4, "all"), ("0001", 4, "one"),
])
def test_mask_kind(bits, cluster, kind):
    assert axes.mask_kind(bits, cluster) == kind


@pytest.mark.parametrize("frag,cluster,kind", [
    ("cl4-mask0b1111", "4", "all"), ("cl4-mask0b0100", "4", "one"), ("cl4-mask0b1011", "4", "sparse"),
    ("cl8-mask0b11111111", "8", "all"), ("cl8-mask0b1111", "8", "sparse"),      # 4 digits of a cluster of 8
    ("mask0b11", None, "all"),                                                  # no cl: one digit per CTA
    ("cl2-mask0b", "2", None), ("cl2-mask0b12", "2", None), ("cl2-mask11", "2", None),
])
def test_mask_from_the_id(frag, cluster, kind):
    p = axes.parse(f"{MC}[tile-{frag}-src0-f16-r2]")
    assert (p.get("cluster"), p.get("mask")) == (cluster, kind)


@pytest.mark.parametrize("case_id,map_", [
    (f"{MC}[tile-cl2-mask0b11-src0-f16-r2-swz0-zerofill-interior]", "host"),
    (f"{MC}[tile-cl2-mask0b11-src0-f16-r2-swz0-zerofill-interior-dev-template]", "dev-template"),
    (f"{MC}[tile-cl2-mask0b11-src0-f16-r2-swz0-zerofill-interior-dev-zeros]", "dev-zeros"),
    (f"{IM}[f32-r4-im2col-cpp16-straddle-lo-dev-copy]", "dev-copy"),
    (f"{IM}[f32-r4-im2col-cpp16-straddle-lo]", "host"),
    (f"{TL}[f16-r2-box64x8-swz128-il0-zerofill-es1-interior]", "host"),
    (f"{MC}[tile-cl2-mask0b11-dev-templates]", "host"),                # not the fragment
    ("suites/test_device_encode.py::test_whole_map[from-zeros-dev-side]", None),   # not a load suite
    ("suites/test_host_encode.py::test_rule_case[tiled-f16-r3]", None),
    ("suites/test_device_encode.py::test_x[f16-dev-zeros]", "dev-zeros"),  # the fragment counts anywhere
])
def test_map(case_id, map_):
    assert axes.parse(case_id).get("map") == map_


def test_new_axes_have_an_order():
    assert axes.AXES[-4:] == ("mode", "cluster", "mask", "map")
    assert axes.AXES[:7] == ("dtype", "swizzle", "interleave", "fill", "rank", "scope", "l2")
    assert sorted(["16", "2", "-", "4", "1", "8"], key=lambda v: axes.sort_key("cluster", v)) == \
        ["1", "2", "4", "8", "16", "-"]
    assert sorted(["sparse", "-", "one", "all"], key=lambda v: axes.sort_key("mask", v)) == \
        ["all", "one", "sparse", "-"]
    assert sorted(["dev-copy", "host", "dev-zeros", "dev-template"], key=lambda v: axes.sort_key("map", v)) == \
        ["host", "dev-template", "dev-zeros", "dev-copy"]
    assert sorted(["im2col-w128", "im2col", "tile", "im2col-w"], key=lambda v: axes.sort_key("mode", v)) == \
        ["tile", "im2col", "im2col-w", "im2col-w128"]


def test_importable_without_fixtures_and_its_fallback_lists_match():
    """The report tools run outside the harness too: with ``fixtures`` unimportable the module
    takes its own lists, which must be the vocabulary's."""
    code = ("import sys, json; sys.modules['fixtures'] = None; from reports import axes; "
            "print(json.dumps([axes._DTYPES, axes._SWZ, axes._IL, axes._FILL, axes.AXES, "
            "axes.parse('suites/test_multicast.py::test_multicast[tile-cl4-mask0b0010-src1-f16-r2-dev-template]')]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    dtypes, swz, il, fill, names, parsed = json.loads(out)
    assert sorted(dtypes) == sorted(axes._DTYPES) and swz == axes._SWZ and il == axes._IL and fill == axes._FILL
    assert tuple(names) == axes.AXES
    assert parsed == {"mode": "tile", "cluster": "4", "mask": "one", "map": "dev-template", "dtype": "f16",
                      "rank": "2"}


# ---------------------------------------------------------------- reports diff: by_axis

M4 = f"{MC}[tile-cl4-mask0b1011-src0-f16-r2-box64x8-swz128-zerofill-interior]"
M4D = f"{MC}[tile-cl4-mask0b1111-src1-f16-r2-box64x8-swz128-zerofill-interior-dev-zeros]"
M2 = f"{MC}[tile-cl2-mask0b01-src0-u8-r3-box32x2x2-swz0-nanfill-edge]"
I1 = f"{IM}[f32-r4-im2col-cpp16-ppc32-swz64-il0-zerofill-lom1m1-hi00-es1-offw1h0-straddle-lo]"
I1C = f"{IM}[f32-r4-im2col-cpp16-ppc32-swz64-il0-zerofill-lom1m1-hi00-es1-offw1h0-straddle-lo-dev-copy]"
FS = "suites/test_fence_scopes.py::test_publish[scope-gpu]"
TC = "suites/test_toolchain.py::test_builds"


def _diff(tmp_path, capsys, old_cases, new_cases):
    old = run_dir(tmp_path / "old", old_cases, env())
    new = run_dir(tmp_path / "new", new_cases, env())
    status = main(["diff", str(old), str(new), "--json", str(tmp_path / "d.json")])
    md = capsys.readouterr().out
    return status, json.loads((tmp_path / "d.json").read_text()), md


def test_by_axis_counts(tmp_path, capsys):
    status, d, md = _diff(tmp_path, capsys,
                          {M4: "passed", M4D: "failed", M2: "passed", I1: "passed", FS: "passed", TC: "passed"},
                          {M4: "failed", M4D: "passed", M2: {"state": "skipped", "message": "no GPU: x"},
                           I1C: "could-not-build", FS: "passed", TC: "passed"})
    assert status == 1
    ba = d["by_axis"]
    zero = {"regressions": 0, "fixes": 0, "new": 0, "removed": 0}

    def c(**k):
        return dict(zero, **k)
    # M4 failed, M2 skipped, I1C (new) could not build: 3 regressions; M4D fixed; I1 removed; I1C new
    assert ba["mode"] == {"tile": c(regressions=2, fixes=1), "im2col": c(regressions=1, new=1, removed=1)}
    assert ba["cluster"] == {"2": c(regressions=1), "4": c(regressions=1, fixes=1),
                             "-": c(regressions=1, new=1, removed=1)}
    assert ba["mask"] == {"all": c(fixes=1), "one": c(regressions=1), "sparse": c(regressions=1),
                          "-": c(regressions=1, new=1, removed=1)}
    assert ba["map"] == {"host": c(regressions=2, removed=1), "dev-zeros": c(fixes=1),
                         "dev-copy": c(regressions=1, new=1)}
    assert ba["dtype"] == {"u8": c(regressions=1), "f16": c(regressions=1, fixes=1),
                           "f32": c(regressions=1, new=1, removed=1)}
    # only the axes a changed case names: the unchanged fence case's scope is not one, l2 nobody names
    assert "scope" not in ba and "l2" not in ba
    assert list(ba) == [a for a in axes.AXES if a in ba]
    # every axis counts every changed case once per list
    for values in ba.values():
        assert sum(v["regressions"] for v in values.values()) == 3
        assert sum(v["fixes"] for v in values.values()) == 1
        assert sum(v["new"] for v in values.values()) == 1
        assert sum(v["removed"] for v in values.values()) == 1
    assert "### Changes by parameter axis" in md
    assert "| axis | value | regressions | fixes | new | removed |" in md
    assert "| mode | tile | **2** | 1 | 0 | 0 |" in md
    assert "|  | im2col | **1** | 0 | 1 | **1** |" in md
    assert "| mask | all | 0 | 1 | 0 | 0 |" in md
    assert "|  | dev-copy | **1** | 0 | 1 | 0 |" in md


def test_by_axis_accepts_and_counts_vanished_as_removed(tmp_path, capsys):
    status, d, _ = _diff(tmp_path, capsys, {M4: "passed", M2: "passed"}, {M4: "passed"})
    assert status == 1 and d["regressions"]["vanished"] == [{"id": M2, "old": "passed"}]
    assert d["by_axis"]["mask"] == {"one": {"regressions": 0, "fixes": 0, "new": 0, "removed": 1}}
    assert d["by_axis"]["cluster"] == {"2": {"regressions": 0, "fixes": 0, "new": 0, "removed": 1}}


def test_by_axis_empty_without_changes(tmp_path, capsys):
    status, d, md = _diff(tmp_path, capsys, {M4: "passed", FS: "failed"}, {M4: "passed", FS: "failed"})
    assert status == 0 and d["by_axis"] == {}
    assert "No changed cases." in md


def test_by_axis_empty_when_no_changed_case_names_an_axis(tmp_path, capsys):
    status, d, md = _diff(tmp_path, capsys, {M4: "passed", TC: "passed"}, {M4: "passed", TC: "failed"})
    assert status == 1 and d["by_axis"] == {}
    assert "No changed case names a parameter axis." in md


def test_by_axis_from_junit(tmp_path, capsys):
    """JUnit ids (classname + name) give the suite file back: the mode and map defaults hold."""
    old = junit(tmp_path / "old.xml", {I1: "passed", M2: "passed"})
    new = junit(tmp_path / "new.xml", {I1: "failed", M2: "passed"})
    assert main(["diff", str(old), str(new), "--json", str(tmp_path / "d.json")]) == 1
    capsys.readouterr()
    ba = json.loads((tmp_path / "d.json").read_text())["by_axis"]
    assert ba["mode"] == {"im2col": {"regressions": 1, "fixes": 0, "new": 0, "removed": 0}}
    assert ba["map"] == {"host": {"regressions": 1, "fixes": 0, "new": 0, "removed": 0}}
    assert "cluster" not in ba and "mask" not in ba
