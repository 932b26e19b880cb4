"""Matrix rendering (Markdown + standalone HTML) and axis parsing on hand-made runs (CPU only)."""
from __future__ import annotations

from html.parser import HTMLParser

from reports import axes
from reports.__main__ import main
from reports.matrix import render
from reports.model import load_run

from reports_helpers import env, run_dir

CASES = {
    "suites/test_tma_load.py::test_load[f16-rank2-swz128-il0-zerofill]": "passed",
    "suites/test_tma_load.py::test_load[bf16-rank3-swz64-il0-nanfill]": {
        "state": "failed", "rule": "load.swizzle.pattern", "message": "bytes differ at offset 64"},
    "suites/test_tma_load.py::test_load[f32-rank5-swz0-il16-zerofill]": {
        "state": "known-issue", "message": "known-issue KI-7: x [evidence: https://example.invalid/7]",
        "known_issue": {"id": "KI-7", "reason": "x", "evidence": "https://example.invalid/7", "mode": "xfail"}},
    "suites/test_fence.py::test_publish[scope-gpu]": {"state": "skipped", "message": "no GPU: no driver",
                                                      "skip_kind": "no-gpu"},
    "suites/test_fence.py::test_two_gpus[scope-sys]": {"state": "skipped", "skip_kind": "needs-2-gpus",
                                                       "message": "needs 2 GPUs with tensor maps, found 1"},
    "suites/test_device_encode.py::test_replace[replace-elemtype=bf16-from-zeros-shared-ptxwrap]": {
        "state": "could-not-build", "message": "could-not-build: NVRTC could not build replace.cu"},
}
KNOWN = [{"id": "KI-7", "pattern": "*il16*", "reason": "x", "evidence": "https://example.invalid/7",
          "mode": "xfail", "cases": {"known-issue": 1}},
         {"id": "KI-8", "pattern": "*f64*", "reason": "y", "evidence": "text evidence", "mode": "skip",
          "cases": {}, "not_applied": "driver 13000 > driver_max 12080"}]


def test_axes_parse():
    p = axes.parse("suites/test_tma_load.py::test_load[bf16-rank3-swz64-il0-nanfill]")
    assert p == {"dtype": "bf16", "rank": "3", "swizzle": "swz64", "interleave": "il0", "fill": "nanfill",
                 "mode": "tile", "map": "host"}          # the tiled-load suite: tile loads, host maps
    assert axes.parse("suites/x.py::test[f32ftz-2d]") == {"dtype": "f32ftz", "rank": "2"}
    assert axes.parse("suites/test_fence.py::test_publish[scope-gpu]") == {"scope": "gpu"}
    assert axes.parse("suites/test_fence.py::test_publish[sys-scope-r4-l2-128]") == \
        {"scope": "sys", "rank": "4", "l2": "l2-128"}
    assert axes.parse("suites/test_toolchain.py::test_builds[tma_load.cu-sm_90a]") == {}
    assert axes.parse("suites/test_f16stuff.py::test_x[elemtype=f16]") == {"dtype": "f16"}  # path not parsed


def test_axes_parse_takes_each_axis_first_spelling():
    """An axis named twice takes its first spelling, whichever form (one fragment or two);
    the [...] parameters' mode before the test name's; a mask read against the cluster."""
    assert axes.parse("suites/x.py::t[r3-rank=4]") == {"rank": "3"}
    assert axes.parse("suites/x.py::t[rank=4-r3-5d]") == {"rank": "4"}
    assert axes.parse("suites/x.py::t[l2-64-l2none]") == {"l2": "l2-64"}
    assert axes.parse("suites/x.py::t[gpu-scope-scope-cta]") == {"scope": "gpu"}
    assert axes.parse("suites/x.py::t[rank=32-gpu_scopex-3dd]") == {}      # no whole spelling
    assert axes.parse("suites/x.py::test_tile[im2colw-f16]") == {"mode": "im2col-w", "dtype": "f16"}
    assert axes.parse("suites/x.py::test_tile[f16]") == {"mode": "tile", "dtype": "f16"}
    assert axes.parse("suites/x.py::t[cl2-mask0b11-dev-copy-dev-zeros]") == {
        "cluster": "2", "mask": "all", "map": "dev-copy"}
    assert axes.parse("suites/x.py::t[mask0b0110-cl8]")["mask"] == "sparse"


