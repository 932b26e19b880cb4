"""Time to verdict: where a conformance run's time goes (issue 8).

    python -m reports bench [--sweeps smoke,standard,full] [--workers 1,2,4,8,16,auto]
                            [--out DIR] [--suites PATH ...]

Runs the suite in child pytest processes and measures: the wall time of each sweep
under ``-n auto`` from a cold kernel cache; cases per second per suite (from each
run's JUnit); NVRTC compile time of every kernel, cold and warm; worker scaling;
one GPU against all GPUs when there are several. Prints a table, writes
``bench.json`` into the output folder.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = 1


def _pytest(args: list[str], env: dict | None = None, timeout: float = 560) -> dict:
    """One pytest run in a child process: wall time, exit code, JUnit counts per suite."""
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               f"--junitxml={junit}", *args]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **(env or {})})
        wall = time.perf_counter() - t0
        suites = _junit_suites(junit) if junit.exists() else {}
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    return {"args": args, "wall_s": round(wall, 2), "exit": proc.returncode, "summary": last,
            "suites": suites, "cases": sum(s["cases"] for s in suites.values()),
            "output_tail": (proc.stdout + proc.stderr)[-4000:]}


def _junit_suites(path: Path) -> dict:
    """Per suite file: cases, outcomes, and the summed test time JUnit records."""
    out: dict = defaultdict(lambda: {"cases": 0, "passed": 0, "failed": 0, "skipped": 0,
                                     "time_s": 0.0})
    for case in ET.parse(path).getroot().iter("testcase"):
        suite = (case.get("classname") or "?").split(".")
        name = next((p for p in suite if p.startswith("test_")), suite[-1])
        s = out[name]
        s["cases"] += 1
        s["time_s"] += float(case.get("time") or 0)
        if case.find("failure") is not None or case.find("error") is not None:
            s["failed"] += 1
        elif case.find("skipped") is not None:
            s["skipped"] += 1
        else:
            s["passed"] += 1
    return {k: {**v, "time_s": round(v["time_s"], 2)} for k, v in sorted(out.items())}


def compile_times(arch: str | None) -> list[dict]:
    """Every kernel's NVRTC build, into an empty cache (cold) and again (warm)."""
    sys.path.insert(0, str(ROOT))
    from fixtures.cuda_layer import build, cuda_env, placement as gpu  # lazy: reports/ imports nothing of fixtures at import time
    if arch is None:
        state = cuda_env.probe()
        arch = gpu.arch_for(gpu.home_device(state).cc) if state.available else "sm_90a"
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        for src in sorted(p.name for p in build.KERNEL_DIR.glob("*.cu")):
            if src == "replace_sm90a_only.cu":
                continue
            times = []
            for _ in range(2):
                t0 = time.perf_counter()
                try:
                    build.compile_kernel(src, arch=arch, cache_dir=cache)
                except build.BuildError as exc:
                    times.append(f"error: {exc.result}")
                    break
                times.append(round(time.perf_counter() - t0, 3))
            rows.append({"kernel": src, "arch": arch, "cold_s": times[0],
                         "warm_s": times[1] if len(times) > 1 else None})
    return rows


def gpu_count() -> int:
    sys.path.insert(0, str(ROOT))
    from fixtures.cuda_layer import cuda_env  # lazy: reports/ imports nothing of fixtures at import time
    state = cuda_env.probe()
    return len(state.tma_devices) if state.available else 0


