"""--prom-file (fixtures/plugins/reporting/prom.py): node_exporter's textfile-collector file,
written atomically at the end of every run that wrote its reports, parsed here with
prometheus_client's own parser."""
from __future__ import annotations

import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nested_run import make_tree, pytest_run, results
from reports import model


def _parse(text: str) -> dict[str, dict[tuple, float]]:
    """{metric: {sorted label items: value}}"""
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(text):
        assert fam.type == "gauge", fam
        assert fam.documentation, fam.name
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def _check_common(m: dict, verdict: str, exitstatus: int, counts: dict):
    assert {k[0][1]: v for k, v in m["tmac_verdict"].items()} == {
        v: (1.0 if v == verdict else 0.0) for v in model.VERDICTS}
    assert {k[0][1]: v for k, v in m["tmac_cases"].items()} == {s: float(counts.get(s, 0)) for s in model.STATES}
    assert m["tmac_exit_status"][()] == exitstatus
    assert 0 <= m["tmac_run_duration_seconds"][()] < 300
    assert abs(m["tmac_run_end_timestamp_seconds"][()] - time.time()) < 300
    (labels, one), = m["tmac_info"].items()
    info = dict(labels)
    assert one == 1 and set(info) == {"driver", "cuda_driver", "gpus", "sweep", "host"}
    assert info["sweep"] == "standard"


TREE = '''
import os
import time
import pytest


def test_a():
    pass


def test_b():
    pass


def test_c():
    if os.environ.get("TMAC_TEST_MODE") == "fail":
        assert False, "broken"
    if os.environ.get("TMAC_TEST_MODE") == "interrupt":
        raise KeyboardInterrupt
    if os.environ.get("TMAC_TEST_MODE") == "hang":
        time.sleep(60)


@pytest.mark.skip(reason="not here")
def test_d():
    pass
'''


@pytest.mark.parametrize("mode,workers,verdict,exitstatus,counts", [
    ("pass", "2", "NOT MEASURED", 0, {"passed": 3, "skipped": 2}),      # no GPU here: the node case skips
    ("fail", "0", "FAIL", 1, {"passed": 2, "failed": 1, "skipped": 2}),
    ("interrupt", "0", "INTERRUPTED", 2, {"passed": 2, "skipped": 1}),   # test_d never ran
    ("hang", "0", "TIMED OUT", 2, {"passed": 2, "skipped": 1}),          # --run-timeout=8
])
def test_prom_file_of_a_run(tmp_path, mode, workers, verdict, exitstatus, counts):
    root = make_tree(tmp_path / "t", TREE)
    out, prom = tmp_path / "out", tmp_path / "textfile" / "tmac.prom"
    prom.parent.mkdir()
    prom.write_text("stale\n")
    cp = pytest_run(root, f"--report-dir={out}", f"--prom-file={prom}", "-n", workers, "--require-gpus=0",
                    *(["--run-timeout=8"] if mode == "hang" else []), env={"TMAC_TEST_MODE": mode})
    assert cp.returncode == exitstatus, cp.stdout[-3000:] + cp.stderr[-2000:]
    res = results(out)
    assert res["verdict"].startswith(verdict)
    _check_common(_parse(prom.read_text()), verdict, exitstatus, counts)
    assert sorted(p.name for p in prom.parent.iterdir()) == ["tmac.prom"]     # no temporary file left


def test_prom_file_from_the_environment(tmp_path):
    root = make_tree(tmp_path / "t", "def test_ok():\n    pass\n")
    prom = tmp_path / "env.prom"
    cp = pytest_run(root, f"--report-dir={tmp_path / 'out'}", "-n", "0", "--require-gpus=0",
                    env={"TMA_PROM_FILE": str(prom)})
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-2000:]
    assert _parse(prom.read_text())["tmac_exit_status"][()] == 0


@pytest.mark.parametrize("arg,env,line", [
    ("--prom-file={tmp}/missing/x.prom", {}, "ERROR: --prom-file: {tmp}/missing/x.prom: the folder {tmp}/missing does not exist"),
    ("--prom-file={tmp}/a-file/x.prom", {}, "ERROR: --prom-file: {tmp}/a-file/x.prom: {tmp}/a-file is not a folder"),
    ("--prom-file={tmp}", {}, "ERROR: --prom-file: {tmp} is a folder"),
    (None, {"TMA_PROM_FILE": "{tmp}/missing/x.prom"}, "ERROR: TMA_PROM_FILE: {tmp}/missing/x.prom: the folder"),
], ids=["no-folder", "folder-is-a-file", "is-a-folder", "env"])
def test_bad_prom_file_is_a_usage_error(tmp_path, arg, env, line):
    (tmp_path / "a-file").write_text("x")
    root = make_tree(tmp_path / "t", "def test_ok():\n    pass\n")
    sub = {"tmp": str(tmp_path)}
    args = [arg.format(**sub)] if arg else []
    cp = pytest_run(root, *args, "-n", "0", env={k: v.format(**sub) for k, v in env.items()})
    assert cp.returncode == 4, cp.stdout + cp.stderr
    errors = [ln for ln in cp.stderr.splitlines() if ln.startswith("ERROR:")]
    assert len(errors) == 1 and errors[0].startswith(line.format(**sub)), cp.stderr
    assert "Traceback" not in cp.stdout + cp.stderr and "passed" not in cp.stdout


def test_label_values_are_escaped():
    from fixtures.plugins.reporting import prom
    assert prom.escape('a\\b"c\nd') == 'a\\\\b\\"c\\nd'
    assert prom.escape("plain 580.65.06") == "plain 580.65.06"
    weird = 'no"de\\7\nx'
    run = model.Run(source="x", cases={"suites/test_a.py::t": model.CaseResult("suites/test_a.py::t", model.PASSED)},
                    env={"sweep": "smoke", "driver": {"cuda_driver_version": 13000, "kernel_module_version": "580.65.06"},
                         "gpus": [{"name": "NVIDIA H100 80GB HBM3"}, {"name": "NVIDIA H100 80GB HBM3"}]},
                    meta={"run_id": "r-1", "host": weird, "duration_s": 12.5, "gpu": {"usable": 2}})
    verdict = model.run_verdict(run)
    assert verdict.status == "PASS"
    m = _parse(prom.render(run, verdict, 0, now=1700000000.25))
    assert m["tmac_verdict"][(("verdict", "PASS"),)] == 1
    assert m["tmac_run_duration_seconds"][()] == 12.5
    assert m["tmac_run_end_timestamp_seconds"][()] == 1700000000.25
    info = dict(next(iter(m["tmac_info"])))
    assert info == {"driver": "580.65.06", "cuda_driver": "13000", "gpus": "2 x NVIDIA H100 80GB HBM3",
                    "sweep": "smoke", "host": weird}
