"""Which GPUs a run uses, the -n auto rule, and the pairs of the two-GPU cases."""
import pytest

from fixtures.cuda_layer import cuda_env, placement as gpu


def state(n, cc=(9, 0)):
    devs = tuple(cuda_env.DeviceInfo(i, "NVIDIA H200", cc, f"GPU-{i:08x}-0000-0000-0000-000000000000",
                                     f"0000:{0x18 + i:02X}:00.0") for i in range(n))
    return cuda_env.DriverState(True, "", 13000, devs)


@pytest.mark.parametrize("text,n,want", [(None, 4, [0, 1, 2, 3]), ("", 2, [0, 1]), ("all", 3, [0, 1, 2]),
                                         ("2", 4, [2]), ("3,1", 4, [1, 3]), ("1-3", 8, [1, 2, 3]),
                                         ("0, 4-5", 8, [0, 4, 5])])
def test_the_run_uses_every_gpu_or_the_ones_named(text, n, want):
    assert [d.ordinal for d in gpu.parse_selection(text, state(n))] == want


@pytest.mark.parametrize("text,why", [("4", "GPU 4: CUDA sees 4 GPU"), ("1,1", "GPU 1 is named twice"),
                                      ("x", "'x' is not a GPU ordinal"), ("3-1", "'3-1' is not"),
                                      ("-1", "'-1' is not"), ("0,", "'' is not")])
def test_a_bad_choice_of_gpus_says_what_is_wrong(text, why):
    with pytest.raises(ValueError, match=why):
        gpu.parse_selection(text, state(4))


def test_only_tma_gpus_run_cases_and_they_share_one_compute_capability():
    devs = (cuda_env.DeviceInfo(0, "old", (8, 0)), cuda_env.DeviceInfo(1, "H200", (9, 0)),
            cuda_env.DeviceInfo(2, "B200", (10, 0)))
    s = cuda_env.DriverState(True, "", 13000, devs)
    assert [d.ordinal for d in gpu.parse_selection("1", s)] == [1]
    with pytest.raises(ValueError, match=r"GPU 0 \(old, cc 8.0\) has no tensor maps"):
        gpu.parse_selection("0", s)
    with pytest.raises(ValueError, match="differ in compute capability .*GPU 1: sm_90; GPU 2: sm_100"):
        gpu.parse_selection(None, s)


def test_the_run_reads_its_gpus_from_the_environment(monkeypatch):
    monkeypatch.setenv(gpu.SELECT_ENV, "1,3")
    assert [d.ordinal for d in gpu.run_devices(state(4))] == [1, 3]
    assert gpu.first_device(state(4)).ordinal == 1
    monkeypatch.delenv(gpu.SELECT_ENV)
    assert [d.ordinal for d in gpu.run_devices(state(2))] == [0, 1]
    assert gpu.run_devices(cuda_env.DriverState(False, "no driver")) == ()


def test_a_gpu_is_named_by_ordinal_uuid_and_pci_bus_id():
    d = state(3).devices[2]
    assert d.label == "GPU 2 (GPU-00000002-0000-0000-0000-000000000000, 0000:1A:00.0)"
    assert cuda_env.DeviceInfo(5, "x", (9, 0)).label == "GPU 5"


@pytest.mark.parametrize("n_gpus,cpus,want", [(0, 2, 2), (0, 64, 4), (1, 16, gpu.WORKERS_WIDE),
                                            (4, 64, gpu.WORKERS_WIDE), (8, 128, gpu.WORKERS_WIDE), (1, 2, 2),
                                            (1, 8, gpu.WORKERS), (1, 12, gpu.WORKERS), (1, 15, gpu.WORKERS)])
def test_auto_workers(n_gpus, cpus, want):
    """-n auto: as many workers on a node of several GPUs as on one (each worker runs its
    cases on every GPU), bounded by the cores; 12 from 16 cores, 8 below."""
    assert gpu.auto_workers(n_gpus, cpus) == want