def startup_costs(samples: int = 3) -> list[dict]:
    """``python -m reports.startup`` a few times: imports, cuInit, context, isolated child."""
    rows = []
    for _ in range(samples):
        p = subprocess.run([sys.executable, "-m", "reports.startup"], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
        try:
            rows.append(json.loads(p.stdout.strip().splitlines()[-1]))
        except (IndexError, ValueError):
            rows.append({"error": (p.stderr or p.stdout)[-500:]})
    return rows


def collection_time(sweep: str, extra) -> float:
    """Wall time of collecting the whole sweep in one process (what each worker repeats)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider",
                    f"--sweep={sweep}", *extra], cwd=ROOT, capture_output=True, timeout=300)
    return round(time.perf_counter() - t0, 2)


def run(sweeps, workers, extra, arch) -> dict:
    result: dict = {"schema": SCHEMA, "gpus": gpu_count(), "cpus": os.cpu_count(),
                    "compile": compile_times(arch), "sweeps": [], "scaling": [], "gpu_split": []}
    result["startup"] = startup_costs() if result["gpus"] else []
    result["collection_s"] = {s: collection_time(s, extra) for s in sweeps}
    for sweep in sweeps:                       # -n auto, cold cache
        with tempfile.TemporaryDirectory() as cache:
            r = _pytest(["-n", "auto", f"--sweep={sweep}", f"--kernel-cache={cache}", *extra])
        result["sweeps"].append({"sweep": sweep, "cache": "cold", **r})
        print(f"sweep {sweep:8s} cold: {r['wall_s']:7.1f} s  {r['cases']:6d} cases  {r['summary']}",
              flush=True)
    scale_sweep = sweeps[0]
    with tempfile.TemporaryDirectory() as cache:   # warm the cache once, then scale workers
        _pytest(["-n", "auto", f"--sweep={scale_sweep}", f"--kernel-cache={cache}", "--co", *extra])
        for n in workers:
            r = _pytest(["-n", str(n), f"--sweep={scale_sweep}", f"--kernel-cache={cache}", *extra])
            result["scaling"].append({"workers": n, "sweep": scale_sweep, "cache": "warm", **r})
            print(f"workers {n!s:>4} ({scale_sweep}, warm): {r['wall_s']:7.1f} s  {r['summary']}",
                  flush=True)
        if result["gpus"] >= 2:
            for visible in ("0", ",".join(str(i) for i in range(result["gpus"]))):
                r = _pytest(["-n", "auto", f"--sweep={scale_sweep}", f"--kernel-cache={cache}",
                             *extra], env={"CUDA_VISIBLE_DEVICES": visible})
                result["gpu_split"].append({"visible": visible, **r})
    return result


def table(result: dict) -> str:
    lines = [f"GPUs: {result['gpus']}  CPUs: {result['cpus']}", "",
             "| sweep | cache | workers | cases | wall s | cases/s |", "|---|---|---|---|---|---|"]
    for r in result["sweeps"]:
        rate = r["cases"] / r["wall_s"] if r["wall_s"] else 0
        lines.append(f"| {r['sweep']} | cold | auto | {r['cases']} | {r['wall_s']} | {rate:.0f} |")
    for r in result["scaling"]:
        rate = r["cases"] / r["wall_s"] if r["wall_s"] else 0
        lines.append(f"| {r['sweep']} | warm | {r['workers']} | {r['cases']} | {r['wall_s']} | {rate:.0f} |")
    for r in result["gpu_split"]:
        lines.append(f"| GPUs {r['visible']} | warm | auto | {r['cases']} | {r['wall_s']} | |")
    lines += ["", "| sweep | collection in one process s |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in result.get("collection_s", {}).items()]
    if result.get("startup"):
        keys = [k for k in result["startup"][0] if k != "error"]
        lines += ["", "| start-up (per worker) | " + " | ".join(keys) + " |",
                  "|---|" + "---|" * len(keys)]
        for i, row in enumerate(result["startup"]):
            lines.append(f"| sample {i + 1} | " + " | ".join(str(row.get(k)) for k in keys) + " |")
    lines += ["", "| suite (largest sweep) | cases | summed test time s |", "|---|---|---|"]
    if result["sweeps"]:
        for name, s in result["sweeps"][-1]["suites"].items():
            lines.append(f"| {name} | {s['cases']} | {s['time_s']} |")
    lines += ["", "| kernel | arch | NVRTC cold s | warm (cache hit) s |", "|---|---|---|---|"]
    for c in result["compile"]:
        lines.append(f"| {c['kernel']} | {c['arch']} | {c['cold_s']} | {c['warm_s']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None, prog: str = "python -m reports bench") -> int:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    p.add_argument("--sweeps", default="smoke,standard,full")
    p.add_argument("--workers", default="1,2,4,8,16,auto")
    p.add_argument("--out", default=str(ROOT / "reports" / "out" / "bench"))
    p.add_argument("--arch", default=None)
    p.add_argument("suites", nargs="*", help="suite paths (default: all, per tox.ini)")
    a = p.parse_args(argv)
    sweeps = [s for s in a.sweeps.split(",") if s]
    bad = [s for s in sweeps if s not in ("smoke", "standard", "full")]
    if bad:
        p.error(f"unknown sweep(s): {', '.join(bad)}")
    workers = [w for w in a.workers.split(",") if w]
    if any(w != "auto" and not w.isdigit() for w in workers):
        p.error(f"--workers takes numbers or 'auto': {a.workers}")
    from fixtures.cuda_layer.paths import writable_folder  # lazy: reports/ imports nothing of fixtures at import time
    try:
        out = writable_folder(a.out)          # before the minutes of runs, not after
    except ValueError as e:
        print(f"{prog}: cannot write into --out: {e}", file=sys.stderr)
        return 2
    result = run(sweeps, workers, a.suites, a.arch)
    text = table(result)
    try:
        (out / "bench.json").write_text(json.dumps(result, indent=2))
        (out / "bench.md").write_text(text + "\n")
    except OSError as e:
        print(text)
        print(f"{prog}: cannot write into {out}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
