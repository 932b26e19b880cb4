"""The node's case reads the run's environment fingerprint (fixtures/plugins/run_control/
node_fingerprint.py): what it names missing, and how a worker reads the controller's."""
from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import pytest

from fixtures.cuda_layer import cuda_env
from fixtures.plugins.reporting import run_reports
from fixtures.plugins.run_control import node_fingerprint as nf

DEVS = tuple(cuda_env.DeviceInfo(i, "NVIDIA H100 80GB HBM3", (9, 0), f"GPU-{i:08x}-aaaa-bbbb-cccc-{i:012x}",
                                 f"0000:{0x18 + i:02X}:00.0") for i in range(2))


def whole() -> dict:
    return {"driver": {"cuda_driver_version": 13000, "kernel_module_version": "580.159.04"},
            "gpus": [{"ordinal": d.ordinal, "name": d.name, "uuid": d.uuid, "compute_capability": "9.0",
                      "memory_bytes": 85 << 30, "pci_bus_id": d.pci_bus_id} for d in DEVS],
            "peer_access": {"ordinals": [0, 1], "matrix": [[None, True], [True, None]]}}


def test_a_whole_fingerprint_lacks_nothing():
    assert nf.fingerprint_gaps(whole(), DEVS) == []


def test_a_probe_that_could_not_start_lacks_the_driver_and_every_gpu():
    r = "unavailable: driver probe exited 2: can't open file 'driver_probe.py'"
    fp = {"driver": {"cuda_driver_version": r, "kernel_module_version": r}, "gpus": r, "peer_access": r}
    gaps = nf.fingerprint_gaps(fp, DEVS)
    assert gaps[0].startswith("the CUDA driver version (driver.cuda_driver_version: \"unavailable: driver")
    assert gaps[1].startswith("the driver's kernel module version")
    assert gaps[2].startswith(f"every GPU CUDA sees here: {DEVS[0].label} (NVIDIA H100 80GB HBM3), "
                              f"{DEVS[1].label} (NVIDIA H100 80GB HBM3) (gpus: \"unavailable: driver probe")


def test_a_gpu_cuda_sees_that_the_fingerprint_lacks_is_named():
    fp = whole()
    fp["gpus"] = fp["gpus"][:1]
    fp["gpus"][0]["pci_bus_id"] = "unavailable: cuDeviceGetPCIBusId failed"
    gaps = nf.fingerprint_gaps(fp, DEVS)
    assert gaps == [f"{DEVS[0].label}'s pci_bus_id: 'unavailable: cuDeviceGetPCIBusId failed'",
                    f"{DEVS[1].label} (NVIDIA H100 80GB HBM3), which CUDA sees here"]
    fp = whole()
    fp["peer_access"] = "unavailable: probe gave nothing"
    assert nf.fingerprint_gaps(fp, DEVS) == ["the GPUs' peer access (peer_access: 'unavailable: probe gave nothing')"]
    assert nf.fingerprint_gaps(fp, DEVS[:1]) == []


def _worker(tmp_path):
    config = SimpleNamespace(workerinput={}, stash={run_reports._DIR_KEY: tmp_path})
    return config


def test_a_worker_reads_the_controllers_fingerprint_once_written(tmp_path):
    config = _worker(tmp_path)
    threading.Timer(0.3, lambda: (tmp_path / "environment.json").write_text(json.dumps(whole()))).start()
    t0 = time.monotonic()
    assert nf.run_fingerprint(config, wait_s=10) == whole()
    assert time.monotonic() - t0 >= 0.2


def test_a_worker_without_a_fingerprint_says_so(tmp_path):
    got = nf.run_fingerprint(_worker(tmp_path), wait_s=0.2)
    assert got == f"{tmp_path / 'environment.json'} was not written within 0 s of the run's start"


@pytest.mark.parametrize("outcome", ["skipped", "failed"])
def test_only_a_passed_node_check_reads_the_fingerprint(monkeypatch, outcome):
    monkeypatch.setattr(nf, "node_outcome", lambda config: (outcome, "why"))
    monkeypatch.setattr(nf, "run_fingerprint", lambda config: pytest.fail("read"))
    assert nf.node_case(object()) == (outcome, "why")
