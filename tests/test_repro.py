"""The standalone reproducers (fixtures/repro, ``python -m reports repro``) on a CPU.

From a CPU run's report (every GPU case skipped), one reproducer per kind of case is
written: the TMA operations (tiled, im2col and multicast loads, stores, reductions,
prefetches, their traps, maps built on the device), a host-encoding rule case, a
device-encoding case, a fence scenario and a library map. Each file runs under
``python3 -I`` in a virtual environment that holds only cuda-python and NumPy: with no
GPU it exits 2 with one line, and imports nothing of the suite (``-X importtime``).

The kernels a file carries compile, with no header, to the very PTX of the suite's
kernels (NVRTC from PyPI, CCCL's ``<cuda/ptx>`` against ptx_shim.cuh). The expected
bytes are the suite's models'; the verdicts (exit 0 / 1 / 2) are checked with the
runtime's GPU calls replaced. Where a CUDA driver is present the clean environment's
case skips, saying so: the files would run for real there, which this CPU test does not
judge."""
from __future__ import annotations

import re
import subprocess
import sys
import base64
import venv
import zlib
from pathlib import Path

import numpy as np
import pytest

from fixtures import repro
from fixtures.cuda_layer import toolchain_choice
from fixtures.cuda_layer.build import KERNEL_DIR
from fixtures.repro import kernel_source, record, standalone
from fixtures.tma_box import tiled
from fixtures.tma_load.operations import TILED

from nested_run import first_case_ids

ROOT = Path(__file__).resolve().parent.parent
# One smoke case of each kind a reproducer is written for (the first its test collects).
KINDS = (
    "suites/test_tma_load.py::test_tma_load", "suites/test_tma_load.py::test_tma_load_trap",
    "suites/test_tma_load.py::test_tma_load_smem_misaligned",
    "suites/test_im2col_load.py::test_im2col_load", "suites/test_multicast.py::test_multicast",
    "suites/test_tma_prefetch.py::test_tma_prefetch", "suites/test_tma_store.py::test_tma_store",
    "suites/test_tma_store.py::test_tma_store_variant", "suites/test_tma_store.py::test_tma_store_im2col",
    "suites/test_tma_reduce.py::test_tma_reduce", "suites/test_host_encode.py::test_rule_case",
    "suites/test_device_encode.py::test_replace_address_matches_driver",
    "suites/test_fence_scopes.py::test_same_block", "suites/test_library_maps.py::test_cuda_core_map",
)
SUITE_MODULES = ("fixtures", "reports", "pytest", "_pytest", "cupy", "conftest")


def _run(args, **kw):
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300, **kw)


@pytest.fixture(scope="module")
def case_ids() -> dict:
    return first_case_ids(KINDS, "smoke")


@pytest.fixture(scope="module")
def written(case_ids, tmp_path_factory) -> dict:
    """{kind: the file written for its case} from a CPU run's report of those cases."""
    run, out = tmp_path_factory.mktemp("run"), tmp_path_factory.mktemp("repro")
    p = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--sweep", "smoke",
              f"--report-dir={run}", *case_ids.values()])
    assert (run / "results.json").is_file(), p.stdout[-2000:] + p.stderr[-2000:]
    p = _run([sys.executable, "-m", "reports", "repro", str(run), *case_ids.values(), "--out", str(out)])
    assert p.returncode == 0, p.stdout + p.stderr
    return {k: out / repro.file_name(cid) for k, cid in case_ids.items()}


def _case_of(path: Path) -> dict:
    ns: dict = {"__name__": "not_main"}
    exec(compile(path.read_text(), str(path), "exec"), ns)
    return ns["CASE"]


def _blob(text: str) -> bytes:
    return zlib.decompress(base64.b85decode(text))


def test_a_file_per_kind_from_a_cpu_runs_report(written, case_ids):
    for kind, path in written.items():
        text = path.read_text()
        head = text.split('"""')[1]
        assert case_ids[kind] in " ".join(head.split()), kind
        for field in ("rule     [rule ", "expected ", "the run  ", "driver   ", "harness  ",
                      "written  from the run's report", "run      python3"):
            assert field in head, f"{kind}: no {field!r} in the header"
        assert "another harness than the run's" not in head, kind      # the same checkout ran it
        case = _case_of(path)
        assert case["id"] == case_ids[kind] and case["steps"], kind
        statuses = [s["expect"] for s in case["steps"] if s["op"] == "encode"]
        assert case["expect"] or case.get("expect_map") or case["expect_error"] or \
            kind.endswith("test_rule_case") and statuses, f"{kind} expects nothing"


