"""Running pytest on a small generated test tree, with the suite's conftest and plugins,
in a child process: how the self-tests see what a user sees (exit status, terminal,
report folder)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def make_tree(root: Path, tests: str, known: str | None = None, name: str = "test_tiny.py") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    # the tree's cases in the tree's order, whatever this environment auto-loads (a nested
    # run auto-loads plugins: pytest-randomly, installed for `-p randomly`, shuffled them)
    (root / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider -p no:randomly -ra\n")
    (root / "conftest.py").write_text((REPO / "conftest.py").read_text())
    (root / name).write_text(textwrap.dedent(tests))
    if known is not None:
        (root / "known_issues.toml").write_text(known)
    return root


# Lines of a fake-GPU plugin (after its cuda_env.probe is replaced): the driver probe of
# the environment fingerprint answers as a node's would, naming a driver and each GPU
# cuda_env.probe() sees (the node's case checks that it does:
# fixtures/plugins/run_control/node_fingerprint.py). FAKE_PROBE_LOST=1: as a probe that
# could not start (every driver field "unavailable: ...").
FAKE_PROBE = '''
import os as _os
from fixtures.cuda_layer import cuda_env as _cuda_env
from fixtures.plugins.environment import survey as _survey


def _fake_probe(timeout=60.0):
    if _os.environ.get("FAKE_PROBE_LOST"):
        r = "unavailable: driver probe exited 2: can't open file 'driver_probe.py'"
        return {"cuda_driver_version": r, "gpus": r, "peer_access": r, "kernel_module_version": r,
                "cuda_runtime": r}
    devs = _cuda_env.probe().devices
    gpus = [{"ordinal": d.ordinal, "name": d.name, "uuid": d.uuid or f"GPU-{d.ordinal:08x}-fake",
             "compute_capability": f"{d.cc[0]}.{d.cc[1]}", "arch": "sm_90a", "memory_bytes": 80 << 30,
             "pci_bus_id": d.pci_bus_id or f"0000:{0x18 + d.ordinal:02X}:00.0"} for d in devs]
    return {"cuda_driver_version": 13000, "kernel_module_version": "580.159.04", "gpus": gpus,
            "peer_access": {"ordinals": [d.ordinal for d in devs],
                            "matrix": [[None if i == j else True for j in devs] for i in devs]},
            "cuda_runtime": {"version": 13000, "source": "fake"}}


_survey.probe_driver = _fake_probe
'''


def started_tree(root: Path, started: Path, cases: int, sleep_s: float) -> Path:
    """A tree of ``cases`` cases; the fourth (``c3``) touches ``started``, then sleeps."""
    return make_tree(root, f'''
        import time, pytest
        @pytest.mark.parametrize("case", [f"c{{i}}" for i in range({cases})])
        def test_case(case):
            if case == "c3":
                open({str(started)!r}, "w").close()
                time.sleep({sleep_s})
    ''')


# A nested run gets Ctrl-C as a run started from a terminal does, whatever this process
# inherited: a self-test run started with SIGINT ignored (a background job of a script,
# which POSIX shells start with SIGINT and SIGQUIT ignored; some CI runners) passes the
# ignoring on through exec, and a run started so rightly keeps ignoring Ctrl-C (Python
# installs no handler, the controller none either, as under nohup for SIGHUP): every
# self-test that Ctrl-Cs a nested run failed (one whose run was stopped at its session's
# start waited out the 60 s its session's start took). So then the nested Python starts
# through this, which gives SIGINT its default back and execs the command.
_SIGINT_DEFAULT = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                   "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")


def python_argv(*args: str) -> list[str]:
    """The command of a nested ``python ARGS``, with Ctrl-C's default handling."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return [sys.executable, "-c", _SIGINT_DEFAULT, *args]
    return [sys.executable, *args]


def pytest_argv(*args: str) -> list[str]:
    """The command of a nested ``python -m pytest ARGS`` (``python_argv``)."""
    return python_argv("-m", "pytest", *args)


def child_env(env: dict | None = None) -> dict:
    """The environment of a nested run: the repository on the path, none of the outer
    run's xdist, addopts or GPU requirement."""
    e = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    for k in ("PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS", "TMA_REQUIRE_GPUS"):
        e.pop(k, None)
    e.update(env or {})
    return e


def plugin_env(root: Path, **env: str) -> dict:
    """``child_env`` with the tree ``root`` first on the path (its own plugins load with
    ``-p NAME``) and ``env``'s variables set."""
    e = child_env(env)
    e["PYTHONPATH"] = os.pathsep.join([str(root), e.get("PYTHONPATH", "")])
    return e


def pytest_start(root: Path, *args: str, **popen) -> subprocess.Popen:
    """A nested run started in the background (its own output unless ``stdout`` is given)."""
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.STDOUT)
    popen.setdefault("text", popen["stdout"] == subprocess.PIPE)
    return subprocess.Popen(pytest_argv(*args), cwd=root, env=child_env(), **popen)


def wait_for(path: Path, timeout: float = 60, proc: subprocess.Popen | None = None) -> bool:
    """Wait until ``path`` exists (or ``proc`` ended, or ``timeout`` passed)."""
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline and (proc is None or proc.poll() is None):
        time.sleep(0.05)
    return path.exists()


def pytest_run(root: Path, *args: str, timeout: float = 240, env: dict | None = None
               ) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(pytest_argv(*args), cwd=root, env=child_env(env),
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        raise AssertionError(f"pytest {' '.join(args)} did not end within {timeout:g} s; its output:\n"
                             f"{out[-6000:]}\n--- stderr ---\n{err[-3000:]}") from None


def report(folder: Path, name: str = "results.json") -> dict:
    """Report file ``name`` of run folder ``folder`` (or of a fleet folder: fleet.json),
    read and checked against its JSON Schema (reports/schemas): every report a self-test
    reads is one a script could parse. A results.json's ``cases`` come whole, one object
    per case with its own message, known issue and suite, as ``reports.model`` reads them
    (``cases_of``; the file writes each distinct text once)."""
    from reports.model import cases_of
    from reports.schemas import errors
    data = json.loads((folder / name).read_text())
    bad = errors(name, data)
    assert not bad, f"{folder / name} breaks its schema:\n" + "\n".join(bad)
    if name == "results.json":
        data["cases"] = [c.to_json() for c in cases_of(data, str(folder / name))]
    return data


def results(folder: Path) -> dict:
    """results.json of ``folder``, checked against its schema, as environment.json is when
    the run wrote it."""
    if (folder / "environment.json").exists():
        report(folder, "environment.json")
    return report(folder)


def states(folder: Path) -> dict[str, str]:
    return {c["id"]: c["state"] for c in results(folder)["cases"]}


def first_case_ids(tests, sweep: str = "smoke") -> dict[str, str]:
    """{test: the id of its first case} for each ``suites/FILE.py::TEST`` of ``tests``, as
    the checkout collects them at ``sweep`` (one nested ``--collect-only``; no report folder)."""
    cp = subprocess.run(pytest_argv("--collect-only", "-q", "-p", "no:cacheprovider", "--sweep", sweep,
                                    "--report-dir", os.devnull + "-none",
                                    *sorted({t.split("::")[0] for t in tests})),
                        cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=300)
    ids = [ln.strip() for ln in cp.stdout.splitlines() if "::" in ln]
    return {t: next(i for i in ids if i.startswith(t + "[")) for t in tests}