@pytest.mark.parametrize("n", [4, 8])
def test_the_two_gpu_pairs_make_every_gpu_a_producer_and_a_consumer(n):
    """The ring (smoke, standard): each GPU produces for the next and consumes from the one
    before; every ordered pair at full."""
    ring = gpu.pairs(range(n))
    assert len(ring) == n
    assert {p for p, _ in ring} == set(range(n)) == {c for _, c in ring}
    assert all(p != c for p, c in ring)
    every = gpu.pairs(range(n), every=True)
    assert len(every) == n * (n - 1) and len(set(every)) == len(every)


def test_two_gpus_pair_both_ways_and_fewer_keep_the_pairs_of_gpus_0_and_1():
    assert gpu.pairs([2, 5]) == [(2, 5), (5, 2)] == gpu.pairs([5, 2], every=True)
    assert gpu.pairs([]) == gpu.pairs([0]) == [(0, 1), (1, 0)]


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


def test_a_described_gpu_opens_no_context():
    """A worker's GPU (placement.Gpu.described): what the probe saw, the target of its
    compute capability, and no context opened in the process (every driver call of a
    case runs in an isolated child)."""
    info = cuda_env.DeviceInfo(3, "NVIDIA H100", (9, 0), "GPU-abc", "0000:1a:00.0")
    g = gpu.Gpu.described(info)
    assert (g.ordinal, g.name, g.cc, g.arch, g.uuid, g.pci_bus_id) == (
        3, "NVIDIA H100", (9, 0), "sm_90a", "GPU-abc", "0000:1a:00.0")
    assert g.context is None and g.stream is None and gpu._contexts.get(3) is None
    assert gpu.Gpu.described(info, "sm_100a").arch == "sm_100a"


@pytest.mark.parametrize("fail", [False, True])
def test_use_device_retains_the_context_once_where_something_asks(monkeypatch, fail):
    """use_device (what ``Gpu.activate`` and the two-GPU fence's ``gpus`` call) retains
    the primary context on first use, once, and makes it current for the driver and
    CuPy; a failure raises the CUDA error naming the call."""
    import sys
    import types
    import cuda.bindings
    from fixtures.cuda_layer.kernel_launch import CudaError
    fake = _FakeDriver(fail)
    used = []
    monkeypatch.setattr(cuda.bindings, "driver", fake)
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=types.SimpleNamespace(
        Device=lambda n: types.SimpleNamespace(use=lambda: used.append(n)))))
    monkeypatch.setattr(gpu, "_contexts", {})
    if fail:
        with pytest.raises(CudaError, match="CUDA_ERROR_OUT_OF_MEMORY"):
            gpu.use_device(5)
        assert used == [] and gpu._contexts == {}
        return
    assert gpu.use_device(5) == "ctx-5" and gpu.use_device(5) == "ctx-5"
    assert fake.threads == ["MainThread"] and fake.current == "ctx-5" and used == [5, 5]


@pytest.mark.parametrize("raw,state,why", [
    ("abc", cuda_env.DriverState(False, "no CUDA driver"), "--gpus=abc: 'abc' is not a GPU ordinal"),
    ("2", cuda_env.DriverState(False, "no GPU with tensor maps", 13000, (cuda_env.DeviceInfo(0, "A100", (8, 0)),)),
     "--gpus=2: GPU 2: CUDA sees 1 GPU(s) here"),
    ("7", cuda_env.DriverState(False, "no CUDA driver"), None),          # nothing answers: its syntax only
    ("0", cuda_env.DriverState(False, "no GPU with tensor maps", 13000, (cuda_env.DeviceInfo(0, "A100", (8, 0)),)),
     None),                                                             # it exists: NOT MEASURED, no error
])
def test_the_choice_is_checked_without_a_usable_gpu(monkeypatch, raw, state, why):
    """Without a usable GPU nothing is chosen, but ``--gpus`` is checked for its syntax on
    any machine, and where a driver answers, for the GPUs it names."""
    from types import SimpleNamespace
    from fixtures.plugins.run_control import every_gpu
    monkeypatch.setattr(cuda_env, "probe", lambda: state)
    config = SimpleNamespace(getoption=lambda name, default=None: raw)
    if why is None:
        assert every_gpu.choose(config) == ()
    else:
        with pytest.raises(ValueError) as info:
            every_gpu.choose(config)
        assert str(info.value).startswith(why), info.value
