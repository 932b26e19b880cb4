"""The report tools as a fleet operator meets them (CPU only): the console script
``tmac-reports`` from any folder, and output that cannot be written (one line, exit 2)."""
from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from reports.__main__ import main

from reports_helpers import env, run_dir

ROOT = Path(__file__).resolve().parents[1]
A = "suites/test_load.py::test_load[f16-rank2-swz128]"

# Runs tmac_reports.main as the console script does, in isolated mode (-I: neither the
# current folder nor PYTHONPATH on the path) from "/": only the module can find reports/.
SCRIPT = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location('tmac_reports', sys.argv[1]); "
          "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
          "sys.argv = ['tmac-reports'] + sys.argv[2:]; sys.exit(m.main())")


def console(*args, cwd="/"):
    return subprocess.run([sys.executable, "-I", "-c", SCRIPT, str(ROOT / "tmac_reports.py"), *map(str, args)],
                          cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_console_script_is_declared_and_installs_no_package():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["scripts"]["tmac-reports"] == "tmac_reports:main"
    assert meta["tool"]["setuptools"]["packages"] == []          # no fixtures/reports package elsewhere
    assert meta["tool"]["setuptools"]["py-modules"] == ["tmac_reports"]
    assert "(cd / && tmac-reports --help" in (ROOT / ".ci" / "run").read_text()


def test_the_console_script_runs_from_any_folder(tmp_path):
    old = run_dir(tmp_path / "old", {A: "passed"}, env())
    new = run_dir(tmp_path / "new", {A: "failed"}, env())
    p = subprocess.run([sys.executable, "-I", "-c", "import reports"], cwd="/", capture_output=True, text=True)
    assert p.returncode == 1 and "No module named 'reports'" in p.stderr    # what -m reports meets there
    p = console("--help")
    assert p.returncode == 0 and p.stdout.startswith("usage: tmac-reports ") and "diff" in p.stdout
    p = console("diff", old, new)
    assert p.returncode == 1 and "**1 regression: 1 failed**" in p.stdout, p.stderr
    p = console("diff", old, old)
    assert p.returncode == 0 and "**No regressions**" in p.stdout
    p = console("merge", old, old)
    assert p.returncode == 2 and p.stderr.startswith("tmac-reports merge: the same run folder given twice")
    p = console("diff", old, tmp_path / "missing")
    assert p.returncode == 2 and "tmac-reports diff: unreadable input" in p.stderr
    p = console("bench", "--help")
    assert p.returncode == 0 and p.stdout.startswith("usage: tmac-reports bench")


def one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if "nothing to compare" not in x]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_matrix_into_a_read_only_or_impossible_folder_exits_2(tmp_path, capsys, monkeypatch):
    run = run_dir(tmp_path / "run", {A: "passed"}, env())
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for out in (blocker / "m", "/proc/x"):
        assert main(["matrix", str(run), "--out", str(out)]) == 2
        line = one_line(capsys.readouterr().err)
        assert line.startswith("python -m reports matrix: cannot write the matrix into ") and str(out) in line

    def read_only(self, *a, **k):                   # a read-only folder (the tests may run as root)
        raise PermissionError(13, "Permission denied", str(self))
    monkeypatch.setattr(Path, "write_text", read_only)
    assert main(["matrix", str(run)]) == 2
    line = one_line(capsys.readouterr().err)
    assert line == f"python -m reports matrix: cannot write the matrix into {run}: Permission denied (give --out DIR)"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_matrix_into_a_chmod_read_only_folder(tmp_path, capsys):
    run = run_dir(tmp_path / "run", {A: "passed"}, env())
    run.chmod(0o555)
    try:
        assert main(["matrix", str(run)]) == 2
        assert "Permission denied" in one_line(capsys.readouterr().err)
    finally:
        run.chmod(0o755)


@pytest.mark.parametrize("sub", ["merge", "diff-json", "diff-markdown", "bench"])
def test_every_writing_subcommand_meets_proc_with_one_line(tmp_path, capsys, sub):
    run = run_dir(tmp_path / "run", {A: "passed"}, env())
    argv = {"merge": ["merge", str(run), "--out", "/proc/x"],
            "diff-json": ["diff", str(run), str(run), "--json", "/proc/x/d.json"],
            "diff-markdown": ["diff", str(run), str(run), "--markdown", "/proc/x/d.md"],
            "bench": ["bench", "--out", "/proc/x", "--sweeps", "smoke"]}[sub]
    assert main(argv) == 2                           # bench: before any run, not after minutes
    line = one_line(capsys.readouterr().err)
    assert "/proc/x" in line and ("cannot write" in line), line
