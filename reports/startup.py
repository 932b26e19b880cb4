"""Per-worker start-up costs on a GPU node, for the cost model (``python -m reports.startup``):
imports, cuInit, the CUDA context, and an isolated child process (first call: process
start + context; second call: reused). Prints one JSON line."""
import json
import sys
import time
from pathlib import Path


def noop():
    return 0


def main() -> None:
    t0 = time.perf_counter()
    # imported here: their import time is what this tool measures
    import cupy
    import numpy  # noqa: F401
    from cuda.bindings import driver
    t_import = time.perf_counter() - t0
    t0 = time.perf_counter()
    driver.cuInit(0)
    t_init = time.perf_counter() - t0
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from fixtures.cuda_layer import cuda_env, placement as gpu  # lazy: reports/ imports nothing of fixtures at import time
    from fixtures.cuda_layer.isolation import run_isolated  # lazy: reports/ imports nothing of fixtures at import time
    t0 = time.perf_counter()
    g = gpu.Gpu.open(gpu.first_device(cuda_env.probe()))
    cupy.zeros(1).sum()
    t_ctx = time.perf_counter() - t0
    free, total = cupy.cuda.runtime.memGetInfo()
    first = run_isolated("reports.startup:noop", device=g.ordinal)
    second = run_isolated("reports.startup:noop", device=g.ordinal)
    print(json.dumps({"import_s": round(t_import, 3), "cuinit_s": round(t_init, 3),
                      "context_s": round(t_ctx, 3),
                      "context_mem_mib": round((total - free) / 2**20),
                      "isolated_first_call_s": round(first.seconds, 3),
                      "isolated_reused_call_s": round(second.seconds, 3)}))


if __name__ == "__main__":
    main()
