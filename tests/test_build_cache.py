"""NVRTC builds and the cubin cache: miss, hit, key inputs, concurrent compiles, errors."""
import concurrent.futures as cf
import multiprocessing
import os
from pathlib import Path

import pytest

from fixtures.cuda_layer import build, toolchain

KERNEL = """#include "inc.cuh"
extern "C" __global__ void k(int* out) { out[threadIdx.x] = VALUE + HEADER_VALUE; }
"""


@pytest.fixture
def kdir(tmp_path):
    d = tmp_path / "kernels"
    d.mkdir()
    (d / "k.cu").write_text(KERNEL)
    (d / "inc.cuh").write_text("#define HEADER_VALUE 1\n")
    (d / "bad.cu").write_text('extern "C" __global__ void k() { this is not cuda; }\n')
    return d


def compile_(kdir, cache, value=1, arch="sm_90a"):
    return build.compile_kernel("k.cu", arch=arch, defines={"VALUE": value}, cache_dir=cache,
                                kernel_dir=kdir)


def test_miss_then_hit(kdir, tmp_path):
    cache = tmp_path / "cache"
    first, second = compile_(kdir, cache), compile_(kdir, cache)
    assert (first.cache_hit, second.cache_hit) == (False, True)
    assert first.cubin == second.cubin and first.cubin[:4] == b"\x7fELF"
    assert len(list(cache.glob("*.cubin"))) == 1


@pytest.mark.parametrize("change", ["define", "header", "arch"])
def test_key_covers_options_and_included_headers(kdir, tmp_path, change):
    cache = tmp_path / "cache"
    compile_(kdir, cache)
    if change == "define":
        again = compile_(kdir, cache, value=2)
    elif change == "header":
        (kdir / "inc.cuh").write_text("#define HEADER_VALUE 7\n")
        again = compile_(kdir, cache)
    else:
        again = compile_(kdir, cache, arch="sm_100a")
    assert not again.cache_hit, f"changing the {change} must miss the cache"


def test_key_covers_the_toolchain_but_no_path():
    closure, opts = {"k.cu": "x"}, ["--gpu-architecture=sm_90a", "-I/checkout/a/kernels"]
    tool = {"nvrtc": "nvidia-cuda-nvrtc 13.5.37", "cccl": "3.5.0", "cuda_headers": "13.5"}
    base = build.cache_key(closure, opts, tool)
    assert base != build.cache_key(closure, opts, dict(tool, nvrtc="nvidia-cuda-nvrtc 13.5.40"))
    assert base != build.cache_key(closure, opts, dict(tool, cccl="3.1.0"))
    assert base != build.cache_key(closure, opts, dict(tool, cuda_headers="13.0"))
    assert base == build.cache_key(closure, [opts[0], "-I/elsewhere/b/kernels"], tool)


def test_one_cache_serves_every_checkout(kdir, tmp_path):
    """The same kernel from another checkout (another folder) is read from the cache."""
    import shutil
    other = tmp_path / "another-checkout" / "kernels"
    shutil.copytree(kdir, other)
    cache = tmp_path / "cache"
    first, second = compile_(kdir, cache), compile_(other, cache)
    assert (first.cache_hit, second.cache_hit) == (False, True)


def test_lock_files_do_not_pile_up(kdir, tmp_path):
    """One lock file per kernel and target, however many keys (defines, headers) it had."""
    cache = tmp_path / "cache"
    for value in range(4):
        compile_(kdir, cache, value=value)
    assert len(list(cache.glob("*.cubin"))) == 4
    assert [p.name for p in cache.glob("*.lock")] == ["k-sm_90a.lock"]


def _compile_in_process(args):
    kdir, cache = args
    b = compile_(Path(kdir), Path(cache))
    return b.cache_hit, b.cubin


def test_concurrent_compiles_build_once(kdir, tmp_path):
    cache = tmp_path / "cache"
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(4, mp_context=ctx) as pool:
        results = list(pool.map(_compile_in_process, [(str(kdir), str(cache))] * 8))
    hits = [hit for hit, _ in results]
    assert hits.count(False) == 1, f"expected exactly one compile, got hits={hits}"
    assert len({cubin for _, cubin in results}) == 1
    assert not list(cache.glob(".*.tmp")), "temporary files left in the cache"


def test_compile_error_shows_the_whole_log(kdir, tmp_path):
    with pytest.raises(build.BuildError) as info:
        build.compile_kernel("bad.cu", arch="sm_90a", cache_dir=tmp_path, kernel_dir=kdir)
    err = info.value
    assert "error" in err.log and "bad.cu" in err.log
    assert err.log in str(err) and "--gpu-architecture=sm_90a" in str(err)
    assert not list(tmp_path.glob("*.cubin"))