def test_a_tiled_load_file_is_small(written):
    lines = len(written["suites/test_tma_load.py::test_tma_load"].read_text().splitlines())
    assert lines < 450, f"a tiled load's reproducer has {lines} lines"


def _clean_venv(root: Path) -> Path:
    """A virtual environment whose site-packages hold only cuda-python (cuda.bindings,
    cuda.pathfinder, NVRTC's wheel) and NumPy, linked from this one."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    site = next((root / "lib").glob("python*/site-packages"))
    import cuda.bindings
    import numpy
    here = Path(numpy.__file__).parent.parent
    (site / "cuda").mkdir()
    for name in ("bindings", "pathfinder"):
        src = Path(cuda.bindings.__file__).parent.parent / name
        if src.exists():
            (site / "cuda" / name).symlink_to(src)
    for entry in here.iterdir():
        if entry.name in ("numpy", "numpy.libs", "nvidia") or entry.name.startswith(
                ("numpy-", "cuda_bindings-", "cuda_pathfinder-")):
            (site / entry.name).symlink_to(entry)
    return root / "bin" / "python"


def _driver_present() -> bool:
    import ctypes
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def test_each_file_runs_alone_in_a_clean_environment(written, tmp_path):
    """``python3 -I`` in a venv of cuda-python and NumPy only: no GPU gives exit 2 and one
    line; nothing of the suite (nor pytest, nor CuPy) is imported."""
    if _driver_present():
        pytest.skip("a CUDA driver is present: the files run for real (the GPU check)")
    python = _clean_venv(tmp_path / "venv")
    for kind, path in written.items():
        p = subprocess.run([str(python), "-I", "-X", "importtime", str(path)], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 2, f"{kind}: exit {p.returncode}\n{p.stdout}\n{p.stderr[-3000:]}"
        lines = p.stdout.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("SETUP PROBLEM (no verdict on the case): no GPU"), \
            f"{kind}: {p.stdout}"
        imported = {ln.split("|")[-1].strip().split(".")[0] for ln in p.stderr.splitlines()
                    if ln.startswith("import time:")}
        assert not imported & set(SUITE_MODULES), f"{kind} imported {imported & set(SUITE_MODULES)}"
        assert {"numpy", "cuda"} <= imported, f"{kind}: {sorted(imported)[:40]}"


def test_the_runtime_imports_nothing_of_the_suite():
    text = Path(standalone.__file__).read_text()
    code = text[text.index("\n# --- runtime"):]
    mods = set(re.findall(r"^\s*(?:import|from)\s+([\w.]+)", code, re.M))
    mods |= set(re.findall(r"__import__\(\"([\w.]+)\"", code))
    allowed = {"base64", "ctypes", "json", "subprocess", "sys", "zlib", "hashlib", "numpy",
               "cuda.bindings", "cuda.core", "cuda.core._tensor_map"}
    assert {m.split(",")[0] for m in mods} <= allowed | {"cuda.core.utils"}, mods


# ------------------------------------------------------------------ the kernels
def _ptx(source: str, options: list[str]) -> str:
    from cuda.bindings import nvrtc
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"k.cu", 0, [], [])
    opts = [b"--gpu-architecture=compute_90a", b"-std=c++17"] + [o.encode() for o in options]
    err, = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        log = b" " * nvrtc.nvrtcGetProgramLogSize(prog)[1]
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise AssertionError(log.decode(errors="replace")[:3000])
    out = b" " * nvrtc.nvrtcGetPTXSize(prog)[1]
    nvrtc.nvrtcGetPTX(prog, out)
    return out.decode()


def _entries(ptx: str) -> dict:
    """Each kernel's PTX instructions: comments gone, the blanks of each line collapsed
    (CCCL's asm strings differ there by version: 3.0.1 writes "\\t .reg" and "// 7a." where
    3.5 writes "\\t.reg" and nothing; the same instructions)."""
    def lines(text):
        return "\n".join(" ".join(ln.split("//")[0].split()) for ln in text.splitlines())
    return {m.group(1): lines(m.group(0)) for m in re.finditer(r"\.entry (\w+)\((.*?)\n}\n", ptx, re.S)}


@pytest.mark.parametrize("source", sorted(p.name for p in KERNEL_DIR.glob("*.cu")))
def test_a_reproducers_kernel_is_the_suites_ptx(source):
    """The suite's kernel file built with CCCL and the reproducer's, header-free (its
    CCCL calls replaced by ptx_shim.cuh), give the same PTX instructions for every kernel."""
    try:
        tool = toolchain_choice.resolve()
    except Exception as exc:       # no NVRTC or CCCL here: said, not passed
        pytest.skip(f"no toolchain to build with: {exc}")
    suite = _entries(_ptx((KERNEL_DIR / source).read_text(), tool.include_options() + [f"-I{KERNEL_DIR}"]))
    ours = _entries(_ptx(kernel_source.trimmed({source: list(suite)}), []))
    assert suite and set(suite) == set(ours), (sorted(suite), sorted(ours))
    for name in suite:
        assert ours[name] == suite[name], f"{source} {name}: the reproducer's PTX differs"


def test_trimming_keeps_what_a_kernel_reaches():
    text = kernel_source.trimmed({"tma_load.cu": ["tma_load_batch"]})
    assert "#include" not in text and "//" not in text.replace('"', "").split("asm")[0]
    assert "tma_load_batch" in text and "prepare_global_map_load" in text
    assert "tma_load_im2col" not in text and "tensormap_replace" not in text     # unreached
    assert "barrier_cluster_arrive" not in text                                   # a shim section not called for


# ------------------------------------------------------------------ the program and its expectations
def test_the_tiled_loads_expectation_is_the_model(written, case_ids):
    cid = case_ids["suites/test_tma_load.py::test_tma_load"]
    case = repro.find_case(cid, "smoke").params["load_case"]
    file_case = _case_of(written["suites/test_tma_load.py::test_tma_load"])
    (enc,) = [s for s in file_case["steps"] if s["op"] == "encode"]
    p = case.load
    assert enc["args"]["globalDim"] == list(p.global_dim) and enc["args"]["boxDim"] == list(p.box_dim)
    assert enc["address"] == [0, 256]               # the tensor after the pool's 256-byte guard
    box = next(w for w in file_case["expect"] if w["what"].startswith("the box"))
    assert _blob(box["data"]) == tiled.load(p, TILED.tensor(case), 0).data
    (launch,) = [s for s in file_case["steps"] if s["op"] == "launch"]
    assert (launch["kernel"], launch["grid"], launch["block"]) == ("tma_load_batch", 1, 128)


def test_stand_in_addresses_and_their_tables():
    with record.recording() as prog:
        a = record.FakeCupy.zeros(1024)
        table = np.array([a.data.ptr + 64, 16 << 32, 7], dtype=np.uint64)
        b = record.FakeCupy.asarray(table)
    assert prog.buffer_of(a.data.ptr + 10) == (0, 10)
    (step,) = [s for s in prog.steps if s["buf"] == b.buf]
    assert step["addresses"] == [[0, 0, 64]]        # the address, not the two int32 of 16 << 32
    assert prog.where(12345) == 12345 and prog.where(0) is None


# ------------------------------------------------------------------ the verdicts
def _fake_file(tmp_path, case: dict, child: dict | None, gpu_ok: bool = True) -> Path:
    """A reproducer whose GPU calls are replaced: open_gpu answers (or says no GPU), the
    child's replay returns ``child`` (None: it crashes)."""
    body = repro.runtime_source()
    gpu = "return None, 'Fake GPU', 90, 13000" if gpu_ok else "raise Setup('no GPU: fake')"
    result = (f"return {child!r}" if isinstance(child, dict) else
              "raise SystemExit(3)" if child is None else
              "print('TMAC-LAUNCH k', flush=True); raise SystemExit(3)" if child == "dies-in-launch" else
              "raise ValueError('an API this reproducer does not know')")
    fake = f"\ndef open_gpu():\n    {gpu}\n\n\ndef replay(case):\n    {result}\n"
    path = tmp_path / "repro-fake.py"
    path.write_text(f"KERNEL = ''\nCASE = {case!r}\n{body}{fake}\nif __name__ == '__main__':\n"
                    f"    sys.exit(main(CASE, sys.argv))\n")
    return path


