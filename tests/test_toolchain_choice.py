"""Which CCCL and CUDA headers go with the NVRTC in use (fixtures.cuda_layer.toolchain_choice), on fake
installations: PyPI wheels, toolkits of CUDA 12 and 13 layout, a release mismatch, the
override, and what the kernel cache key may not hold."""
from pathlib import Path

import pytest

from fixtures.cuda_layer import toolchain_choice
from nested_run import report


def make_cccl(include: Path, version: int) -> Path:
    (include / "cuda" / "std" / "__cccl").mkdir(parents=True)
    (include / "cuda" / "ptx").write_text("// cuda/ptx\n")
    (include / "cuda" / "std" / "__cccl" / "version.h").write_text(f"#define CCCL_VERSION {version}\n")
    return include


def make_headers(include: Path, release: int) -> Path:
    include.mkdir(parents=True, exist_ok=True)
    (include / "cuda_fp16.h").write_text("// fp16\n")
    (include / "cuda_runtime_api.h").write_text(f"#define CUDART_VERSION  {release}\n")
    return include


def make_toolkit(root: Path, release: int, cccl: int | None, layout: int = 13) -> Path:
    inc = make_headers(root / "include", release)
    (inc / "cuda.h").write_text(f"#define CUDA_VERSION {release}\n")
    (root / "lib64").mkdir(parents=True)
    (root / "lib64" / "libnvrtc.so.13").write_text("")
    if cccl is not None:
        make_cccl(inc / "cccl" if layout == 13 else inc, cccl)
    return root


def make_pypi(tmp: Path, cccl: int | None, headers: int | None) -> tuple[Path, dict]:
    site = tmp / "venv" / "lib" / "python3.11" / "site-packages"
    cu = site / "nvidia" / "cu13"
    (cu / "lib").mkdir(parents=True)
    (cu / "lib" / "libnvrtc.so.13").write_text("")
    found = {}
    if cccl is not None:
        found["cccl"] = str(make_cccl(cu / "include" / "cccl", cccl))
    if headers is not None:
        found["cudart"] = str(make_headers(cu / "include", headers))
    return cu / "lib" / "libnvrtc.so.13", found


@pytest.fixture
def world(monkeypatch):
    """Install a fake NVRTC, PyPI header folders (as cuda.pathfinder would report them)
    and toolkit folders; resolve() is recomputed for each."""
    import cuda.pathfinder as pathfinder
    monkeypatch.delenv(toolchain_choice.ENV_VAR, raising=False)

    def install(version, lib: Path, pypi: dict | None = None, toolkits=()):
        monkeypatch.setattr(toolchain_choice, "_nvrtc", lambda: (version, lib, "test"))
        monkeypatch.setattr(pathfinder, "find_nvidia_header_directory",
                            lambda name: (pypi or {}).get(name), raising=False)
        monkeypatch.setattr(toolchain_choice, "toolkit_candidates", lambda release=None: list(toolkits))
        toolchain_choice.resolve.cache_clear()
        return toolchain_choice.resolve()

    yield install
    toolchain_choice.resolve.cache_clear()


def test_pypi_nvrtc_takes_the_pypi_cccl_even_with_a_toolkit_beside(world, tmp_path):
    lib, found = make_pypi(tmp_path, cccl=3005000, headers=13050)
    tk = make_toolkit(tmp_path / "cuda-13.0", 13000, cccl=3000001)
    t = world((13, 5), lib, found, [tk])
    assert (t.cccl_version, t.cccl_origin.split(" at ")[0]) == ("3.5.0", "PyPI")
    assert t.headers_include == found["cudart"] and t.headers_version == "13.5"
    assert t.summary() == "NVRTC 13.5 (PyPI), CCCL 3.5.0 (PyPI), CUDA headers 13.5"
    assert t.include_options() == [f"-I{found['cccl']}", f"-I{found['cudart']}"]


def test_pypi_nvrtc_without_cccl_takes_a_toolkit_of_its_release(world, tmp_path):
    """As on the GPU image: NVRTC 13.0 from PyPI (installed for another package), the
    CCCL of the CUDA 13.0 toolkit."""
    lib, found = make_pypi(tmp_path, cccl=None, headers=13000)
    other = make_toolkit(tmp_path / "cuda-12.9", 12090, cccl=2008002, layout=12)
    tk = make_toolkit(tmp_path / "cuda-13.0", 13000, cccl=3000001)
    t = world((13, 0), lib, found, [other, tk])
    assert t.cccl_version == "3.0.1" and t.cccl_origin == f"CUDA 13.0 toolkit at {tk}"
    assert "same CUDA release" in t.chosen_by
    assert t.headers_include == found["cudart"]


