"""PTX newer than the driver knows (flashinfer#3795) is the environment's answer, never a
broken rule: ``Module.load`` turns CUDA_ERROR_UNSUPPORTED_PTX_VERSION into
UnsupportedToolchain naming both versions, and a case that meets it, through its own
isolated call or its batch, is skipped "environment, not a rule: ...". The driver here is
a stand-in; the real path runs on a GPU node (suites/test_toolchain.py
test_ptx_newer_than_the_driver_is_an_environment_answer)."""
from __future__ import annotations

import pytest

from fixtures import engine
from fixtures.cuda_layer import kernel_launch
from fixtures.cuda_layer.faults import HarnessError, UnsupportedToolchain
from fixtures.cuda_layer.isolation import Outcome
from fixtures.engine.batches import Why
from fixtures.toolchain import smoke
from reports.model import classify_skip


class _Driver:
    """cuModuleLoadData refusing with ``code``; cuDriverGetVersion 13000."""
    def __init__(self, code: int, name: str):
        self.code, self.name = code, name

    def cuModuleLoadData(self, image):
        return (self.code, None)

    def cuDriverGetVersion(self):
        return (0, 13000)

    def cuGetErrorName(self, err):
        return (0, self.name.encode())


def test_a_refused_ptx_version_is_unsupported_toolchain_naming_both_versions(monkeypatch):
    monkeypatch.setattr(kernel_launch, "_driver", lambda: _Driver(222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"))
    with pytest.raises(UnsupportedToolchain) as e:
        kernel_launch.Module.load(smoke.empty_ptx(smoke.NEWER_PTX), label="a module of PTX 9.9")
    assert str(e.value) == ("the driver (cuDriverGetVersion 13000) cannot load a module of PTX 9.9 "
                            "(PTX 9.9): CUDA_ERROR_UNSUPPORTED_PTX_VERSION")
    assert isinstance(e.value.__cause__, kernel_launch.CudaError)


def test_any_other_load_error_stays_a_cuda_error(monkeypatch):
    monkeypatch.setattr(kernel_launch, "_driver", lambda: _Driver(218, "CUDA_ERROR_INVALID_PTX"))
    with pytest.raises(kernel_launch.CudaError, match="CUDA_ERROR_INVALID_PTX"):
        kernel_launch.Module.load(smoke.empty_ptx(smoke.KNOWN_PTX))


def test_the_ptx_version_of_a_text_and_of_a_cubin():
    assert kernel_launch.ptx_version(smoke.empty_ptx("8.0")) == "8.0"
    assert kernel_launch.ptx_version(smoke.empty_ptx(smoke.NEWER_PTX)) == "9.9"
    assert kernel_launch.ptx_version(b"\x7fELF\x02\x01.version 9.9") == ""
    assert smoke.empty_ptx("8.0").endswith(b"}\n\0") and b".entry tmac_mark" in smoke.empty_ptx("8.0")


def test_a_case_that_meets_it_is_skipped_as_the_environments_not_failed_nor_a_harness_error():
    text = ("UnsupportedToolchain: the driver (cuDriverGetVersion 13000) cannot load a module of "
            "PTX 9.9 (PTX 9.9): CUDA_ERROR_UNSUPPORTED_PTX_VERSION")
    out = Outcome("exception", error=text, detail="Traceback ...")
    with pytest.raises(pytest.skip.Exception, match=r"^environment, not a rule: the driver \(cuDriverGetVersion "
                                                    r"13000\) cannot load .*UNSUPPORTED_PTX_VERSION$"):
        engine.value_of(out, "toolchain.ptx-newer-than-driver", "ptx-9.9")
    assert classify_skip(engine.ENVIRONMENT + "the driver ...") == "environment"
    # through a batch: why the case has no result names the child's exception
    why = Why(f"the batch of 3 cases it was launched with faulted (the harness raised {text})", harness=True)
    with pytest.raises(pytest.skip.Exception, match="^environment, not a rule: the driver"):
        engine.skip_if_environment(why)
    # any other exception of the harness stays the harness's
    other = Outcome("exception", error="KeyError: 'x'", detail="")
    with pytest.raises(HarnessError):
        engine.value_of(other, "toolchain.ptx-newer-than-driver", "ptx-9.9")

