"""`pytest /path/to/checkout` from another folder runs what `pytest` in the checkout runs:
the conformance suites (testpaths), not the harness's self-tests, which run only when an
argument names `tests` or something in it (fixtures.plugins.run_control.harness.pytest_ignore_collect)."""
from __future__ import annotations

import os
import subprocess
import sys

from nested_run import REPO


def collected(cwd, *args: str) -> list[str]:
    env = dict(os.environ)
    for k in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_ADDOPTS", "TMA_REQUIRE_GPUS"):
        env.pop(k, None)
    cp = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0",
                         "-p", "no:cacheprovider", *args], cwd=cwd, env=env,
                        capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    return [line for line in cp.stdout.splitlines() if "::" in line]


def test_the_checkout_named_from_elsewhere_collects_the_suites(tmp_path):
    here = collected(REPO, "--sweep", "smoke")
    elsewhere = collected(tmp_path, str(REPO), "--sweep", "smoke")
    assert here and all(i.startswith("suites/") for i in here), here[:5]
    assert elsewhere == here, (f"{len(elsewhere)} ids from another folder, {len(here)} in the "
                               f"checkout; first extra: "
                               f"{sorted(set(elsewhere) - set(here))[:3]}")


def test_the_self_tests_run_when_named(tmp_path):
    """Named from anywhere, as a folder or a file (with or without a test's name)."""
    folder = collected(tmp_path, str(REPO / "tests"), "-k", "enums or structure")
    assert folder and all(i.startswith("tests/") for i in folder), folder[:5]
    assert {i.split("::")[0] for i in folder} >= {"tests/test_enums.py", "tests/test_structure.py"}
    one = collected(REPO, "tests/test_enums.py")
    assert one and all(i.startswith("tests/test_enums.py::") for i in one), one
    name = one[0].split("::")[1].split("[")[0]
    assert collected(tmp_path, f"{REPO / 'tests' / 'test_enums.py'}::{name}") == [
        i for i in one if i.split("::")[1].split("[")[0] == name]


def test_the_self_tests_report_into_a_temporary_folder(tmp_path):
    """A run of the self-tests (its paths in the checkout's tests/) writes its reports
    into the system's temporary folder, never into the checkout's reports/out (where it
    moved `latest` away from the user's last conformance run); a conformance run without
    --report-dir still writes there (fixtures.plugins.reporting.run_reports.default_report_dir)."""
    import tempfile
    from pathlib import Path
    from types import SimpleNamespace

    from fixtures.plugins.reporting.run_reports import default_report_dir, is_self_test_run

    env = dict(os.environ)
    for k in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_ADDOPTS", "TMA_REQUIRE_GPUS"):
        env.pop(k, None)
    cp = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                         str(REPO / "tests" / "test_enums.py")], cwd=tmp_path, env=env,
                        capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    folder = Path(next(ln for ln in cp.stdout.splitlines() if ln.startswith("reports: ")).split()[1])
    assert folder.parent == Path(tempfile.gettempdir()) / "tmac-self-tests" and (folder / "results.json").is_file()
    assert not (REPO / "reports" / "out" / folder.name).exists()

    def config(*args, where=REPO):
        return SimpleNamespace(args=list(args), invocation_params=SimpleNamespace(dir=where),
                               rootpath=REPO)
    assert is_self_test_run(config("tests")) and is_self_test_run(config("tests/test_enums.py::test_x"))
    assert is_self_test_run(config(str(REPO / "tests"), where=tmp_path))
    for args in (("suites",), (str(REPO),), ("tests", "suites"), ()):
        assert not is_self_test_run(config(*args)), args
    assert default_report_dir(config("suites"), "r1") == REPO / "reports" / "out" / "r1"
