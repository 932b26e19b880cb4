"""Batch buckets and the xdist scheduler that keeps a bucket on one worker."""
import json
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

from fixtures.batching import BUCKETS, bucket, scope_of

ROOT = Path(__file__).resolve().parent.parent


def test_bucket_is_stable_and_in_range():
    assert bucket("f16-r3-box64x8-swz128-nanfill") == bucket("f16-r3-box64x8-swz128-nanfill")
    assert all(0 <= bucket(f"case{i}") < BUCKETS for i in range(500))
    assert len({bucket(f"case{i}") for i in range(500)}) == BUCKETS


def test_scope_of():
    assert scope_of("suites/t.py::test_a") == "suites/t.py::test_a"
    nid = "suites/t.py::test_a[f16-r3]"
    assert scope_of(nid) == f"suites/t.py::test_a#{bucket('f16-r3')}"


def test_each_bucket_runs_on_one_worker_and_ids_stay_clean(tmp_path):
    (tmp_path / "conftest.py").write_text((ROOT / "conftest.py").read_text())
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    log = tmp_path / "log"
    log.mkdir()
    (tmp_path / "test_b.py").write_text(textwrap.dedent(f'''
        import os, pytest
        @pytest.mark.parametrize("case", [f"c{{i}}" for i in range(200)])
        def test_case(case):
            open(os.path.join({str(log)!r}, case), "w").write(os.environ["PYTEST_XDIST_WORKER"])
    '''))
    r = subprocess.run([sys.executable, "-m", "pytest", "-n", "3", "-q", "--junitxml",
                        str(tmp_path / "j.xml"), "--report-dir", str(tmp_path / "rep")],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stdout + r.stderr
    workers = defaultdict(set)
    for f in log.iterdir():
        workers[bucket(f.name)].add(f.read_text())
    assert len(workers) > 3 and all(len(w) == 1 for w in workers.values()), dict(workers)
    assert len({w for ws in workers.values() for w in ws}) > 1, "everything ran on one worker"
    assert "@" not in (tmp_path / "j.xml").read_text().split("<testcase", 1)[1]
