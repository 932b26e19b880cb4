"""The self-tests leave their process as they found it (issue 56): no signal disposition,
environment variable or working folder changed, no run folder added to the checkout's
reports/out. fixtures.plugins.run_control.leak_guard checks it around every self-test;
these show that it does, that it names what a test left, and that a pytest run inside
this process (``pytest.main()``: fixtures.repro.find_case collects a case so) gives back
the signal handlers it found (its controller left SIGINT, SIGTERM and SIGHUP ignored: every
nested run started after it inherited them through exec and outlived its SIGTERM)."""
from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys

import pytest

from fixtures import repro
from fixtures.cuda_layer import cuda_env
from fixtures.plugins.run_control import leak_guard
from reports.model import NODE_CASE

from nested_run import REPO, make_tree, plugin_env, pytest_argv

STOPS = ("SIGINT", "SIGTERM", "SIGHUP")


def test_the_guard_watches_every_self_test(pytestconfig):
    """This very run (a run of the self-tests, serial or a worker of -n) has the guard, on
    the checkout's reports/out."""
    guard = pytestconfig.pluginmanager.get_plugin(leak_guard.NAME)
    assert isinstance(guard, leak_guard.LeakGuard), pytestconfig.pluginmanager.list_name_plugin()
    assert guard.reports_out == REPO / "reports" / "out"


def test_leaks_names_what_changed_and_restore_puts_it_back(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    before = leak_guard.snapshot(out)
    saved = signal.getsignal(signal.SIGUSR2)
    try:
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        os.environ["TMAC_LEAK_GUARD_PROBE"] = "1"
        os.chdir(tmp_path)
        ours, foreign = f"20260101T000000Z-h-{os.getpid()}", "20260101T000000Z-h-1"
        (out / ours).mkdir()
        (out / foreign).mkdir()
        (out / "latest").symlink_to(ours)
        left = leak_guard.leaks(before, leak_guard.snapshot(out), {foreign})
        leak_guard.restore(before)
        after = leak_guard.snapshot(out)
    finally:
        signal.signal(signal.SIGUSR2, saved)
        os.environ.pop("TMAC_LEAK_GUARD_PROBE", None)
        os.chdir(before.cwd)
    assert left == [f"signal SIGUSR2: SIG_IGN (was {leak_guard.describe(saved)})",
                    "environment variable TMAC_LEAK_GUARD_PROBE='1' set (was unset)",
                    f"working folder {tmp_path} (was {before.cwd})",
                    f"new in reports/out: {ours} (a nested run without --report-dir?)"], left
    assert after.signals == before.signals and after.environ == before.environ and after.cwd == before.cwd


def test_a_run_folder_is_told_by_its_runs_process():
    """A new run folder is the test's where its run (the pid its name ends with) is this
    process or a descendant; another process's run (someone's conformance run in the same
    checkout, a test of another xdist worker) is not; one that ended cannot be told."""
    assert leak_guard.descends_from(os.getpid(), os.getpid()) is True
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert leak_guard.descends_from(child.pid, os.getpid()) is True
        assert leak_guard.descends_from(os.getpid(), child.pid) is False
    finally:
        child.kill()
        child.wait()
    assert leak_guard.descends_from(child.pid, os.getpid()) is None


LEAKY = '''
    import os, signal

    def test_ignores_sigterm():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    def test_sets_a_variable():
        os.environ["TMAC_LEAKED"] = "yes"

    def test_moves_away(tmp_path):
        os.chdir(tmp_path)

    def test_writes_a_run_folder():
        # as a nested run without --report-dir does: a folder named by this process's pid
        os.makedirs(os.path.join(os.path.dirname(__file__), "reports", "out",
                                 f"20260101T000000Z-h-{os.getpid()}"))

    def test_after_them():
        assert signal.getsignal(signal.SIGTERM) != signal.SIG_IGN
        assert "TMAC_LEAKED" not in os.environ
        assert os.getcwd() == os.path.dirname(__file__)

    def test_clean(tmp_path, monkeypatch):
        monkeypatch.setenv("TMAC_PUT_BACK", "1")      # put back by its teardown: no leak
        monkeypatch.chdir(tmp_path)
'''

GUARD_ON = '''
from pathlib import Path
from fixtures.plugins.run_control.leak_guard import LeakGuard

def pytest_configure(config):
    config.pluginmanager.register(LeakGuard(Path(config.rootpath) / "reports" / "out"), "tmac-leak-guard")
'''


def test_the_guard_errors_a_test_that_leaves_something_behind(tmp_path):
    """A nested run with the guard on (its own reports/out): each leaking test errors at
    its teardown naming what it left; the tests after it find everything put back."""
    root = make_tree(tmp_path / "t", LEAKY)
    (root / "guardon.py").write_text(GUARD_ON)
    (root / "reports" / "out").mkdir(parents=True)
    out = tmp_path / "out"
    cp = subprocess.run(pytest_argv("-n", "0", "-p", "guardon", f"--report-dir={out}"),
                        cwd=root, env=plugin_env(root), capture_output=True, text=True, timeout=240)
    text = cp.stdout + cp.stderr
    assert cp.returncode == 1, text[-4000:]
    errors = {ln.split()[1] for ln in cp.stdout.splitlines() if ln.startswith("ERROR ")}
    assert errors == {f"test_tiny.py::{n}" for n in ("test_ignores_sigterm", "test_sets_a_variable",
                                                      "test_moves_away", "test_writes_a_run_folder")}, text[-4000:]
    for line in ("test_tiny.py::test_ignores_sigterm left behind", "signal SIGTERM: SIG_IGN (was ",
                 "environment variable TMAC_LEAKED='yes' set (was unset)",
                 "working folder ", "new in reports/out: 20260101T000000Z-h-"):
        assert line in text, (line, text[-4000:])
    assert "FAILED" not in cp.stdout, text[-4000:]        # test_after_them found it all put back
    assert "4 passed" not in cp.stdout and "6 passed" in cp.stdout and "4 errors" in cp.stdout, cp.stdout[-1500:]


def _in_process(*args: str) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:xdist", *args])


def _handlers() -> dict:
    return {name: signal.getsignal(getattr(signal, name)) for name in STOPS}


def test_a_collection_inside_this_process_gives_back_the_signal_handlers():
    """fixtures.repro.find_case collects a case with ``pytest.main()`` in this process:
    the handlers of SIGINT, SIGTERM and SIGHUP are then the ones it found. Its controller
    left them SIG_IGN where this process was pytest's own (a serial run of the
    self-tests): every nested run started after it inherited that through exec, and the
    self-tests that SIGTERM a nested run waited out their 60 s (tests/test_signals.py)."""
    found = _handlers()
    assert repro.find_case(NODE_CASE, "smoke").function == "test_usable_gpus"
    assert _handlers() == found


@pytest.mark.skipif(cuda_env.probe().available,
                    reason="a GPU node: a whole run in this process would open the GPUs this run holds")
def test_a_whole_run_inside_this_process_gives_back_the_signal_handlers(tmp_path):
    """``pytest.main()`` in this process, a run that writes its reports (its controller
    handles the stop signals from its configure to its unconfigure): the handlers it found
    are back after it."""
    found = _handlers()
    root = make_tree(tmp_path / "t", "def test_ok():\n    pass\n")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = pytest.main([str(root), "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                            "--rootdir", str(root), "--import-mode=importlib",
                            f"--report-dir={tmp_path / 'out'}", "--require-gpus=0"])
    assert code == 0 and (tmp_path / "out" / "results.json").is_file(), code
    assert _handlers() == found
