"""Hand-made run folders and JUnit files for the report self-tests."""
from __future__ import annotations

import json
from pathlib import Path
from xml.sax.saxutils import quoteattr

from reports.model import CaseResult, results_data


def env(driver=13000, kmv="580.65.06", gpu="NVIDIA H200", nvrtc="13.0", host="node1", layout_sha=None) -> dict:
    return {
        "schema": "tmac-environment/2", "run_id": f"run-{host}", "host": host, "role": "controller",
        "command": {"argv": ["pytest"], "invocation_args": ["-n", "auto"], "cwd": "/x", "xdist_workers": "auto"},
        "sweep": "standard", "arch_option": None,
        "driver": {"cuda_driver_version": driver, "kernel_module_version": kmv},
        "cuda_runtime": {"version": 13000, "source": "cupy"},
        "toolchain": f"NVRTC {nvrtc} (CUDA 13.0 toolkit), CCCL 3.0.1 (CUDA 13.0 toolkit), CUDA headers 13.0",
        "nvrtc": {"version": nvrtc, "library": "/usr/local/cuda/lib64/libnvrtc.so.13",
                  "origin": "CUDA 13.0 toolkit at /usr/local/cuda", "package": None},
        "cccl": {"version": "3.0.1", "include": "/usr/local/cuda/include/cccl",
                 "origin": "CUDA 13.0 toolkit at /usr/local/cuda", "chosen_by": "test"},
        "cuda_headers": {"version": "13.0", "include": "/usr/local/cuda/include"},
        "builds": [{"toolchain": f"NVRTC {nvrtc} (CUDA 13.0 toolkit), CCCL 3.0.1 (CUDA 13.0 toolkit), "
                                 "CUDA headers 13.0", "builds": 4, "nvrtc": nvrtc, "cccl": "3.0.1",
                    "kernels": ["tma_load.cu:sm_90a"]}],
        "nvcc": {"path": "/usr/local/cuda/bin/nvcc", "version": "13.0.48"},
        "packages": {"cuda-python": "13.0.0", "cupy-cuda13x": "14.2.0", "numpy": "2.3.0", "pytest": "9.0.0"},
        "gpus": [{"ordinal": 0, "name": gpu, "uuid": "GPU-0000", "compute_capability": "9.0", "arch": "sm_90a",
                  "memory_bytes": 150_000_000_000, "pci_bus_id": "0000:01:00.0"}],
        "peer_access": {"ordinals": [0], "matrix": [[None]]},
        "cuda_visible_devices": None,
        "os": {"system": "Linux", "kernel": "6.8.0", "version": "#1", "machine": "x86_64", "distro": "Ubuntu 24.04"},
        "python": {"version": "3.12.3", "implementation": "CPython", "executable": "/usr/bin/python3"},
        "known_issues": {"file": "known_issues.toml", "sha256": "abc", "entries": 0},
        "map_layout": {"file": "map_layout.json", "sha256": layout_sha, "data": None} if layout_sha else
        "unavailable: no map_layout.json",
    }


def run_dir(path: Path, cases: dict[str, object], environment: dict | None = None,
            layout: dict | None = None, known: list | None = None) -> Path:
    """cases: id -> state, or id -> dict of CaseResult fields. results.json is written as
    the suite writes it (``reports.model.results_data``)."""
    path.mkdir(parents=True, exist_ok=True)
    out = []
    for cid, v in cases.items():
        c = {"id": cid, "state": v} if isinstance(v, str) else dict(v, id=cid)
        out.append(CaseResult(**c))
    data = results_data({"run_id": path.name, "exitstatus": 0}, out)
    if known is not None:
        data["known_issues"] = {"file": "known_issues.toml", "entries": known}
    (path / "results.json").write_text(json.dumps(data))
    if environment is not None:
        (path / "environment.json").write_text(json.dumps(environment))
    if layout is not None:
        (path / "map_layout.json").write_text(json.dumps(layout))
    return path


def junit(path: Path, cases: dict[str, str], props: dict[str, str] | None = None) -> Path:
    """A JUnit file as pytest (xunit2) writes it; case ids are node ids."""
    rows = []
    for cid, state in cases.items():
        mod, _, rest = cid.partition("::")
        names = rest.split("::")
        classname = ".".join([mod[:-3].replace("/", ".")] + names[:-1])
        attrs = f"classname={quoteattr(classname)} name={quoteattr(names[-1])} time=\"0.01\""
        body = {
            "passed": "",
            "failed": '<failure message="[rule R-1] [case c] mismatch">trace</failure>',
            "could-not-build": '<failure message="could-not-build: NVRTC could not build x.cu">log</failure>',
            "skipped": '<skipped type="pytest.skip" message="no GPU: no CUDA driver">x</skipped>',
            "known-issue": '<skipped type="pytest.xfail" message="known-issue KI-1: bad [evidence: https://e.x/1]"/>',
        }[state]
        rows.append(f"<testcase {attrs}>{body}</testcase>")
    p = "".join(f"<property name={quoteattr(k)} value={quoteattr(v)}/>" for k, v in (props or {}).items())
    path.write_text('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" hostname="n1">'
                    f"<properties>{p}</properties>{''.join(rows)}</testsuite></testsuites>")
    return path


def collection_error(message: str = "ImportError: cannot import name 'x'") -> dict:
    """A collection error as results.json holds it (its id is the file's node id)."""
    return {"state": "failed", "phase": "collect", "message": f"collection error: {message}"}


def junit_add_collection_error(path: Path, file_nodeid: str) -> Path:
    """Adds to a JUnit file the <testcase> pytest writes for a file that did not collect."""
    name = file_nodeid[:-3].replace("/", ".") if file_nodeid.endswith(".py") else file_nodeid
    row = (f'<testcase classname="" name={quoteattr(name)} time="0.000">'
           '<error message="collection failure">ImportError</error></testcase>')
    path.write_text(path.read_text().replace("</testsuite>", row + "</testsuite>"))
    return path


def set_meta(run: Path, **meta) -> Path:
    """Sets top-level keys of a run folder's results.json (exitstatus, not_reported, end, gpu...)."""
    res = run / "results.json"
    res.write_text(json.dumps(dict(json.loads(res.read_text()), **meta)))
    return run
