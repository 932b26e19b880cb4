"""The environment fingerprint of a run (``environment.json``, schema ``tmac-environment/2``).

Written once per run by the pytest controller (``fixtures.plugins.reporting``). Every
value that cannot be read is the string ``"unavailable: <reason>"``, never a
missing key, so that parsers can rely on the keys of a schema version.

Keys (schema 2; schema 1 had no cuda_headers and builds, and searched for CCCL itself):
  schema, run_id, created (UTC ISO), host, role ("controller"),
  command {argv, cwd, invocation_args, xdist_workers}, sweep, arch_option,
  driver {cuda_driver_version (cuDriverGetVersion int), kernel_module_version
          (e.g. "580.65.06", from NVML)},
  cuda_runtime {version, source},
  nvrtc {version, library, origin, package}, cccl {version, include, origin, chosen_by},
  cuda_headers {version, include}, toolchain (their one-line summary): the toolchain
  every build of the run used, as the
  harness resolved it (``fixtures.cuda_layer.toolchain``), never a separate search;
  builds [{toolchain, builds, nvrtc, cccl, kernels}]: what the builds of the run report
  they used (written at the end of the run), nvcc {path, version},
  packages {name: version or "unavailable: ..."},
  gpus [{ordinal, name, uuid, compute_capability, arch, memory_bytes, pci_bus_id}],
  peer_access {ordinals, matrix}, cuda_visible_devices,
  os {system, kernel, version, machine, distro}, python {version, implementation, executable},
  known_issues {file, sha256, entries}, map_layout ({file, sha256, data} when the
  report folder holds ``map_layout.json``; else "unavailable: ...").
"""
from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from .model import ENV_SCHEMA

PACKAGES = ("cuda-python", "cuda-bindings", "cuda-core", "cuda-pathfinder", "cupy-cuda13x",
            "cupy-cuda12x", "cupy", "numpy", "pytest", "pytest-xdist", "pytest-timeout",
            "filelock", "ml-dtypes")
MAP_LAYOUT_FILE = "map_layout.json"
PROBE_TIMEOUT_S = 60.0


def unavailable(reason: str) -> str:
    return f"unavailable: {reason}"


def is_unavailable(v: object) -> bool:
    return isinstance(v, str) and v.startswith("unavailable:")


def package_versions() -> dict:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            if name.startswith("cupy"):
                continue  # only one CuPy wheel is ever installed; report the one found
            out[name] = unavailable("not installed")
    if not any(k.startswith("cupy") for k in out):
        out["cupy"] = unavailable("not installed")
    return out


def probe_driver(timeout: float = PROBE_TIMEOUT_S) -> dict:
    """Run ``driver_probe.py`` in a child process (see its docstring for why)."""
    script = Path(__file__).with_name("driver_probe.py")
    try:
        cp = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=timeout, cwd=str(script.parent.parent))
    except subprocess.TimeoutExpired:
        r = unavailable(f"driver probe timed out after {timeout:.0f} s")
        return {"cuda_driver_version": r, "gpus": r, "peer_access": r, "kernel_module_version": r,
                "cuda_runtime": r}
    try:
        data = json.loads(cp.stdout)
        if not isinstance(data, dict):
            raise ValueError("not an object")
        return data
    except ValueError:
        tail = (cp.stderr or cp.stdout or "").strip().splitlines()[-1:] or ["no output"]
        r = unavailable(f"driver probe exited {cp.returncode}: {tail[0][:300]}")
        return {"cuda_driver_version": r, "gpus": r, "peer_access": r, "kernel_module_version": r,
                "cuda_runtime": r}


def nvcc_info() -> object:
    path = shutil.which("nvcc")
    if not path:
        return unavailable("nvcc not on PATH")
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"path": path, "version": unavailable(str(e))}
    m = re.search(r"release ([\d.]+), V([\d.]+)", out)
    return {"path": path, "version": m.group(2) if m else (out.strip().splitlines() or ["?"])[-1]}


