"""GPU placement of xdist workers and the -n auto rule."""
import pytest

from fixtures.cuda_layer import cuda_env, placement as gpu


def state(n, cc=(9, 0)):
    devs = tuple(cuda_env.DeviceInfo(i, "NVIDIA H200", cc) for i in range(n))
    return cuda_env.DriverState(True, "", 13000, devs)


@pytest.mark.parametrize("worker,n,want", [("gw0", 1, 0), ("gw5", 1, 0), ("gw3", 2, 1),
                                           ("gw4", 2, 0), ("gw7", 4, 3)])
def test_workers_spread_over_gpus(monkeypatch, worker, n, want):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    assert gpu.home_device(state(n)).ordinal == want


def test_no_xdist_is_worker_zero(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert gpu.worker_index() == 0


def test_only_tma_gpus_are_homes(monkeypatch):
    devs = (cuda_env.DeviceInfo(0, "old", (8, 0)), cuda_env.DeviceInfo(1, "H200", (9, 0)))
    s = cuda_env.DriverState(True, "", 13000, devs)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    assert gpu.home_device(s).ordinal == 1


@pytest.mark.parametrize("n_gpus,cpus,want", [(0, 2, 2), (0, 64, 4), (1, 16, gpu.WORKERS_PER_GPU),
                                            (2, 32, 2 * gpu.WORKERS_PER_GPU), (1, 2, 2)])
def test_auto_workers(n_gpus, cpus, want):
    assert gpu.auto_workers(n_gpus, cpus) == want


@pytest.mark.parametrize("cc,arch", [((9, 0), "sm_90a"), ((10, 0), "sm_100a"), ((12, 0), "sm_120a")])
def test_arch_specific_target(cc, arch):
    assert gpu.arch_for(cc) == arch


def test_probe_never_raises():
    s = cuda_env.probe()
    assert s.available or s.reason
