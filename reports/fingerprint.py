"""Reading an environment fingerprint (``environment.json``, schema ``tmac-environment/4``,
gathered by ``fixtures/plugins/environment/survey.py``, which lists its keys): the flat
``tmac.*`` properties of JUnit, the header lines, the matrix rows.
"""
from __future__ import annotations

import json
import re


def unavailable(reason: str) -> str:
    return f"unavailable: {reason}"


def is_unavailable(v: object) -> bool:
    return isinstance(v, str) and v.startswith("unavailable:")


# ---------------------------------------------------------------- views

def cuda_version(v: object) -> str:
    """A CUDA version as cuDriverGetVersion gives it (13010) in words ("13.1"); else as it is."""
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
    variables = variables_of(fp)
    if isinstance(variables, dict):
        p[ENV_VARS] = f"{len(variables)} variables recorded"
        p.update({f"{ENV_VAR}{name}": str(v) for name, v in variables.items()})
    else:
        p[ENV_VARS] = str(variables)
    cmd = fp.get("command") or {}
    p["tmac.command"] = " ".join(cmd.get("invocation_args") or [])
    ki = fp.get("known_issues")
    if isinstance(ki, dict):
        p["tmac.known_issues.file"] = str(ki.get("file"))
        p["tmac.known_issues.sha256"] = str(ki.get("sha256"))
    ml = fp.get("map_layout")
    p["tmac.map_layout.sha256"] = str(ml.get("sha256")) if isinstance(ml, dict) else str(ml)
    h = harness_of(fp)
    for k in ("sources_sha256", "constraints"):   # the packages stay in the JSON (harness.packages)
        p[f"tmac.harness.{k}"] = str(h.get(k))
    return p


def harness_of(fp: dict) -> dict:
    """The ``harness`` section (schema 3), or its keys each "unavailable: ..." (older files)."""
    h = fp.get("harness")
    if isinstance(h, dict):
        return h
    why = unavailable(f"not recorded (environment schema {str(fp.get('schema', '?')).rpartition('/')[2]})")
    return {"packages": why, "extras": why, "sources_sha256": why, "constraints": why, "git_commit": why}


# The user's environment variables (environment.json's environment_variables.user, schema
# 4) as flat properties: ENV_VAR + name for each (its value, "<set>" for a secret's), and
# ENV_VARS: "<n> variables recorded", or why none are ("unavailable: not recorded
# (environment schema 3)").
ENV_VARS = "tmac.env"
ENV_VAR = "tmac.env."


def variables_of(fp: dict) -> dict | str:
    """The user's environment variables {name: value} (``environment_variables.user``, schema
    4), or why there are none: "unavailable: not recorded (environment schema 3)" (older files)."""
    ev = fp.get("environment_variables")
    user = ev.get("user") if isinstance(ev, dict) else ev
    if isinstance(user, dict) or is_unavailable(user):
        return user
    return unavailable(f"not recorded (environment schema {str(fp.get('schema', '?')).rpartition('/')[2]})")


def variables_recorded(props: dict[str, str]) -> bool:
    """Whether flat properties (``flatten``'s, or a JUnit file's) hold the user's environment
    variables: a run of schema 4 or later."""
    v = props.get(ENV_VARS)
    return v is not None and not is_unavailable(v)


def harness_line(fp: dict) -> str:
    """``extra cu13, packages match constraints/cu13.txt, sources 057e298d5f9a, git a1408c1f3d4d``."""
    h = harness_of(fp)
    src = h.get("sources_sha256")
    if is_unavailable(src):
        return str(src)
    con = str(h.get("constraints"))
    extras = h.get("extras")
    git = h.get("git_commit")
    parts = [f"extra {', '.join(extras)}"] if isinstance(extras, list) and extras else []
    parts.append(f"packages: {con}" if is_unavailable(con) or " " in con else f"packages match {con}")
    parts.append(f"sources {str(src)[:12]}")
    if not is_unavailable(git):
        parts.append(f"git {str(git)[:12]}")
    return ", ".join(parts)


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
        dline = f"driver CUDA {cuda_version(cdv)} ({cdv})" + ("" if is_unavailable(kmv) else f", kernel module {kmv}")
    tl = toolchain_line(fp)
    rt = fp.get("cuda_runtime")
    nvcc = fp.get("nvcc")
    src = rt.get("source", "") if isinstance(rt, dict) else ""
    other = [f"CUDA runtime {cuda_version(rt['version']) if isinstance(rt, dict) else rt}"
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
            "packages: " + pl, "harness: " + harness_line(fp), gline]


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
        return f"{v} (CUDA {cuda_version(int(v))})"
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
    src, con = g("tmac.harness.sources_sha256"), g("tmac.harness.constraints")
    rows.append(("harness (sources sha256; packages)",
                 src if src == con else f"{src if is_unavailable(src) else src[:12]}; {con}"))
    rows.append(("map layout (sha256)", g("tmac.map_layout.sha256")))
    rows.append(("known issues file", f"{g('tmac.known_issues.file')} (sha256 {g('tmac.known_issues.sha256')[:12]})"))
    return rows