def test_no_cccl_of_nvrtcs_release_is_an_error_naming_what_to_install(world, tmp_path):
    lib, found = make_pypi(tmp_path, cccl=None, headers=13050)
    tk = make_toolkit(tmp_path / "cuda-13.0", 13000, cccl=3000001)
    with pytest.raises(toolchain_choice.ToolchainError) as info:
        world((13, 5), lib, found, [tk])
    msg = str(info.value)
    assert "NVRTC 13.5" in msg and "cuda-toolkit[cccl,cudart]==13.5.*" in msg
    assert f"CUDA 13.0 toolkit at {tk}" in msg and toolchain_choice.ENV_VAR in msg


@pytest.mark.parametrize("layout", [13, 12])
def test_toolkit_nvrtc_takes_its_own_toolkits_cccl(world, tmp_path, layout):
    """Not a PyPI CCCL that cuda.pathfinder would find first."""
    release, cccl = (13000, 3000001) if layout == 13 else (12090, 2008002)
    tk = make_toolkit(tmp_path / "cuda", release, cccl=cccl, layout=layout)
    _, found = make_pypi(tmp_path, cccl=3005000, headers=13050)
    t = world(divmod(release // 10, 100), tk / "lib64" / "libnvrtc.so.13", found, [])
    want = tk / "include" / "cccl" if layout == 13 else tk / "include"
    assert Path(t.cccl_include) == want and t.cccl_origin.startswith("CUDA ")
    assert Path(t.headers_include) == tk / "include"


def test_override_names_its_folder_in_the_key(world, tmp_path, monkeypatch):
    lib, found = make_pypi(tmp_path, cccl=3005000, headers=13050)
    mine = make_cccl(tmp_path / "my-cccl", 3006000)
    monkeypatch.setenv(toolchain_choice.ENV_VAR, str(mine))
    t = world((13, 5), lib, found, [])
    assert t.cccl_origin == toolchain_choice.ENV_VAR and t.cccl_version == "3.6.0"
    assert t.identity()["cccl_include"] == str(mine.resolve())
    monkeypatch.setenv(toolchain_choice.ENV_VAR, str(tmp_path))
    with pytest.raises(ValueError, match="holds no cuda/ptx"):
        toolchain_choice.cccl_override()


def test_identity_holds_no_path(world, tmp_path):
    lib, found = make_pypi(tmp_path, cccl=3005000, headers=13050)
    t = world((13, 5), lib, found, [])
    assert str(tmp_path) not in repr(t.identity())


def test_missing_headers_are_named_in_a_half_error(world, tmp_path):
    """CCCL 3.5's <cuda/ptx> under NVRTC without cuda_fp16.h: the build log says what
    to install."""
    from fixtures.cuda_layer import build
    lib, found = make_pypi(tmp_path, cccl=3005000, headers=None)
    t = world((13, 5), lib, found, [])
    assert t.headers_include is None and t.summary().endswith("no CUDA headers")
    hint = build._hint('fabric_try_atom.h(1618): error: identifier "__half2" is undefined', t)
    assert "cuda-toolkit[cudart]==13.5.*" in hint
    assert build._hint("error: expected a ;", t) == ""


def test_this_installation_builds_with_the_cccl_of_its_nvrtc():
    """Whatever this machine has: the CCCL chosen is installed with NVRTC, or of its
    release, unless the override names it."""
    toolchain_choice.resolve.cache_clear()
    try:
        t = toolchain_choice.resolve()
    except toolchain_choice.ToolchainError as exc:
        pytest.skip(f"no toolchain here: {exc}")
    if t.cccl_origin != toolchain_choice.ENV_VAR:
        assert (t.cccl_origin == t.nvrtc_origin
                or t.cccl_origin.startswith(f"CUDA {t.release} toolkit")), t


def test_the_reports_name_what_the_builds_used(tmp_path):
    """Under xdist, each worker's builds reach the controller: environment.json's
    ``builds`` names the toolchain the header named, with every kernel built; the
    terminal says it."""
    import json
    from tests.nested_run import make_tree, pytest_run
    root = make_tree(tmp_path / "tree", """
        import pytest
        from fixtures.cuda_layer import build

        @pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
        def test_builds(arch, tmp_path_factory):
            build.compile_kernel("smoke_load.cu", arch=arch,
                                 cache_dir=tmp_path_factory.getbasetemp().parent / "cache")
        """)
    out = tmp_path / "out"
    cp = pytest_run(root, "-n", "2", f"--report-dir={out}")
    assert cp.returncode == 0, cp.stdout[-3000:]
    env = report(out, "environment.json")
    (used,) = env["builds"]
    assert used["toolchain"] == env["toolchain"] == toolchain_choice.resolve().summary()
    # on a GPU machine the controller also builds the suites' kernels in the background
    assert {"smoke_load.cu:sm_100a", "smoke_load.cu:sm_90a"} <= set(used["kernels"])
    assert used["builds"] >= 2
    assert env["cccl"]["include"] == toolchain_choice.resolve().cccl_include
    assert f"kernel builds: {len(used['kernels'])} kernels" in cp.stdout
    assert f"with {env['toolchain']}" in cp.stdout
    assert f"toolchain (every kernel build): {env['toolchain']}" in cp.stdout
