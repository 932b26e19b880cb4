"""Functions the isolation self-tests run in the child process (not a test module)."""
import os
import time


def pid():
    return os.getpid()


def add(a, b, *, scale=1):
    print("stray output must not break the protocol")
    return (a + b) * scale


def boom():
    raise ValueError("planted failure")


def cuda_fault():
    from fixtures.cuda_layer.kernel_launch import CudaError
    raise CudaError(715, "CUDA_ERROR_ILLEGAL_INSTRUCTION", "cuStreamSynchronize(test)")


def poison():
    import fixtures.cuda_layer.isolated_child as iso
    iso._force_unhealthy = "CUDA_ERROR_ILLEGAL_INSTRUCTION"
    return os.getpid()


def crash():
    os._exit(3)


def hang():
    time.sleep(60)


def batch(keys, trap=(), hang=(), crash=(), together=(), once="", killed=False):
    """A batch of cases: any of ``trap`` traps (and poisons the child), ``hang`` hangs,
    ``crash`` kills the child; ``together`` traps only when all of it runs in one call;
    with ``once`` (a file's path), the first call of more than one case traps (the file
    marks it done); ``killed``: these faults end as a context killed from outside does
    (CUDA_ERROR_LAUNCH_FAILED), not with an illegal instruction."""
    if together and set(together) <= set(keys):
        return poison_with_error(killed)
    if once and len(keys) > 1 and not os.path.exists(once):
        open(once, "w").close()
        return poison_with_error(killed)
    for k in keys:
        if k in trap:
            return poison_with_error()
        if k in hang:
            time.sleep(60)
        if k in crash:
            os._exit(3)
    return {k: f"ran {k}" for k in keys}


def poison_with_error(killed=False):
    poison()
    if killed:
        from fixtures.cuda_layer.kernel_launch import CudaError
        raise CudaError(719, "CUDA_ERROR_LAUNCH_FAILED", "cuStreamSynchronize(test)")
    cuda_fault()


def stopping(keys, stop=(), poisoned=True):
    """Cases run one after another, knowing which one faulted: at the first key in
    ``stop`` (a trap, the context poisoned unless ``poisoned`` is false) it returns
    isolation.Stopped with the results before it, the key and why."""
    from fixtures.engine.batches import Stopped
    done = {}
    for k in keys:
        if k in stop:
            if poisoned:
                poison()
            return Stopped(done, k, f"{k} trapped in pid {os.getpid()}")
        done[k] = f"ran {k}"
    return done


class TxOverride:
    """A tiled load operation's ``tx_override`` that crosses into the isolated child
    (pickled with the operation, by this module's name): the mbarrier byte count of the
    cases named in ``counts``; every other case keeps its box's bytes."""

    def __init__(self, counts: dict):
        self.counts = dict(counts)

    def __call__(self, case) -> int:
        from fixtures.tma_box import tiled
        return self.counts.get(case.id, tiled.smem_bytes(case.load))


def environ(name):
    return os.environ.get(name)


def cupy_error(under: bool):
    """A CuPy call that fails with cudaErrorMemoryAllocation, as a full GPU's allocation
    does: outside the operation under test (the harness's), or inside it (``under``)."""
    from cupy_backends.cuda.api.runtime import CUDARuntimeError
    from fixtures.cuda_layer.faults import under_test
    if under:
        with under_test("the operation"):
            raise CUDARuntimeError(2)
    raise CUDARuntimeError(2)


def nap(seconds):
    """Sleep, then say which process slept (the GPU service's calls at once)."""
    time.sleep(seconds)
    return os.getpid()


def nap_span(seconds):
    """Sleep; the wall-clock start and end of the sleep, as the child saw them (whether
    two calls ran at once)."""
    start = time.time()
    time.sleep(seconds)
    return start, time.time()


def imported(name):
    """Was module ``name`` imported in this process before the call (the GPU service's
    children start with its imports)?"""
    import sys
    return name in sys.modules


class Unreadable:
    """An argument the GPU service cannot unpickle (its environment names the user's
    hardware queues), which any other process can: the service refuses the request."""

    def __reduce__(self):
        return (_readable, ())


def _readable():
    from fixtures.cuda_layer.gpu_service import USER_QUEUES
    if USER_QUEUES in os.environ:
        raise RuntimeError("the GPU service cannot read this")
    return "read"


def read(value):
    return value
