"""The harness's bytecode cache (fixtures/cuda_layer/paths.py ``keep_bytecode``): where the
environment turns Python's own bytecode cache off, as container images often do with
``PYTHONDONTWRITEBYTECODE``, every process of a run (the controller, the workers) keeps its
compiled bytecode in the harness's cache folder instead of compiling every module again."""
from __future__ import annotations

import json
import sys

import pytest

from nested_run import make_tree, pytest_run, report
from fixtures.cuda_layer import paths


@pytest.fixture
def bytecode_off(monkeypatch):
    """This process as Python starts under ``PYTHONDONTWRITEBYTECODE=1``; restored after."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setattr(sys, "pycache_prefix", None)


def test_bytecode_off_is_kept_in_the_harness_cache(bytecode_off, tmp_path):
    env = {"PYTHONDONTWRITEBYTECODE": "1", paths.PYCACHE_ENV: str(tmp_path / "pyc")}
    assert paths.keep_bytecode(env) == tmp_path / "pyc"
    assert sys.pycache_prefix == str(tmp_path / "pyc") and sys.dont_write_bytecode is False
    # what the processes it starts inherit
    assert env == {"PYTHONPYCACHEPREFIX": str(tmp_path / "pyc"), paths.PYCACHE_ENV: str(tmp_path / "pyc")}


def test_the_default_folder_is_beside_the_other_caches(bytecode_off, tmp_path):
    env = {"PYTHONDONTWRITEBYTECODE": "1", "XDG_CACHE_HOME": str(tmp_path)}
    assert paths.keep_bytecode(env) == tmp_path / "tma-conformance" / "pycache"


@pytest.mark.parametrize("why", ["python-writes-its-own", "user-prefix-env", "user-prefix-flag", "off"])
def test_nothing_changes_where_python_keeps_bytecode_or_the_user_chose(why, monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "dont_write_bytecode", why != "python-writes-its-own")
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path / "mine") if why == "user-prefix-flag" else None)
    env = {"PYTHONDONTWRITEBYTECODE": "1", paths.PYCACHE_ENV: str(tmp_path / "pyc")}
    if why == "user-prefix-env":
        env["PYTHONPYCACHEPREFIX"] = str(tmp_path / "mine")
    if why == "off":
        env[paths.PYCACHE_ENV] = "off"
    before = (dict(env), sys.dont_write_bytecode, sys.pycache_prefix)
    assert paths.keep_bytecode(env) is None
    assert (env, sys.dont_write_bytecode, sys.pycache_prefix) == before


def test_a_run_under_pythondontwritebytecode_fills_the_cache_in_controller_and_workers(tmp_path):
    """A nested run with two workers, as on a GPU node's image: the harness's modules
    (controller) and the test module, rewritten by pytest (only a worker collects it under
    xdist), are in the cache; nothing is written beside the sources; environment.json
    names the folder."""
    root = make_tree(tmp_path / "tree", """
        def test_one():
            assert 1 + 1 == 2
        def test_two():
            assert 2 + 2 == 4
    """)
    cache, out = tmp_path / "pyc", tmp_path / "report"
    # PYTHONPYCACHEPREFIX empty: not the one this run's own harness may have set
    r = pytest_run(root, "-n", "2", f"--report-dir={out}",
                   env={"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": "", paths.PYCACHE_ENV: str(cache)})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    written = {p.name.split(".")[0] for p in cache.rglob("*.pyc")}
    assert {"harness", "run_reports", "controller", "paths"} <= written, sorted(written)[:40]
    assert "test_tiny" in written, "no worker wrote its rewritten test module into the cache"
    assert not list(root.rglob("__pycache__"))
    env = report(out, "environment.json")
    assert env["python"]["bytecode_cache"] == str(cache)