def test_matrix_markdown(tmp_path):
    run = load_run(run_dir(tmp_path / "r", CASES, env(), known=KNOWN))
    md, _ = render(run)
    assert "FAIL: 1 failed, 1 could not build" in md
    assert "| tma_load | 1 | **1** | 1 | 0 | 0 | 0 | 3 |" in md
    assert "| device_encode | 0 | 0 | 0 | 0 | **1** | 0 | 1 |" in md
    for header in ("| dtype |", "| swizzle |", "| interleave |", "| fill |", "| rank |", "| scope |"):
        assert header in md
    assert "| bf16 | 0 | **1** | 0 | 0 | **1** | 0 | 2 |" in md      # the load failure and the build failure
    assert "load.swizzle.pattern" in md and "bytes differ at offset 64" in md
    assert "[https://example.invalid/7](https://example.invalid/7)" in md
    assert "driver 13000 > driver_max 12080" in md
    assert "| needs-2-gpus | needs 2 GPUs with tensor maps, found 1 | 1 |" in md
    assert "NVIDIA H200" in md and "580.65.06" in md
    assert "judged on a second run" not in md


def test_matrix_counts_the_cases_judged_on_a_second_run(tmp_path):
    """A run some of whose cases were judged on a second run of their batch or call says
    how many in its summary."""
    cases = dict(CASES)
    cases["suites/test_tma_load.py::test_load[f16-rank2-swz128-il0-zerofill]"] = {
        "state": "passed", "ran_again": "its batch of 162 cases faulted (...): judged on that run"}
    md, _ = render(load_run(run_dir(tmp_path / "r", cases, env(), known=KNOWN)))
    assert "1 case(s) judged on a second run: their batch or call faulted first" in md


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.external = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        a = dict(attrs)
        if tag in ("script", "link", "img", "iframe") or (tag != "a" and any(
                (v or "").startswith(("http:", "https:", "//")) for v in a.values())):
            self.external.append((tag, a))


def test_matrix_html_is_standalone(tmp_path):
    d = run_dir(tmp_path / "r", CASES, env(), known=KNOWN)
    assert main(["matrix", str(d)]) == 0
    html = (d / "matrix.html").read_text()
    p = _Collect()
    p.feed(html)
    assert p.external == []
    assert "@import" not in html and "url(" not in html
    assert p.tags.count("table") >= 8
    assert '<a href="https://example.invalid/7">' in html
    assert 'class="st-failed"' in html and 'class="st-could-not-build"' in html


def test_matrix_from_junit_only(tmp_path):
    from reports_helpers import junit
    j = junit(tmp_path / "j.xml", {"suites/test_a.py::test_x[f16]": "passed",
                                   "suites/test_a.py::test_y[f32]": "known-issue"},
              {"tmac.driver.cuda_driver_version": "13000", "tmac.host": "n9"})
    assert main(["matrix", str(j), "--out", str(tmp_path / "m")]) == 0
    md = (tmp_path / "m" / "matrix.md").read_text()
    assert "n9" in md and "KI-1" in md and "| f32 | 0 | 0 | 1 | 0 | 0 | 0 | 1 |" in md


def test_matrix_unreadable_exits_2(tmp_path, capsys):
    assert main(["matrix", str(tmp_path / "nothing")]) == 2
    assert "unreadable input" in capsys.readouterr().err


