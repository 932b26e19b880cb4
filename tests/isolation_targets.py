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
    from fixtures.launch import CudaError
    raise CudaError(715, "CUDA_ERROR_ILLEGAL_INSTRUCTION", "cuStreamSynchronize(test)")


def poison():
    import fixtures.isolation as iso
    iso._force_unhealthy = "CUDA_ERROR_ILLEGAL_INSTRUCTION"
    return os.getpid()


def crash():
    os._exit(3)


def hang():
    time.sleep(60)