def os_info() -> dict:
    distro = unavailable("no /etc/os-release")
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                distro = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return {"system": platform.system(), "kernel": platform.release(), "version": platform.version(),
            "machine": platform.machine(), "distro": distro}


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def map_layout(report_dir: Path) -> object:
    p = report_dir / MAP_LAYOUT_FILE
    if not p.is_file():
        return unavailable(f"no {MAP_LAYOUT_FILE} in the report folder (written by the device-encoding suite)")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return unavailable(f"{p}: unreadable ({e})")
    return {"file": MAP_LAYOUT_FILE, "sha256": file_digest(p), "data": data}


def gather(*, run_id: str, report_dir: Path, argv: list[str], invocation_args: list[str],
           sweep: object, arch_option: object, xdist_workers: object, known_issues: dict,
           toolchain: dict | None = None) -> dict:
    """``toolchain``: the ``nvrtc``, ``cccl`` and ``cuda_headers`` sections, from the
    harness that builds the kernels (``fixtures.cuda_layer.toolchain.describe()``)."""
    drv = probe_driver()
    toolchain = toolchain or {}
    none_given = unavailable("the harness named no toolchain")
    return {
        "schema": ENV_SCHEMA,
        "run_id": run_id,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "role": "controller",
        "command": {"argv": list(argv), "cwd": os.getcwd(), "invocation_args": list(invocation_args),
                    "xdist_workers": xdist_workers},
        "sweep": sweep,
        "arch_option": arch_option,
        "driver": {"cuda_driver_version": drv.get("cuda_driver_version", unavailable("probe gave nothing")),
                   "kernel_module_version": drv.get("kernel_module_version", unavailable("probe gave nothing"))},
        "cuda_runtime": drv.get("cuda_runtime", unavailable("probe gave nothing")),
        # the toolchain the builds use, as the harness resolved it (fixtures.cuda_layer.toolchain):
        # never a search of its own that could disagree
        "toolchain": toolchain.get("toolchain", none_given),
        "nvrtc": toolchain.get("nvrtc", none_given),
        "cccl": toolchain.get("cccl", none_given),
        "cuda_headers": toolchain.get("cuda_headers", none_given),
        "builds": unavailable("written at the end of the run, from the builds' results"),
        "nvcc": nvcc_info(),
        "packages": package_versions(),
        "gpus": drv.get("gpus", unavailable("probe gave nothing")),
        "peer_access": drv.get("peer_access", unavailable("probe gave nothing")),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "os": os_info(),
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation(),
                   "executable": sys.executable},
        "known_issues": known_issues,
        "map_layout": map_layout(report_dir),
    }


# ---------------------------------------------------------------- views

def _ver(v: object) -> str:
    if isinstance(v, int) and v > 1000:
        return f"{v // 1000}.{(v % 1000) // 10}"
    return str(v)


def flatten(fp: dict) -> dict[str, str]:
    """The fingerprint as flat ``tmac.*`` string properties (JUnit testsuite properties).

    Only what identifies the stack; the argv and the map-layout data stay in the JSON
    (the layout as its sha256)."""
    if not fp:
        return {}
    p: dict[str, str] = {}
    p["tmac.environment_schema"] = str(fp.get("schema"))
    for k in ("run_id", "host", "sweep", "arch_option"):
        p[f"tmac.{k}"] = str(fp.get(k))
    drv = fp.get("driver") or {}
    p["tmac.driver.cuda_driver_version"] = str(drv.get("cuda_driver_version"))
    p["tmac.driver.kernel_module_version"] = str(drv.get("kernel_module_version"))
    for key in ("cuda_runtime", "nvrtc", "cccl", "cuda_headers", "nvcc"):
        v = fp.get(key)
        if isinstance(v, dict):
            for kk, vv in v.items():
                p[f"tmac.{key}.{kk}"] = str(vv)
        else:
            p[f"tmac.{key}"] = str(v)
    p["tmac.toolchain"] = toolchain_line(fp)
    p["tmac.builds"] = builds_line(fp.get("builds"))
    for name, v in (fp.get("packages") or {}).items():
        p[f"tmac.package.{name}"] = str(v)
    gpus = fp.get("gpus")
    if isinstance(gpus, list):
        p["tmac.gpu_count"] = str(len(gpus))
        for g in gpus:
            for kk in ("name", "uuid", "compute_capability", "memory_bytes", "pci_bus_id"):
                p[f"tmac.gpu.{g.get('ordinal')}.{kk}"] = str(g.get(kk))
    else:
        p["tmac.gpu_count"] = "0"
        p["tmac.gpus"] = str(gpus)
    peer = fp.get("peer_access")
    if isinstance(peer, dict):
        p["tmac.peer_access"] = json.dumps(peer.get("matrix"))
    else:
        p["tmac.peer_access"] = str(peer)
    osi = fp.get("os") or {}
    p["tmac.os.distro"] = str(osi.get("distro"))
    p["tmac.os.kernel"] = str(osi.get("kernel"))
    p["tmac.python"] = str((fp.get("python") or {}).get("version"))
    p["tmac.cuda_visible_devices"] = str(fp.get("cuda_visible_devices"))
    cmd = fp.get("command") or {}
    p["tmac.command"] = " ".join(cmd.get("invocation_args") or [])
    ki = fp.get("known_issues")
    if isinstance(ki, dict):
        p["tmac.known_issues.file"] = str(ki.get("file"))
        p["tmac.known_issues.sha256"] = str(ki.get("sha256"))
    ml = fp.get("map_layout")
    p["tmac.map_layout.sha256"] = str(ml.get("sha256")) if isinstance(ml, dict) else str(ml)
    return p


