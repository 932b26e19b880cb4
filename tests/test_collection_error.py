"""A collection error gives one verdict and one exit status with any -n: pytest stops
(INTERRUPTED, exit 2) and writes its reports, the error a failed case of phase
"collect". xdist used to run the other cases and end FAIL (exit 1)
(fixtures.plugins.run_control.controller._stop_xdist_at_collection_errors)."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from nested_run import make_tree, pytest_run, results


def broken_tree(root):
    root = make_tree(root, """
        import pytest

        @pytest.mark.parametrize("case", range(20))
        def test_ok(case):
            pass
        """)
    (root / "test_broken.py").write_text("import no_such_module_here\n\ndef test_x():\n    pass\n")
    return root


def run(root, out, *args):
    cp = pytest_run(root, f"--report-dir={out}", f"--junitxml={out / 'junit.xml'}", *args)
    res = results(out)
    junit = {(c.get("classname"), c.get("name")): c for c in ET.parse(out / "junit.xml").iter("testcase")}
    return cp, res, junit


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_collection_error_stops_the_run_with_any_n(tmp_path, workers):
    root = broken_tree(tmp_path / "t")
    cp, res, junit = run(root, tmp_path / "out", "-n", workers)
    assert cp.returncode == 2, cp.stdout[-3000:]
    assert res["exitstatus"] == 2
    assert res["verdict"] == ("INTERRUPTED: pytest stopped at 1 collection error(s) (0 passed, "
                              "1 failed or could not build, 2 cases reported)"), res["verdict"]
    assert res["status"] == "INTERRUPTED"          # the verdict's kind, for scripts
    cases = {c["id"]: c for c in res["cases"]}
    assert cases["test_broken.py"]["state"] == "failed" and cases["test_broken.py"]["phase"] == "collect"
    assert "no_such_module_here" in cases["test_broken.py"]["message"]
    assert not any(i.startswith("test_tiny.py") for i in cases), "a case ran after the collection error"
    broken = junit[("", "test_broken")]
    assert broken.find("error") is not None or broken.find("failure") is not None
    assert "Interrupted: 1 error during collection" in cp.stdout


@pytest.mark.parametrize("workers", ["0", "2"])
def test_continue_on_collection_errors_runs_the_rest_with_any_n(tmp_path, workers):
    root = broken_tree(tmp_path / "t")
    cp, res, _ = run(root, tmp_path / "out", "-n", workers, "--continue-on-collection-errors")
    assert cp.returncode == 1, cp.stdout[-3000:]
    assert res["verdict"] == "FAIL: 1 failed, 0 could not build (of 22)", res["verdict"]
    assert res["status"] == "FAIL"
