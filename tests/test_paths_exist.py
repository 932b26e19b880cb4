"""Every path the harness builds from its own files points at something that exists, and the
environment survey's driver probe is the real script, started as the survey starts it.

A move of a module leaves behind the paths built from ``__file__`` (``.parents[2] /
"kernels"``, ``.with_name("driver_probe.py")``): nothing fails until a run on a GPU node
writes "can't open file" into every report. These self-tests read each such expression
out of the sources and evaluate it where its file lies now."""
from __future__ import annotations

import ast
import ctypes
import re
from pathlib import Path

import pytest

from fixtures.cuda_layer import build, driver_probe
from fixtures.plugins.environment import survey

ROOT = Path(__file__).resolve().parents[1]
HARNESS = ["conftest.py", "tmac_reports.py", *(str(p.relative_to(ROOT)) for tree in
                                              ("fixtures", "reports", "suites")
                                              for p in sorted((ROOT / tree).rglob("*.py")))]
# the names a path expression may use: evaluated with these and nothing else
PATH_NAMES = {"Path": Path, "str": str}


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def file_paths(rel: str) -> list[tuple[int, str, object]]:
    """(line, source text, value) of each largest expression of ``rel`` that builds a
    path from ``__file__`` with ``Path`` and constants only, evaluated with ``__file__``
    as the file's own path."""
    tree = ast.parse((ROOT / rel).read_text(encoding="utf-8"))
    parent = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def candidate(node) -> bool:
        names = _names(node)
        return (isinstance(node, ast.expr) and "__file__" in names
                and names <= {"__file__", *PATH_NAMES})

    out = []
    for node in ast.walk(tree):
        if candidate(node) and not candidate(parent.get(node)):
            value = eval(compile(ast.Expression(node), rel, "eval"),   # noqa: S307 (Path and constants only)
                         {"__builtins__": {}, "__file__": str(ROOT / rel), **PATH_NAMES})
            out.append((node.lineno, ast.unparse(node), value))
    return out


def test_the_scan_finds_the_paths_it_must():
    """The scan is not empty-handed: the kernels' folder, the schemas and the isolated
    child's root are among what it evaluates (a scan that found nothing would pass)."""
    found = {(rel, text) for rel in HARNESS for _, text, _ in file_paths(rel)}
    assert ("fixtures/cuda_layer/build.py", "Path(__file__).resolve().parents[2] / 'kernels'") in found
    assert ("reports/schemas.py", "Path(__file__).resolve().parent / 'schemas'") in found
    assert ("fixtures/repro/kernel_source.py", "Path(__file__).with_name('ptx_shim.cuh')") in found
    assert len(found) >= 10


@pytest.mark.parametrize("rel", [r for r in HARNESS if "__file__" in (ROOT / r).read_text(encoding="utf-8")])
def test_every_path_built_from_file_exists(rel):
    missing = [f"{rel}:{line}: {text} -> {value}" for line, text, value in file_paths(rel)
               if isinstance(value, (str, Path)) and not Path(value).exists()]
    assert not missing, "paths built from __file__ that point at nothing (a module moved?):\n  " + \
        "\n  ".join(missing)


def test_every_kernel_file_named_in_the_harness_exists():
    """A kernel named by its file (``source = "tma_load.cu"``, the session's builds ahead)
    is a file of kernels/."""
    named = set()
    for rel in HARNESS:
        for node in ast.walk(ast.parse((ROOT / rel).read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and re.fullmatch(r"[a-z0-9_]+\.cu", node.value):
                named.add((rel, node.value))
    assert len({n for _, n in named}) >= 8
    missing = [f"{rel}: {name}" for rel, name in sorted(named)
               if name != "repro.cu" and not (build.KERNEL_DIR / name).is_file()]
    assert not missing, "kernel files named but not in kernels/:\n  " + "\n  ".join(missing)


def _driver_loadable() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def test_the_real_driver_probe_runs_as_the_survey_starts_it():
    """No stub: ``survey.probe_driver`` starts the real script in a child, as every run
    does. Without a driver (the CPU machines, CI) its answer says there is none, never
    that the script could not be started; with one, it names the driver's version."""
    assert Path(driver_probe.__file__).is_file()
    got = survey.probe_driver()
    text = repr(got)
    assert "can't open file" not in text and "exited" not in text, got
    assert set(got) >= {"cuda_driver_version", "gpus", "peer_access", "kernel_module_version",
                        "cuda_runtime"}, got
    if _driver_loadable():
        assert isinstance(got["cuda_driver_version"], int), got
    else:
        for key in ("cuda_driver_version", "gpus", "peer_access"):
            assert got[key].startswith("unavailable: no CUDA driver"), (key, got[key])
