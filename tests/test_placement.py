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



class _FakeDriver:
    """The calls of cuda.bindings.driver that use_device makes, recording the thread of
    each retain; ``fail``: the retain returns CUDA_ERROR_OUT_OF_MEMORY."""

    def __init__(self, fail=False):
        self.fail, self.threads, self.current = fail, [], None

    def cuDeviceGet(self, ordinal):
        return (0, ordinal)

    def cuDevicePrimaryCtxRetain(self, dev):
        import threading
        self.threads.append(threading.current_thread().name)
        return (2, None) if self.fail else (0, f"ctx-{dev}")

    def cuCtxSetCurrent(self, ctx):
        self.current = ctx
        return (0,)

    def cuGetErrorName(self, err):
        return (0, b"CUDA_ERROR_OUT_OF_MEMORY")


@pytest.mark.parametrize("fail", [False, True])
def test_open_ahead_retains_the_context_in_a_thread_and_leaves_a_failure_to_the_case(monkeypatch, fail):
    """A worker starts opening its GPU as its session starts (harness
    pytest_sessionstart), so that it overlaps the collection: the primary context is
    retained in a thread, once, and use_device (the first GPU case) takes it. A failure
    there raises nothing in the thread: use_device meets it again and raises it."""
    import sys
    import types
    import cuda.bindings
    from fixtures.cuda_layer.launch import CudaError
    fake = _FakeDriver(fail)
    used = []
    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(
        Device=lambda n: types.SimpleNamespace(use=lambda: used.append(n))))
    monkeypatch.setattr(cuda.bindings, "driver", fake)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr(gpu, "_contexts", {})
    monkeypatch.setattr(gpu, "_ahead", {})
    gpu.open_ahead(5)
    thread = gpu._ahead[5]
    gpu.open_ahead(5)                       # asked again while it opens: still one thread
    thread.join(30)
    assert fake.threads == ["open-gpu-5"]
    if fail:
        with pytest.raises(CudaError, match="CUDA_ERROR_OUT_OF_MEMORY"):
            gpu.use_device(5)
        assert fake.threads == ["open-gpu-5", "MainThread"] and used == []
    else:
        assert gpu.use_device(5) == "ctx-5" and fake.current == "ctx-5" and used == [5]
        assert fake.threads == ["open-gpu-5"] and gpu._ahead == {}


def test_a_fork_waits_for_the_gpu_opened_ahead(monkeypatch):
    """settle_ahead returns only once open_ahead's thread is done, and a forked isolated
    child is forked after it (a fork while that thread imports CuPy left the child a held
    import lock: a self-test's forked child hung on an H100 node)."""
    import inspect
    import threading
    import cuda.bindings
    from fixtures.cuda_layer import isolation
    release = threading.Event()
    fake = _FakeDriver()
    retain = fake.cuDevicePrimaryCtxRetain
    fake.cuDevicePrimaryCtxRetain = lambda dev: (release.wait(30), retain(dev))[1]
    monkeypatch.setattr(cuda.bindings, "driver", fake)
    monkeypatch.setattr(gpu, "_contexts", {})
    monkeypatch.setattr(gpu, "_ahead", {})
    gpu.open_ahead(2)
    settled = threading.Thread(target=gpu.settle_ahead)
    settled.start()
    settled.join(0.3)
    assert settled.is_alive()                 # still opening: settle_ahead waits
    release.set()
    settled.join(30)
    assert not settled.is_alive() and gpu._contexts == {2: "ctx-2"}
    src = inspect.getsource(isolation.Forked.__init__)
    assert src.index("settle_ahead()") < src.index("os.fork()")