@pytest.mark.parametrize("child,expect_error,code,says", [
    ({"error": None, "failures": []}, None, 0, "NOT REPRODUCED: [rule r.x] [some-id]"),
    ({"error": None, "failures": ["the box: 1 of 4 bytes differ from the model\n  byte 2: GPU 0x01, model 0x00"]},
     None, 1, "byte 2: GPU 0x01, model 0x00"),
    ({"error": "CUDA_ERROR_ILLEGAL_INSTRUCTION", "where": "the kernel k: CUDA_ERROR_ILLEGAL_INSTRUCTION",
      "failures": []}, None, 1, "the case failed: the kernel k: CUDA_ERROR_ILLEGAL_INSTRUCTION"),
    ({"error": "CUDA_ERROR_ILLEGAL_INSTRUCTION", "where": "x", "kernel": "k", "failures": []},
     "CUDA_ERROR_ILLEGAL_INSTRUCTION", 0, "NOT REPRODUCED"),
    ({"error": None, "failures": []}, "CUDA_ERROR_ILLEGAL_INSTRUCTION", 1,
     "expected the trap CUDA_ERROR_ILLEGAL_INSTRUCTION; it completed"),
    ({"error": None, "failures": ["cuTensorMapEncodeTiled returned CUDA_ERROR_INVALID_VALUE"]},
     "CUDA_ERROR_ILLEGAL_INSTRUCTION", 1, "; it stopped before the launch\ncuTensorMapEncodeTiled returned"),
    (None, None, 2, "SETUP PROBLEM (no verdict on the case): the child process ended (exit 3) before"),
    ("dies-in-launch", None, 1, "the child process died (exit 3) in the launch of k"),
    ("raises", None, 2, "the reproducer failed: ValueError: an API this reproducer does not know"),
    ({"setup": "NVRTC cannot build the kernel"}, None, 2, "SETUP PROBLEM (no verdict on the case): NVRTC"),
    ({"error": "CUDA_ERROR_ILLEGAL_INSTRUCTION", "where": "the kernel builder: CUDA_ERROR_ILLEGAL_INSTRUCTION",
      "kernel": "builder", "failures": []}, "CUDA_ERROR_ILLEGAL_INSTRUCTION", 1, ", not in k"),
])
def test_verdicts(tmp_path, child, expect_error, code, says):
    case = {"id": "some-id", "rule": "r.x", "steps": [], "expect": [], "expect_error": expect_error,
            "expect_error_in": "k" if expect_error else None}
    p = _run([sys.executable, "-I", str(_fake_file(tmp_path, case, child))])
    assert p.returncode == code, p.stdout + p.stderr
    assert says in p.stdout, p.stdout
    if code == 1:
        assert "REPRODUCED: [rule r.x] [some-id]" in p.stdout


