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


@pytest.mark.parametrize("n_gpus,cpus,want", [(0, 2, 2), (0, 64, 4), (1, 16, gpu.WORKERS),
                                            (4, 64, gpu.WORKERS), (8, 128, gpu.WORKERS), (1, 2, 2)])
def test_auto_workers(n_gpus, cpus, want):
    """-n auto: as many workers on a node of several GPUs as on one (each worker runs its
    cases on every GPU), bounded by the cores."""
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


@pytest.mark.parametrize("fail", [False, True])
def test_open_ahead_retains_the_context_in_a_thread_and_leaves_a_failure_to_the_case(monkeypatch, fail):
    """A worker starts opening its GPU as its session starts (harness
    pytest_sessionstart), so that it overlaps the collection: the primary context is
    retained in a thread, once, at once; CuPy is imported there only once the process
    has collected (imports_may_start), and use_device (the first GPU case) takes the
    context. A failure there raises nothing in the thread: use_device meets it again and
    raises it."""
    import sys
    import threading
    import time
    import types
    import cuda.bindings
    from fixtures.cuda_layer.kernel_launch import CudaError
    fake = _FakeDriver(fail)
    used = []
    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(
        Device=lambda n: types.SimpleNamespace(use=lambda: used.append(n))))
    monkeypatch.setattr(cuda.bindings, "driver", fake)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr(gpu, "_contexts", {})
    monkeypatch.setattr(gpu, "_ahead", {})
    monkeypatch.setattr(gpu, "_imports_go", threading.Event())
    gpu.open_ahead(5)
    thread = gpu._ahead[5]
    gpu.open_ahead(5)                       # asked again while it opens: still one thread
    deadline = time.monotonic() + 30
    while not fake.threads and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fake.threads == ["open-gpu-5"]   # the context at once
    if not fail:
        time.sleep(0.1)
        assert thread.is_alive()            # CuPy's import waits for the collection's end
    gpu.imports_may_start()
    thread.join(30)
    assert not thread.is_alive()
    assert fake.threads == ["open-gpu-5"]
    if fail:
        with pytest.raises(CudaError, match="CUDA_ERROR_OUT_OF_MEMORY"):
            gpu.use_device(5)
        assert fake.threads == ["open-gpu-5", "MainThread"] and used == []
    else:
        assert gpu.use_device(5) == "ctx-5" and fake.current == "ctx-5" and used == [5]
        assert fake.threads == ["open-gpu-5"] and gpu._ahead == {}


def test_the_first_gpu_case_lets_cupy_be_imported_before_the_collection_ends(monkeypatch):
    """use_device (a GPU case, or anything that needs the GPU before the process has
    collected) lets the waiting thread import CuPy and takes the context, at once: it
    does not wait out IMPORT_WAIT_S."""
    import sys
    import threading
    import types
    import cuda.bindings
    fake = _FakeDriver()
    used = []
    monkeypatch.setattr(cuda.bindings, "driver", fake)
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=types.SimpleNamespace(
        Device=lambda n: types.SimpleNamespace(use=lambda: used.append(n)))))
    monkeypatch.setattr(gpu, "_contexts", {})
    monkeypatch.setattr(gpu, "_ahead", {})
    monkeypatch.setattr(gpu, "_imports_go", threading.Event())   # not collected yet
    gpu.open_ahead(3)
    got = []
    t = threading.Thread(target=lambda: got.append(gpu.use_device(3)))
    t.start()
    t.join(10)
    assert not t.is_alive() and got == ["ctx-3"] and used == [3]
    assert gpu._imports_go.is_set() and gpu._ahead == {}


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
    monkeypatch.setattr(gpu, "_imports_go", threading.Event())   # not collected yet
    gpu.open_ahead(2)
    settled = threading.Thread(target=gpu.settle_ahead)
    settled.start()
    settled.join(0.3)
    assert settled.is_alive()                 # still opening: settle_ahead waits
    release.set()
    settled.join(30)                          # and lets the thread import: it does not wait 120 s
    assert not settled.is_alive() and gpu._contexts == {2: "ctx-2"}
    assert gpu._imports_go.is_set()
    src = inspect.getsource(isolation.Forked.__init__)
    assert src.index("settle_ahead()") < src.index("fork_child(")


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
