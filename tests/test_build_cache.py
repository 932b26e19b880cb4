"""NVRTC builds and the cubin cache: miss, hit, key inputs, concurrent compiles, errors."""
import concurrent.futures as cf
import multiprocessing
import os
from pathlib import Path

import pytest

from fixtures.cuda_layer import build, toolchain_choice
from nested_run import report

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
    assert b.nvrtc_version == toolchain_choice.nvrtc_version() == b.toolchain.nvrtc_version
    assert Path(b.cccl_include, "cuda", "ptx").is_file()
    assert b.cccl_include == b.toolchain.cccl_include
    assert "-std=c++17" in b.options and "-DVALUE=1" in b.options
    assert f"-I{b.cccl_include}" in b.options


def test_builds_used_names_the_toolchain(kdir, tmp_path, monkeypatch):
    monkeypatch.setattr(build, "_USED", {})
    compile_(kdir, tmp_path)
    compile_(kdir, tmp_path)
    (used,) = build.builds_used()
    assert used["toolchain"] == toolchain_choice.resolve().summary()
    assert used["builds"] == 2 and used["kernels"] == ["k.cu:sm_90a"]


def test_precompile_list_names_every_suite_kernel():
    """The controller's background build (fixtures.plugins.run_control.session_start.PRECOMPILE) covers every
    kernel source but the one that exists to fail on plain sm_90."""
    from fixtures.plugins.run_control import session_start as plugin
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
        raise toolchain_choice.ToolchainError("NVRTC 13.5 (PyPI at /nowhere) came without CCCL headers")
    monkeypatch.setattr(toolchain_choice, "resolve", missing)
    with pytest.raises(build.BuildError, match="no toolchain") as info:
        compile_(kdir, tmp_path / "cache")
    assert "/nowhere" in info.value.log


def test_an_installation_without_nvrtc_could_not_build(kdir, tmp_path, monkeypatch):
    def missing():
        raise toolchain_choice.ToolchainError("NVRTC is not loadable (libnvrtc.so.13: cannot open "
                                              "shared object file)")
    monkeypatch.setattr(toolchain_choice, "_nvrtc", missing)
    toolchain_choice.resolve.cache_clear()
    try:
        with pytest.raises(build.BuildError, match="no toolchain") as info:
            compile_(kdir, tmp_path / "cache")
        assert "NVRTC is not loadable" in info.value.log
    finally:
        monkeypatch.undo()
        toolchain_choice.resolve.cache_clear()


def test_precompile_builds_every_kernel_in_child_processes(tmp_path, monkeypatch):
    """On a GPU machine the controller's session start builds PRECOMPILE into the run's
    kernel cache, each kernel in a child process of its own (NVRTC holds the GIL: a build
    thread stopped the controller), and the workers then find every cubin in the cache."""
    from types import SimpleNamespace
    from _pytest.stash import Stash
    from fixtures.plugins.run_control import session_start as plugin
    monkeypatch.setattr(plugin.cuda_env, "probe", lambda: SimpleNamespace(available=True))
    cache = tmp_path / "kc"
    opts = {"arch": "sm_90a", "kernel_cache": str(cache)}
    config = SimpleNamespace(getoption=lambda name, default=None: opts.get(name, default),
                             option=SimpleNamespace(collectonly=False, numprocesses=2),   # xdist's controller
                             stash=Stash())
    session = SimpleNamespace(config=config)
    plugin.pytest_sessionstart(session)
    procs = config.stash[plugin._PRECOMPILE_KEY]
    assert len(procs) == len(plugin.PRECOMPILE) and all(p.pid != os.getpid() for p in procs)
    assert [p.wait(timeout=240) for p in procs] == [0] * len(procs)
    for source in plugin.PRECOMPILE:
        assert build.compile_kernel(source, arch="sm_90a", cache_dir=cache).cache_hit, source
    (used,) = plugin.precompile_builds(config)    # what the children built reaches the reports
    assert set(used["kernels"]) == {f"{s}:sm_90a" for s in plugin.PRECOMPILE} and not used["rebuilt"]
    plugin.pytest_sessionfinish(session)          # all ended: nothing to stop

    # the background builds verify what they read: a damaged entry is rebuilt and named
    damaged = build.compile_kernel("smoke_load.cu", arch="sm_90a", cache_dir=cache).path
    Path(damaged).write_bytes(b"\x7fELF")
    config.stash = Stash()
    plugin.pytest_sessionstart(session)
    assert [p.wait(timeout=240) for p in config.stash[plugin._PRECOMPILE_KEY]] == [0] * len(procs)
    (used,) = plugin.precompile_builds(config)
    assert used["rebuilt"] == [{"entry": damaged, "kind": "corrupt",
                                "why": f"cubin is 4 bytes, its metadata says {len(Path(damaged).read_bytes())}"}]
    plugin.pytest_sessionfinish(session)