# Properties whose change between two runs is a change of the stack under test.
STACK_KEYS = re.compile(r"^tmac\.(driver\.|cuda_runtime|nvrtc\.version|nvrtc$|cccl\.version|cccl$|"
                        r"cuda_headers\.version|cuda_headers$|"
                        r"nvcc\.version|nvcc$|package\.|gpu_count|gpu\.\d+\.(name|uuid|compute_capability|memory_bytes)|"
                        r"peer_access|os\.|python|map_layout\.sha256|known_issues\.sha256|sweep|arch_option)")


def essentials(fp: dict) -> list[str]:
    """A few lines for ``pytest_report_header``."""
    drv = fp.get("driver") or {}
    cdv = drv.get("cuda_driver_version")
    kmv = drv.get("kernel_module_version")
    if is_unavailable(cdv):
        dline = f"driver {cdv}"
    else:
        dline = f"driver CUDA {_ver(cdv)} ({cdv})" + ("" if is_unavailable(kmv) else f", kernel module {kmv}")
    tl = toolchain_line(fp)
    rt = fp.get("cuda_runtime")
    nvcc = fp.get("nvcc")
    src = rt.get("source", "") if isinstance(rt, dict) else ""
    other = [f"CUDA runtime {_ver(rt['version']) if isinstance(rt, dict) else rt}"
             + (" (CuPy's)" if src.startswith("cupy") else ""),
             f"nvcc {nvcc['version'] if isinstance(nvcc, dict) else 'not on PATH'}"
             + (" (only for the nvcc-vs-NVRTC case)" if isinstance(nvcc, dict) else "")]
    pk = fp.get("packages") or {}
    cupy = next((v for k, v in pk.items() if k.startswith("cupy")), "?")
    pl = (f"cuda-bindings {pk.get('cuda-bindings')}, cupy {cupy}, numpy {pk.get('numpy')}, "
          f"pytest {pk.get('pytest')}, python {(fp.get('python') or {}).get('version')}")
    gpus = fp.get("gpus")
    if isinstance(gpus, list) and gpus:
        names: dict[str, int] = {}
        for g in gpus:
            mem = g.get("memory_bytes")
            mem_s = f", {mem / 2**30:.0f} GiB" if isinstance(mem, int) else ""
            key = f"{g.get('name')} (cc {g.get('compute_capability')}{mem_s})"
            names[key] = names.get(key, 0) + 1
        gline = "GPUs: " + ", ".join(f"{n} x {k}" for k, n in names.items())
        peer = fp.get("peer_access")
        if isinstance(peer, dict) and len(gpus) > 1:
            ok = all(v is True for row in peer["matrix"] for v in row if v is not None)
            gline += "; peer access " + ("all pairs" if ok else "NOT all pairs")
    elif isinstance(gpus, list):
        gline = "GPUs: none visible"
    else:
        gline = f"GPUs: {gpus}"
    return [dline, "toolchain (every kernel build): " + tl, "also: " + ", ".join(other),
            "packages: " + pl, gline]


