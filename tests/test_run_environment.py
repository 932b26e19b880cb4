"""What the run sets for its own processes whatever a workload left in the environment
(fixtures/plugins/run_control/run_environment.py): JAX's preallocation off, a library
cache that cannot be written replaced by the run's own, each override recorded; what it
cannot fix is one line and exit status 4."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from fixtures.plugins.run_control import run_environment as re_
from nested_run import make_tree, pytest_run, results


def _config():
    return SimpleNamespace(stash={})


def test_a_jobs_preallocation_is_turned_off_and_recorded():
    env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "true", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.95"}
    config = _config()
    done = re_.apply(config, env)
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert done == {"XLA_PYTHON_CLIENT_PREALLOCATE": {"user": "true", "run": "false", "why": done[
        "XLA_PYTHON_CLIENT_PREALLOCATE"]["why"]}}
    assert re_.header_lines(config) == [f"overrode XLA_PYTHON_CLIENT_PREALLOCATE=true -> false "
                                        f"({done['XLA_PYTHON_CLIENT_PREALLOCATE']['why']})"]


def test_nothing_to_override_is_recorded_as_nothing(tmp_path):
    env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "False", "TRITON_CACHE_DIR": str(tmp_path)}
    assert re_.apply(_config(), env) == {}
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    assert re_.apply(_config(), env) == {}
    assert env == {"XDG_CACHE_HOME": str(tmp_path), "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
                   "TRITON_CACHE_DIR": str(tmp_path / "tma-conformance" / "triton")}   # the run's own


@pytest.mark.parametrize("name", sorted(re_.CACHE_VARIABLES))
def test_a_cache_folder_that_cannot_be_written_is_replaced_by_the_runs_own(tmp_path, name):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    env = {name: str(blocker / "cache"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    done = re_.apply(_config(), env)
    assert env[name] == str(tmp_path / "xdg" / "tma-conformance" / re_.OWN_CACHES / name.lower())
    assert done[name]["user"] == str(blocker / "cache") and "is not a writable folder" in done[name]["why"]


def test_what_the_run_cannot_fix_is_a_usage_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    env = {"TRITON_CACHE_DIR": str(blocker / "c"), "XDG_CACHE_HOME": str(blocker / "xdg")}
    with pytest.raises(pytest.UsageError, match=r"^TRITON_CACHE_DIR: Triton's kernel cache cannot be used"):
        re_.apply(_config(), env)


def test_a_run_under_a_jobs_environment(tmp_path):
    """A nested run with a JAX job's settings and an unwritable Triton cache: its workers
    see the run's values, environment.json records the user's and what was overridden."""
    tree = make_tree(tmp_path / "t", '''
        import os
        def test_sees_the_runs_environment():
            assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
            assert os.environ["TRITON_CACHE_DIR"].endswith("library-caches/triton_cache_dir")
    ''')
    out = tmp_path / "r"
    cp = pytest_run(tree, "-n", "2", f"--report-dir={out}", env={
        "XLA_PYTHON_CLIENT_PREALLOCATE": "true", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.95",
        "TRITON_CACHE_DIR": "/proc/no-such/cache", "XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-2000:]
    assert {c["id"]: c["state"] for c in results(out)["cases"]}["test_tiny.py::test_sees_the_runs_environment"] \
        == "passed"
    ev = json.loads((out / "environment.json").read_text())["environment_variables"]
    assert ev["user"]["XLA_PYTHON_CLIENT_PREALLOCATE"] == "true"
    assert ev["user"]["TRITON_CACHE_DIR"] == "/proc/no-such/cache"
    assert set(ev["overridden"]) == {"XLA_PYTHON_CLIENT_PREALLOCATE", "TRITON_CACHE_DIR"}
    assert "tmac environment: overrode XLA_PYTHON_CLIENT_PREALLOCATE=true -> false" in cp.stdout
