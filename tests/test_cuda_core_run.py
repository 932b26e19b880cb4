"""fixtures/library_maps/cuda_core_run.py: cuda.core's maps made in an isolated child with
the driver's references, judged in the worker (which opens no context for them). The
child's answers for a map, a refusal and a cuda.core that cannot make maps; the check read
from those references (explained, failed, a reference missing is the harness's); a view
whose dropped offset the references at its parent name."""
from __future__ import annotations

import hashlib
from types import SimpleNamespace

import pytest

from fixtures import library_maps as lm
from fixtures.cuda_layer import cuda_core, memory_kinds
from fixtures.cuda_layer.faults import HarnessError
from fixtures.library_maps import cuda_core_run as run
from fixtures.library_maps.checks import with_estr0
from fixtures.tensormap import encode as enc

from lane_helpers import in_a_real_child

BASE = 0x7000_0000


def _map(p, address: int) -> bytes:
    """A stand-in driver map: the parameters and the address, 128 bytes."""
    return hashlib.sha256(repr((p, address)).encode()).digest() * 4


def _ok(p, address: int) -> enc.EncodeResult:
    return enc.EncodeResult(0, "CUDA_SUCCESS", _map(p, address))


class FakeDumper:
    def __init__(self, refuse=False, lib=None):
        self.refuse, self.lib, self.asked = refuse, lib, []

    def descriptor(self, array, box, interface=None, **kw):
        self.asked.append((box, interface, sorted(kw)))
        if self.refuse:
            raise cuda_core.Refused(ValueError("the pointer is not 16-byte aligned"))
        return "desc"

    def map_bytes(self, desc):
        return self.lib


@pytest.fixture
def child(monkeypatch):
    """The child's side with no GPU: each tensor at BASE (a view's parent at BASE, the view
    at its offset), references from the stand-in driver, the enum values as they are."""
    def tensor(c, memory):
        if c.view:
            return "view", BASE + lm.view_offset(c), (BASE + lm.view_offset(c), BASE), memory_kinds.Holder()
        return "array", BASE, (BASE,), memory_kinds.Holder()
    monkeypatch.setattr(run, "_tensor", tensor)
    monkeypatch.setattr(run, "references", lambda p, a: {
        "plain": _ok(p, a), "estr0": _ok(with_estr0(p), a) if p.element_strides[0] != 1 else None})
    monkeypatch.setattr(cuda_core, "enum_value", lambda kind, v: (kind, v))


def _with_estr(estr0: bool):
    return next(c for c in lm.cuda_core_cases("standard") if (c.load.element_strides[0] != 1) == estr0)


def test_the_child_answers_a_map_a_refusal_and_no_cuda_core(child, monkeypatch):
    c = _with_estr(False)
    p = c.load
    d = FakeDumper(lib=_map(p, BASE))
    monkeypatch.setattr(cuda_core, "dumper_here", lambda o, a: d)
    r = run.cuda_core_batch([c], 0, "sm_90a")[c.id]
    assert r == {"lib": _map(p, BASE), "address": BASE, "refs": {BASE: run.references(p, BASE)}}
    assert d.asked[0][0] == tuple(c.block()) and "swizzle" in d.asked[0][2]
    d.refuse = True
    r = run.cuda_core_batch([c], 0, "sm_90a")[c.id]
    assert r["refused"].startswith("ValueError: the pointer") and BASE in r["refs"] and "lib" not in r

    def unavailable(o, a):
        raise cuda_core.CudaCoreUnavailable("cuda.core 0.1 has no TensorMapDescriptor")
    monkeypatch.setattr(cuda_core, "dumper_here", unavailable)
    assert run.cuda_core_batch([c], 0, "sm_90a") == {c.id: {"unavailable": "cuda.core 0.1 has no TensorMapDescriptor"}}


def test_the_check_reads_the_childs_references(child):
    c = _with_estr(True)
    p = c.load
    refs = {BASE: run.references(p, BASE)}
    assert lm.cuda_core(c, _map(p, BASE), BASE, refs=refs).errors == []
    v = lm.cuda_core(c, _map(with_estr0(p), BASE), BASE, refs=refs)     # CCCL's element stride 0
    assert v.errors == [] and v.explained[0][0] == "library.cccl.element-stride0"
    bad = bytearray(_map(p, BASE))
    bad[0] ^= 1
    (rule, text), = lm.cuda_core(c, bytes(bad), BASE, refs=refs).errors
    assert rule == "library.cuda-core.map" and "bits no rule of the library's source explains" in text
    with pytest.raises(HarnessError, match="no reference map was made at 0x70000010"):
        lm.cuda_core(c, _map(p, BASE), BASE + 16, refs=refs)


def test_a_view_whose_offset_was_dropped_is_named(child, monkeypatch):
    c = lm.cuda_core_view_cases("standard")[0]
    p = c.load
    monkeypatch.setattr(cuda_core, "dumper_here", lambda o, a: FakeDumper(lib=_map(p, BASE)))   # the parent's map
    r = run.cuda_core_batch([c], 0, "sm_90a", interface="dlpack")[c.id]
    address = r["address"]
    assert address == BASE + lm.view_offset(c) != BASE and set(r["refs"]) == {address, BASE}
    v = lm.view_verdict(lambda at: lm.cuda_core(c, r["lib"], at, "library.cuda-core.view", refs=r["refs"]),
                        c, address, BASE)
    (rule, text), = v.errors
    assert rule == "library.cuda-core.view" and "was dropped" in text


def test_one_case_of_its_own_call(monkeypatch):
    """A memory kind's or a view's case: its own isolated call, read as the suites read one."""
    c = _with_estr(False)
    seen = []

    def fake_run_isolated(target, cases, ordinal, arch, memory, interface, *, device, timeout):
        seen.append((target, [x.id for x in cases], ordinal, arch, memory, interface, device))
        from fixtures.cuda_layer.isolation import Outcome
        return Outcome("returned", {c.id: {"unavailable": "x"}})
    monkeypatch.setattr(run, "run_isolated", fake_run_isolated)
    gpu = SimpleNamespace(ordinal=1, arch="sm_90a")
    assert run.cuda_core_call(c, gpu, "library.cuda-core.map", memory="managed") == {"unavailable": "x"}
    assert seen == [(run.cuda_core_batch, [c.id], 1, "sm_90a", "managed", None, 1)]


def test_the_target_through_a_real_child(monkeypatch):
    """The real isolation target, pickled into a real isolated child and back (no case:
    no GPU needed)."""
    out = in_a_real_child(monkeypatch, run.cuda_core_batch, [], 0, "sm_90a")
    assert (out.kind, out.value) == ("returned", {}), out
