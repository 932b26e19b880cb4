"""The ``unproven`` marker: a test new in a version, not yet run on a GPU node by the suite's
developers, is skipped saying so (its own skip kind) unless ``--unproven``; a nested run
of a small tree with the suite's conftest."""
from __future__ import annotations

from fixtures.plugins.run_control.options import UNPROVEN
from nested_run import make_tree, pytest_run, report


def test_an_unproven_test_is_skipped_saying_so_unless_asked_for(tmp_path):
    """A test marked ``unproven`` (new, not yet run on a GPU node) is skipped with that
    reason, its siblings untouched; ``--unproven`` runs it."""
    root = make_tree(tmp_path / "t", """
        import pytest

        @pytest.mark.unproven
        @pytest.mark.parametrize("x", [1, 2])
        def test_new(x):
            assert x

        def test_old():
            pass
        """)
    out = pytest_run(root, "-rs", f"--report-dir={tmp_path / 'r1'}")
    assert out.returncode == 0, out.stdout[-3000:]
    assert "SKIPPED [2] test_tiny.py:4: " + UNPROVEN in out.stdout and "1 passed" in out.stdout
    run = report(tmp_path / "r1")
    kinds = {c["id"]: c.get("skip_kind") for c in run["cases"] if c["id"].startswith("test_tiny.py")}
    assert kinds == {"test_tiny.py::test_new[1]": "unproven", "test_tiny.py::test_new[2]": "unproven",
                     "test_tiny.py::test_old": None}, kinds
    asked = pytest_run(root, "--unproven", f"--report-dir={tmp_path / 'r2'}")
    assert asked.returncode == 0 and "3 passed" in asked.stdout, asked.stdout[-3000:]
