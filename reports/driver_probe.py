"""Driver-side facts for the environment fingerprint, read in a child process.

Run as a script (``python reports/driver_probe.py``); prints one JSON object.
It runs in its own process on purpose: ``cuInit`` in the pytest process would
fix the visible devices before the harness places its xdist workers, and a
broken driver can hang or crash this probe without taking the run with it.

Standard library only (ctypes). Every field is either the value or a string
``"unavailable: <reason>"``.
"""
from __future__ import annotations

import ctypes
import json
import sys

CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76


def _unavailable(reason: str) -> str:
    return f"unavailable: {reason}"


def _load(names):
    errors = []
    for name in names:
        try:
            return ctypes.CDLL(name), None
        except OSError as e:
            errors.append(str(e))
    return None, errors[0] if errors else "nothing to load"


def _cu_error(lib, code: int) -> str:
    name = ctypes.c_char_p()
    try:
        if lib.cuGetErrorName(code, ctypes.byref(name)) == 0 and name.value:
            return f"{name.value.decode()} ({code})"
    except Exception:
        pass
    return f"CUresult {code}"


def probe_nvml() -> dict:
    out = {}
    lib, err = _load(["libnvidia-ml.so.1", "libnvidia-ml.so"])
    if lib is None:
        version = _proc_driver_version()
        out["kernel_module_version"] = version or _unavailable(f"NVML not loadable ({err})")
        return out
    rc = lib.nvmlInit_v2()
    if rc != 0:
        out["kernel_module_version"] = _proc_driver_version() or _unavailable(f"nvmlInit_v2 returned {rc}")
        return out
    buf = ctypes.create_string_buffer(96)
    rc = lib.nvmlSystemGetDriverVersion(buf, 96)
    out["kernel_module_version"] = buf.value.decode() if rc == 0 else _unavailable(f"nvmlSystemGetDriverVersion returned {rc}")
    try:
        lib.nvmlShutdown()
    except Exception:
        pass
    return out


def _proc_driver_version():
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as f:
            first = f.readline()
    except OSError:
        return None
    for tok in first.split():
        parts = tok.split(".")
        if len(parts) >= 2 and all(p.isdigit() for p in parts):
            return tok
    return None


def probe_cuda() -> dict:
    out: dict = {}
    lib, err = _load(["libcuda.so.1", "libcuda.so"])
    if lib is None:
        reason = f"no CUDA driver (libcuda not loadable: {err})"
        out["cuda_driver_version"] = _unavailable(reason)
        out["gpus"] = _unavailable(reason)
        out["peer_access"] = _unavailable(reason)
        return out
    v = ctypes.c_int()
    rc = lib.cuDriverGetVersion(ctypes.byref(v))
    out["cuda_driver_version"] = v.value if rc == 0 else _unavailable(f"cuDriverGetVersion: {_cu_error(lib, rc)}")
    rc = lib.cuInit(0)
    if rc != 0:
        reason = f"cuInit: {_cu_error(lib, rc)}"
        out["gpus"] = _unavailable(reason)
        out["peer_access"] = _unavailable(reason)
        return out
    n = ctypes.c_int()
    rc = lib.cuDeviceGetCount(ctypes.byref(n))
    if rc != 0:
        reason = f"cuDeviceGetCount: {_cu_error(lib, rc)}"
        out["gpus"] = _unavailable(reason)
        out["peer_access"] = _unavailable(reason)
        return out
    gpus = []
    handles = []
    for ordinal in range(n.value):
        dev = ctypes.c_int()
        lib.cuDeviceGet(ctypes.byref(dev), ordinal)
        handles.append(dev)
        g: dict = {"ordinal": ordinal}
        name = ctypes.create_string_buffer(256)
        g["name"] = name.value.decode() if lib.cuDeviceGetName(name, 256, dev) == 0 else _unavailable("cuDeviceGetName failed")
        uuid = (ctypes.c_ubyte * 16)()
        fn = getattr(lib, "cuDeviceGetUuid_v2", None) or lib.cuDeviceGetUuid
        if fn(uuid, dev) == 0:
            h = bytes(uuid).hex()
            g["uuid"] = f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
        else:
            g["uuid"] = _unavailable("cuDeviceGetUuid failed")
        major, minor = ctypes.c_int(), ctypes.c_int()
        lib.cuDeviceGetAttribute(ctypes.byref(major), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        lib.cuDeviceGetAttribute(ctypes.byref(minor), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
        g["compute_capability"] = f"{major.value}.{minor.value}"
        # The arch-specific target the harness compiles for on this GPU.
        g["arch"] = f"sm_{major.value}{minor.value}a" if major.value >= 9 else f"sm_{major.value}{minor.value}"
        mem = ctypes.c_size_t()
        fn = getattr(lib, "cuDeviceTotalMem_v2", None) or lib.cuDeviceTotalMem
        g["memory_bytes"] = mem.value if fn(ctypes.byref(mem), dev) == 0 else _unavailable("cuDeviceTotalMem failed")
        bus = ctypes.create_string_buffer(64)
        g["pci_bus_id"] = bus.value.decode() if lib.cuDeviceGetPCIBusId(bus, 64, dev) == 0 else _unavailable("cuDeviceGetPCIBusId failed")
        gpus.append(g)
    out["gpus"] = gpus
    matrix = []
    for i, a in enumerate(handles):
        row = []
        for j, b in enumerate(handles):
            if i == j:
                row.append(None)
                continue
            can = ctypes.c_int()
            rc = lib.cuDeviceCanAccessPeer(ctypes.byref(can), a, b)
            row.append(bool(can.value) if rc == 0 else _unavailable(_cu_error(lib, rc)))
        matrix.append(row)
    out["peer_access"] = {"ordinals": list(range(n.value)), "matrix": matrix,
                          "meaning": "matrix[i][j]: cuDeviceCanAccessPeer(i -> j); null on the diagonal"}
    return out


def probe_runtime() -> object:
    """The CUDA runtime the Python stack loads (CuPy's, else cuda.bindings')."""
    errors = []
    try:
        import cupy  # noqa: F401
        from cupy.cuda import runtime
        return {"version": int(runtime.runtimeGetVersion()), "source": "cupy.cuda.runtime.runtimeGetVersion"}
    except Exception as e:  # ImportError, CUDARuntimeError, missing libcudart...
        errors.append(f"cupy: {type(e).__name__}: {e}")
    try:
        from cuda.bindings import runtime as crt
        err, ver = crt.cudaRuntimeGetVersion()
        if int(err) == 0:
            return {"version": int(ver), "source": "cuda.bindings.runtime.cudaRuntimeGetVersion"}
        errors.append(f"cuda.bindings: {err}")
    except Exception as e:
        errors.append(f"cuda.bindings: {type(e).__name__}: {e}")
    return _unavailable("; ".join(errors))


def main() -> int:
    out = {}
    try:
        out.update(probe_cuda())
    except Exception as e:  # keep the probe's contract: JSON, always
        r = _unavailable(f"probe crashed: {type(e).__name__}: {e}")
        out.update(cuda_driver_version=r, gpus=r, peer_access=r)
    try:
        out.update(probe_nvml())
    except Exception as e:
        out["kernel_module_version"] = _unavailable(f"{type(e).__name__}: {e}")
    out["cuda_runtime"] = probe_runtime()
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