# ------------------------------------------------------------------ a damaged cache entry

def _entry(cache):
    (cubin,) = cache.glob("*.cubin")
    return cubin, cubin.with_suffix(".json")


def _flip_a_byte(cubin, meta):
    data = bytearray(cubin.read_bytes())
    data[len(data) // 2] ^= 0xFF
    cubin.write_bytes(bytes(data))


def _older_harness(cubin, meta):
    """The metadata the harness wrote before the digest (no cubin_size, no cubin_sha256)."""
    import json
    old = json.loads(meta.read_text())
    for k in ("schema", "cubin_size", "cubin_sha256"):
        old.pop(k)
    meta.write_text(json.dumps(old))


DAMAGE = {
    "truncated": (lambda c, m: c.write_bytes(c.read_bytes()[:100]), "corrupt",
                  "cubin is 100 bytes, its metadata says"),
    "byte-flipped": (_flip_a_byte, "corrupt", "cubin's sha256 differs from its metadata's"),
    "metadata-broken": (lambda c, m: m.write_text("{"), "corrupt", "metadata is not JSON"),
    "metadata-not-object": (lambda c, m: m.write_text("[]"), "corrupt", "metadata is not a JSON object"),
    "metadata-lacks-log": (lambda c, m: m.write_text(m.read_text().replace('"log"', '"gol"')), "corrupt",
                           "metadata lacks log"),
    "cubin-deleted": (lambda c, m: c.unlink(), "corrupt", "cubin missing"),
    "metadata-deleted": (lambda c, m: m.unlink(), "corrupt", "a cubin without metadata"),
    "older-harness": (_older_harness, "stale", "metadata names no cubin digest: an older harness wrote it"),
}


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_a_damaged_entry_is_rebuilt_reported_and_never_loaded(kdir, tmp_path, monkeypatch, damage):
    """A cubin cut short, a flipped byte, broken or missing metadata, a deleted cubin, an
    entry an older harness wrote (no digest): the entry is not used; it is rebuilt (one
    compile), rewritten whole, and named in builds_used()'s ``rebuilt``."""
    harm, kind, why = damage
    cache = tmp_path / "cache"
    good = compile_(kdir, cache)
    cubin, meta = _entry(cache)
    harm(cubin, meta)
    compiles = []
    real = build._nvrtc_compile
    monkeypatch.setattr(build, "_nvrtc_compile", lambda *a: compiles.append(a) or real(*a))
    monkeypatch.setattr(build, "_USED", {})
    again = compile_(kdir, cache)
    assert (again.cache_hit, len(compiles)) == (False, 1)
    assert again.cubin == good.cubin and cubin.read_bytes() == good.cubin
    (used,) = build.builds_used()
    (note,) = used["rebuilt"]
    assert note["entry"] == str(cubin) and note["kind"] == kind and note["why"].startswith(why), note
    third = compile_(kdir, cache)                  # the rewritten entry reads back, unreported
    assert third.cache_hit and len(compiles) == 1 and len(build.builds_used()[0]["rebuilt"]) == 1
    assert build.read_entry(cache, cubin.stem, ("log",))[2] is None


def test_read_entry_verifies_size_and_digest(tmp_path):
    """The cache's own protocol (also nvcc's cubins, fixtures.device_encode.nvcc): the
    metadata names the cubin's size and sha256; an entry not there is a plain miss."""
    assert build.read_entry(tmp_path, "x") == (None, None, None)
    data, hit = build.cached(tmp_path, "x", "x", lambda: b"\x7fELF" + b"\0" * 60)
    assert not hit and build.read_entry(tmp_path, "x")[0] == data
    (tmp_path / "x.cubin").write_bytes(data[:-1] + b"\1")
    assert build.read_entry(tmp_path, "x") == (None, None, ("corrupt", "cubin's sha256 differs from its metadata's"))
    assert build.cached(tmp_path, "x", "x", lambda: data) == (data, False)


def _repair_in_process(args):
    kdir, cache = args
    build._USED.clear()
    b = compile_(Path(kdir), Path(cache))
    return b.cache_hit, b.cubin, [n for u in build.builds_used() for n in u["rebuilt"]]


def test_concurrent_readers_of_a_damaged_entry_rebuild_it_once(kdir, tmp_path):
    """Many processes meet the same truncated entry at once: one rebuilds it under the
    lock and reports it; the others wait and read the new entry; none gets the damaged
    bytes."""
    cache = tmp_path / "cache"
    good = compile_(kdir, cache).cubin
    cubin, _ = _entry(cache)
    cubin.write_bytes(good[:100])
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(4, mp_context=ctx) as pool:
        results = list(pool.map(_repair_in_process, [(str(kdir), str(cache))] * 8))
    assert [hit for hit, _, _ in results].count(False) == 1
    assert {c for _, c, _ in results} == {good}
    notes = [n for _, _, ns in results for n in ns]
    assert len(notes) == 1 and notes[0]["why"].startswith("cubin is 100 bytes"), notes


def test_the_run_names_a_rebuilt_entry(tmp_path):
    """Under xdist, a worker that rebuilt a damaged entry tells the controller: the
    terminal summary says "kernel cache: <entry> was corrupt (<why>): rebuilt" and
    environment.json's builds list it."""
    import json
    from tests.nested_run import make_tree, pytest_run
    cache = tmp_path / "kc"
    good = build.compile_kernel("smoke_load.cu", arch="sm_90a", cache_dir=cache)
    Path(good.path).write_bytes(good.cubin[:100])
    Path(good.path).with_suffix(".json").write_text("{")
    root = make_tree(tmp_path / "tree", f"""
        from fixtures.cuda_layer import build

        def test_builds():
            b = build.compile_kernel("smoke_load.cu", arch="sm_90a", cache_dir={str(cache)!r})
            assert not b.cache_hit and b.cubin[:4] == b"\x7fELF" and len(b.cubin) == {len(good.cubin)}
        """)
    out = tmp_path / "out"
    cp = pytest_run(root, "-n", "2", f"--report-dir={out}")
    assert cp.returncode == 0, cp.stdout[-3000:]
    assert (f"kernel cache: {good.path} was corrupt (metadata is not JSON): rebuilt"
            in cp.stdout), cp.stdout[-3000:]
    (used,) = report(out, "environment.json")["builds"]
    assert used["rebuilt"] == [{"entry": good.path, "kind": "corrupt", "why": "metadata is not JSON"}]
    assert Path(good.path).read_bytes() == good.cubin


def test_an_unreadable_cubin_is_rebuilt(kdir, tmp_path, monkeypatch):
    """A cubin the process may not read (permissions; root reads anything, so the read is
    refused here by hand until the rebuild): rebuilt and named, not an error."""
    cache = tmp_path / "cache"
    good = compile_(kdir, cache)
    cubin, _ = _entry(cache)
    refused = {"on": True}
    real_read, real_compile = Path.read_bytes, build._nvrtc_compile

    def read_bytes(self):
        if refused["on"] and self == cubin:
            raise PermissionError(13, "Permission denied")
        return real_read(self)

    def compile_once(*a):
        refused["on"] = False
        return real_compile(*a)
    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    monkeypatch.setattr(build, "_nvrtc_compile", compile_once)
    monkeypatch.setattr(build, "_USED", {})
    again = compile_(kdir, cache)
    assert not again.cache_hit and again.cubin == good.cubin
    assert build.builds_used()[0]["rebuilt"] == [
        {"entry": str(cubin), "kind": "unreadable", "why": "cubin unreadable: Permission denied"}]


def test_a_process_that_runs_cases_starts_its_isolated_child_with_the_session(monkeypatch):
    """An xdist worker (or the only process, -n 0) starts its isolated child at session
    start, opening its GPU there, so that it overlaps the collection, and opens no context
    of its own; with several GPUs, each GPU's thread starts its GPU's child. A worker
    builds nothing in the background (the controller does), and a --collect-only run
    starts nothing."""
    from types import SimpleNamespace
    from _pytest.stash import Stash
    from fixtures.plugins.run_control import every_gpu
    from fixtures.plugins.run_control import session_start as plugin
    started, opened, threads = [], [], []
    monkeypatch.setattr(plugin.cuda_env, "probe", lambda: SimpleNamespace(available=True))
    monkeypatch.setattr(every_gpu, "run_gpus", lambda: (SimpleNamespace(ordinal=3),))
    monkeypatch.setattr(every_gpu.isolation, "runner",
                        lambda name="batches", device=None: SimpleNamespace(prestart=started.append))
    monkeypatch.setattr(every_gpu.placement, "use_device", opened.append)
    monkeypatch.setattr(every_gpu.gpu_threads, "start", lambda ordinals, first=None: threads.append(ordinals))
    worker = SimpleNamespace(getoption=lambda name, default=None: default, workerinput={},
                             option=SimpleNamespace(collectonly=False), stash=Stash())
    plugin.pytest_sessionstart(SimpleNamespace(config=worker))
    assert started == [3] and opened == [] and threads == [] and plugin._PRECOMPILE_KEY not in worker.stash
    monkeypatch.setattr(every_gpu, "run_gpus", lambda: tuple(SimpleNamespace(ordinal=k) for k in (0, 2)))
    plugin.pytest_sessionstart(SimpleNamespace(config=worker))
    assert started == [3] and opened == [] and threads == [[0, 2]]
    listing = SimpleNamespace(getoption=lambda name, default=None: default, workerinput={},
                              option=SimpleNamespace(collectonly=True), stash=Stash())
    plugin.pytest_sessionstart(SimpleNamespace(config=listing))
    assert started == [3] and opened == [] and threads == [[0, 2]]


def test_a_build_nvrtc_refuses_is_cached_and_raised_again(kdir, tmp_path, monkeypatch):
    """NVRTC's refusal of a source (a compilation error) is an entry of the kernel cache:
    a second build of the same key raises the same BuildError (log and result) without
    compiling; an entry that does not read whole is compiled again; a failure that is not
    NVRTC's answer to the source is never kept."""
    cache = tmp_path / "cache"
    compiled = []
    real = build._nvrtc_compile
    monkeypatch.setattr(build, "_nvrtc_compile", lambda *a: (compiled.append(a[0]), real(*a))[1])

    def refused():
        with pytest.raises(build.BuildError) as info:
            build.compile_kernel("bad.cu", arch="sm_90a", cache_dir=cache, kernel_dir=kdir)
        return info.value
    first, second = refused(), refused()
    assert compiled == ["bad.cu"], "the refusal was compiled again"
    assert (second.log, second.result, second.options) == (first.log, first.result, first.options)
    assert first.result == "NVRTC_ERROR_COMPILATION" and "bad.cu" in second.log
    entries = list(cache.glob("bad-sm_90a-*.refused.json"))
    assert len(entries) == 1 and not list(cache.glob("bad-*.cubin"))
    entries[0].write_text("{not json")
    assert refused().log == first.log and len(compiled) == 2
    assert refused() and len(compiled) == 2                  # written anew: read again
    entries[0].unlink()
    monkeypatch.setattr(build, "_nvrtc_compile", lambda *a: (False, "out of memory", b"",
                                                             "NVRTC_ERROR_OUT_OF_MEMORY"))
    assert refused().result == "NVRTC_ERROR_OUT_OF_MEMORY" and not list(cache.glob("*.refused.json"))


def test_a_build_nvcc_refuses_is_cached_and_raised_again(tmp_path, monkeypatch):
    """nvcc's refusal of a build is an entry of the kernel cache: a second build of the
    same key raises the same NvccError (command and output) without running nvcc; an
    entry that does not read whole is asked of nvcc again."""
    from fixtures.device_encode import nvcc as nv
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "nvcc"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then echo "release 99.9, V99.9.1"; exit 0; fi\n'
                    f'echo run >> {calls}\necho "error: tensormap form not supported on this target" >&2\n'
                    f'exit 1\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    nv.nvcc_version.cache_clear()
    cache = tmp_path / "cache"

    def refused():
        with pytest.raises(nv.NvccError) as info:
            nv.nvcc_build("device_encode.cu", "sm_90", cache, {"TMAC_DE_PROBE": 1})
        return info.value
    first = refused()
    second = refused()
    assert calls.read_text().count("run") == 1, "the refusal was compiled again"
    assert (second.cmd, second.log) == (first.cmd, first.log) and "not supported" in second.log
    entries = list(cache.glob("*.refused.json"))
    assert len(entries) == 1
    entries[0].write_text("{not json")
    assert "not supported" in refused().log and calls.read_text().count("run") == 2
    assert refused() and calls.read_text().count("run") == 2     # written anew: read again
    nv.nvcc_version.cache_clear()