def test_no_gpu_is_one_line_and_exit_2(tmp_path):
    case = {"id": "some-id", "rule": "r.x", "steps": [], "expect": [], "expect_error": None}
    p = _run([sys.executable, "-I", str(_fake_file(tmp_path, case, {}, gpu_ok=False))])
    assert p.returncode == 2 and p.stdout.strip() == "SETUP PROBLEM (no verdict on the case): no GPU: fake"


def test_differ_names_the_first_bytes():
    text = standalone.differ("the box", bytes([0, 1, 2, 3] * 4), bytes([0, 1, 9, 3] * 4), shown=2)
    assert text.splitlines() == ["the box: 4 of 16 bytes differ from the model",
                                 "  byte 2: GPU 0x02, model 0x09", "  byte 6: GPU 0x02, model 0x09",
                                 "  ... and 2 more"]
    text = standalone.differ("a map", b"\x01", b"\x02", against="the driver's map")
    assert text.splitlines() == ["a map: 1 of 1 bytes differ from the driver's map",
                                 "  byte 0: GPU 0x01, map 0x02"]


# ------------------------------------------------------------------ the command
def test_the_command_on_bad_input(tmp_path):
    p = _run([sys.executable, "-m", "reports", "repro", str(tmp_path / "nowhere"), "x"])
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    p = _run([sys.executable, "-m", "reports", "repro", str(tmp_path)])
    assert p.returncode == 2 and "give CASE_ID(s) or --all-failed" in p.stderr


def test_a_case_that_is_not_collected_is_not_written(tmp_path, case_ids):
    run = tmp_path / "run"
    p = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--sweep", "smoke",
              f"--report-dir={run}", case_ids["suites/test_tma_load.py::test_tma_load"]])
    p = _run([sys.executable, "-m", "reports", "repro", str(run), "suites/test_tma_load.py::test_tma_load[no-such-case]",
              "suites/test_node.py::test_usable_gpus", "--out", str(tmp_path / "out")])
    assert p.returncode == 1, p.stdout + p.stderr
    assert "no-such-case]: not written: the suite collects no case" in p.stderr
    assert "test_usable_gpus: not written: no reproducer is written for the cases of test_usable_gpus" \
        in p.stderr and "Traceback" not in p.stderr and "ERROR" not in p.stderr
    p = _run([sys.executable, "-m", "reports", "repro", str(run), "--all-failed", "--out", str(tmp_path / "out")])
    assert p.returncode == 0 and "no failed case" in p.stdout
