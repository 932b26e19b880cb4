"""The command-line options: documented in --help, bad values met with a clear error."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def pytest_run(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_help_documents_every_option():
    out = pytest_run("--help").stdout
    for opt in ("--sweep", "--report-dir", "--kernel-cache", "--arch"):
        assert opt in out, f"{opt} missing from pytest --help"
    for marker in ("gpu", "multi_gpu", "isolated"):
        assert marker in pytest_run("--markers").stdout


@pytest.mark.parametrize("args,msg", [(["--arch", "sm90"], "--arch: not an NVRTC architecture"),
                                      (["--sweep", "huge"], "invalid choice")])
def test_bad_options_are_usage_errors(args, msg):
    r = pytest_run(*args, "--collect-only", "-q")
    assert r.returncode == 4, r.stdout + r.stderr
    assert msg in r.stderr


def test_unknown_marker_is_an_error(tmp_path):
    t = tmp_path / "test_x.py"
    t.write_text("import pytest\n@pytest.mark.gpuu\ndef test_a():\n    pass\n")
    r = pytest_run(str(t), "-c", str(ROOT / "tox.ini"), "--rootdir", str(ROOT))
    assert r.returncode != 0 and "gpuu" in (r.stdout + r.stderr)