def test_missing_source_is_named(kdir, tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.cu"):
        build.compile_kernel("nope.cu", arch="sm_90a", cache_dir=tmp_path, kernel_dir=kdir)


@pytest.mark.parametrize("arch", ["sm90a", "compute_90a", "", "sm_9"])
def test_bad_arch_is_refused(arch):
    with pytest.raises(ValueError, match="not an NVRTC architecture"):
        build.check_arch(arch)


def test_build_records_its_inputs(kdir, tmp_path):
    b = compile_(kdir, tmp_path)
    assert b.nvrtc_version == build.nvrtc_version() == b.toolchain.nvrtc_version
    assert Path(b.cccl_include, "cuda", "ptx").is_file()
    assert b.cccl_include == b.toolchain.cccl_include
    assert "-std=c++17" in b.options and "-DVALUE=1" in b.options
    assert f"-I{b.cccl_include}" in b.options


def test_builds_used_names_the_toolchain(kdir, tmp_path, monkeypatch):
    monkeypatch.setattr(build, "_USED", {})
    compile_(kdir, tmp_path)
    compile_(kdir, tmp_path)
    (used,) = build.builds_used()
    assert used["toolchain"] == toolchain.resolve().summary()
    assert used["builds"] == 2 and used["kernels"] == ["k.cu:sm_90a"]


def test_precompile_list_names_every_suite_kernel():
    """The controller's background build (fixtures.plugins.harness.PRECOMPILE) covers every
    kernel source but the one that exists to fail on plain sm_90."""
    from fixtures.plugins import harness as plugin
    sources = {p.name for p in build.KERNEL_DIR.glob("*.cu")} - {"replace_sm90a_only.cu"}
    assert set(plugin.PRECOMPILE) == sources


def test_cold_compile_leaves_shared_bytes_intact(kdir, tmp_path):
    """NVRTC writes its log into the buffer it is given. A compile with an empty log
    (a log of one NUL byte) into ``b" " * 1``, CPython's shared one-byte object, made
    ``b" "`` read ``b"\\x00"`` for the rest of the process. In a fresh interpreter, a
    cold compile must leave it alone."""
    import subprocess
    import sys
    code = (
        "import sys; from fixtures.cuda_layer import build\n"
        f"b = build.compile_kernel('k.cu', arch='sm_90a', defines={{'VALUE': 3}}, "
        f"cache_dir={str(tmp_path / 'cold')!r}, kernel_dir=__import__('pathlib').Path({str(kdir)!r}))\n"
        "assert not b.cache_hit and b.log == '', (b.cache_hit, b.log)\n"
        "seen = [bytes([32]), ' '.encode(), b' ' * 1]\n"
        "print([repr(x) for x in seen])\n"
        "sys.exit(0 if all(x[0] == 32 and repr(x) == \"b' '\" for x in seen) else 1)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=build.KERNEL_DIR.parent,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"b' ' after a cold compile: {r.stdout} {r.stderr[-2000:]}"


def test_an_installation_without_cccl_could_not_build(kdir, tmp_path, monkeypatch):
    """No CCCL that belongs with NVRTC is a fault of the installation: BuildError
    ("could not build"), not an error that reads as a failed case."""
    def missing():
        raise toolchain.ToolchainError("NVRTC 13.5 (PyPI at /nowhere) came without CCCL headers")
    monkeypatch.setattr(toolchain, "resolve", missing)
    with pytest.raises(build.BuildError, match="no toolchain") as info:
        compile_(kdir, tmp_path / "cache")
    assert "/nowhere" in info.value.log


def test_an_installation_without_nvrtc_could_not_build(kdir, tmp_path, monkeypatch):
    def missing():
        raise toolchain.ToolchainError("NVRTC is not loadable (libnvrtc.so.13: cannot open "
                                       "shared object file)")
    monkeypatch.setattr(toolchain, "_nvrtc", missing)
    toolchain.resolve.cache_clear()
    try:
        with pytest.raises(build.BuildError, match="no toolchain") as info:
            compile_(kdir, tmp_path / "cache")
        assert "NVRTC is not loadable" in info.value.log
    finally:
        monkeypatch.undo()
        toolchain.resolve.cache_clear()


def test_precompile_builds_every_kernel_in_child_processes(tmp_path, monkeypatch):
    """On a GPU machine the controller's session start builds PRECOMPILE into the run's
    kernel cache, each kernel in a child process of its own (NVRTC holds the GIL: a build
    thread stopped the controller), and the workers then find every cubin in the cache."""
    from types import SimpleNamespace
    from _pytest.stash import Stash
    from fixtures.plugins import harness as plugin
    monkeypatch.setattr(plugin.cuda_env, "probe", lambda: SimpleNamespace(available=True))
    cache = tmp_path / "kc"
    opts = {"arch": "sm_90a", "kernel_cache": str(cache)}
    config = SimpleNamespace(getoption=lambda name, default=None: opts.get(name, default),
                             option=SimpleNamespace(collectonly=False), stash=Stash())
    session = SimpleNamespace(config=config)
    plugin.pytest_sessionstart(session)
    procs = config.stash[plugin._PRECOMPILE_KEY]
    assert len(procs) == len(plugin.PRECOMPILE) and all(p.pid != os.getpid() for p in procs)
    assert [p.wait(timeout=240) for p in procs] == [0] * len(procs)
    for source in plugin.PRECOMPILE:
        assert build.compile_kernel(source, arch="sm_90a", cache_dir=cache).cache_hit, source
    plugin.pytest_sessionfinish(session)          # all ended: nothing to stop