def toolchain_line(fp: dict) -> str:
    """``NVRTC 13.5 (PyPI), CCCL 3.5.0 (PyPI), CUDA headers 13.5``, or why there is none."""
    return str(fp.get("toolchain", unavailable("not recorded (environment schema 1)")))


def builds_line(builds: object) -> str:
    """What the run's builds used: ``10 builds: NVRTC 13.5 (PyPI), ...``; several
    toolchains are each named (they should never be)."""
    if not isinstance(builds, list):
        return str(builds)
    if not builds:
        return "no kernel was built or read from the cache"
    return "; ".join(f"{len(b.get('kernels') or [])} kernels ({b.get('builds')} builds or cache reads) "
                     f"with {b.get('toolchain')}" for b in builds)


def props_of(run) -> dict[str, str]:
    """Flat properties of a run: the fingerprint's when present, else JUnit's."""
    props = dict(run.env_props)
    if run.env:
        props.update(flatten(run.env))
    return props


def _gib(v: str) -> str:
    try:
        return f"{int(v) / 2**30:.0f} GiB"
    except (TypeError, ValueError):
        return str(v)


def gpu_lines(props: dict[str, str]) -> list[str]:
    out = []
    ordinals = sorted({int(k.split(".")[2]) for k in props if re.match(r"^tmac\.gpu\.\d+\.", k)})
    for i in ordinals:
        g = lambda f: props.get(f"tmac.gpu.{i}.{f}", "?")  # noqa: E731
        out.append(f"{i}: {g('name')}, cc {g('compute_capability')}, {_gib(g('memory_bytes'))}, {g('uuid')}")
    if not out and props.get("tmac.gpus"):
        out.append(props["tmac.gpus"])
    return out


def _with_ver(v: str) -> str:
    try:
        return f"{v} (CUDA {_ver(int(v))})"
    except ValueError:
        return v


def summary_rows(props: dict[str, str]) -> list[tuple[str, str]]:
    """(label, value) rows for the environment table of a report."""
    def g(k, default="-"):
        return props.get(k, default)
    cdv = _with_ver(g("tmac.driver.cuda_driver_version"))
    rows = [
        ("host", g("tmac.host")),
        ("run id", g("tmac.run_id")),
        ("sweep", g("tmac.sweep")),
        ("command", g("tmac.command")),
        ("driver (cuDriverGetVersion)", cdv),
        ("driver (kernel module)", g("tmac.driver.kernel_module_version")),
        ("CUDA runtime" + (" (CuPy's)" if g("tmac.cuda_runtime.source", "").startswith("cupy") else ""),
         _with_ver(g("tmac.cuda_runtime.version", g("tmac.cuda_runtime")))),
        ("toolchain (every kernel build)", g("tmac.toolchain")),
        ("NVRTC", f"{g('tmac.nvrtc.version', g('tmac.nvrtc'))} {g('tmac.nvrtc.library', '')}".strip()),
        ("CCCL", f"{g('tmac.cccl.version', g('tmac.cccl'))} {g('tmac.cccl.include', '')}".strip()),
        ("CUDA headers", f"{g('tmac.cuda_headers.version', g('tmac.cuda_headers'))} "
                         f"{g('tmac.cuda_headers.include', '')}".strip()),
        ("kernel builds", g("tmac.builds")),
        ("nvcc", f"{g('tmac.nvcc.version', g('tmac.nvcc'))} {g('tmac.nvcc.path', '')}".strip()),
    ]
    pk = {k[len("tmac.package."):]: v for k, v in props.items() if k.startswith("tmac.package.")}
    if pk:
        rows.append(("packages", ", ".join(f"{k} {v}" for k, v in pk.items() if not is_unavailable(v))))
    rows += [("Python", g("tmac.python")),
             ("OS", f"{g('tmac.os.distro')}, kernel {g('tmac.os.kernel')}")]
    gl = gpu_lines(props)
    rows.append(("GPUs", "; ".join(gl) if gl else "-"))
    rows.append(("peer access", g("tmac.peer_access")))
    rows.append(("CUDA_VISIBLE_DEVICES", g("tmac.cuda_visible_devices")))
    rows.append(("map layout (sha256)", g("tmac.map_layout.sha256")))
    rows.append(("known issues file", f"{g('tmac.known_issues.file')} (sha256 {g('tmac.known_issues.sha256')[:12]})"))
    return rows