LOADS = {
    "suites/test_multicast.py::test_multicast[tile-cl4-mask0b1011-src0-f16-r2-box64x8-swz128-zerofill-interior]":
        "passed",
    "suites/test_multicast.py::test_multicast[tile-cl4-mask0b1111-src2-f16-r2-box64x8-swz128-zerofill-interior]":
        {"state": "failed", "rule": "tma-load.multicast", "message": "CTA 3: bytes differ"},
    "suites/test_multicast.py::test_multicast[tile-cl16-mask0b1111111111111111-src3-u8-r3-box32x2x2-swz0-nanfill-"
    "dev-zeros]": {"state": "skipped", "skip_kind": "arch-lacks-feature",
                   "message": "cluster of 16: cuOccupancyMaxActiveClusters says 0"},
    "suites/test_multicast.py::test_multicast[tile-cl2-mask0b10-src1-u8-r3-box32x2x2-swz0-nanfill-dev-template]":
        "passed",
    "suites/test_im2col_load.py::test_im2col_load[f32-r4-im2col-cpp16-ppc32-swz64-il0-zerofill-lom1m1-hi00-es1-"
    "offw1h0-straddle-lo-dev-copy]": "passed",
    "suites/test_im2col_load.py::test_im2col_load[f32-r4-im2colw128-cpp16-ppc32-swz64-il0-zerofill]": "passed",
    "suites/test_im2col_load.py::test_im2col_load_trap[f32-r4-c0=4]": "passed",
    "suites/test_tma_load.py::test_tma_load[f16-r2-box64x8-swz128-il0-zerofill-es1-interior]": "passed",
    "suites/test_fence_scopes.py::test_publish[scope-gpu]": "passed",
}


def test_matrix_load_axes(tmp_path):
    """mode, cluster, mask and map get their tables, values in order and "-" last."""
    md, html = render(load_run(run_dir(tmp_path / "r", LOADS, env())))
    tables = {}
    for block in md.split("\n\n"):
        lines = block.strip().splitlines()
        if lines and lines[0].startswith("| ") and " | passed |" in lines[0]:
            tables[lines[0].split(" | ")[0][2:]] = lines[2:]
    for axis in ("mode", "cluster", "mask", "map"):
        assert axis in tables, axis
    # columns: passed, failed, known issue, skipped, could not build, harness error, total
    assert tables["mode"] == ["| tile | 3 | **1** | 0 | 1 | 0 | 0 | 5 |", "| im2col | 2 | 0 | 0 | 0 | 0 | 0 | 2 |",
                              "| im2col-w128 | 1 | 0 | 0 | 0 | 0 | 0 | 1 |", "| - | 1 | 0 | 0 | 0 | 0 | 0 | 1 |"]
    assert tables["cluster"] == ["| 2 | 1 | 0 | 0 | 0 | 0 | 0 | 1 |", "| 4 | 1 | **1** | 0 | 0 | 0 | 0 | 2 |",
                                 "| 16 | 0 | 0 | 0 | 1 | 0 | 0 | 1 |", "| - | 5 | 0 | 0 | 0 | 0 | 0 | 5 |"]
    assert tables["mask"] == ["| all | 0 | **1** | 0 | 1 | 0 | 0 | 2 |", "| one | 1 | 0 | 0 | 0 | 0 | 0 | 1 |",
                              "| sparse | 1 | 0 | 0 | 0 | 0 | 0 | 1 |", "| - | 5 | 0 | 0 | 0 | 0 | 0 | 5 |"]
    assert tables["map"] == ["| host | 4 | **1** | 0 | 0 | 0 | 0 | 5 |", "| dev-template | 1 | 0 | 0 | 0 | 0 | 0 | 1 |",
                             "| dev-zeros | 0 | 0 | 0 | 1 | 0 | 0 | 1 |", "| dev-copy | 1 | 0 | 0 | 0 | 0 | 0 | 1 |",
                             "| - | 1 | 0 | 0 | 0 | 0 | 0 | 1 |"]
    assert "Mask: all = every CTA of the cluster" in md
    assert "<th>cluster</th>" in html and "<th>mask</th>" in html


def test_matrix_without_axes_says_so(tmp_path):
    run = load_run(run_dir(tmp_path / "r", {"suites/test_toolchain.py::test_builds": "passed",
                                            "suites/test_device_encode.py::test_field_footprints_learned": "passed"},
                           env()))
    md, _ = render(run)
    assert ("No case id in this run names a data type, swizzle, interleave, fill, rank, scope, L2, load mode, "
            "cluster size, multicast mask or map value, and no case is of a load suite.") in md
    assert "| mode |" not in md and "| cluster |" not in md
