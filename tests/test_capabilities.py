"""The capability markers (fixtures/plugins/run_control/capabilities.py), on a CPU: which case a node
lacking a capability skips, and the reason it gives."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from fixtures.plugins.run_control import capabilities
from fixtures.tensormap import encode


class _Item:
    def __init__(self, *marks):
        self.marks = marks

    def iter_markers(self, name=None):
        return [m.mark for m in self.marks if name is None or m.name == name]


def _gpu(sm):
    return lambda: SimpleNamespace(ordinal=1, sm=sm)


@pytest.mark.parametrize("sm,want", [
    (90, "needs sm_100: GPU 1 is sm_90; PTX ISA: \"only sm_100\""), (100, ""), (103, "")])
def test_requires_sm(sm, want):
    item = _Item(pytest.mark.requires_sm(100, why="PTX ISA: \"only sm_100\""))
    assert capabilities.missing(item, _gpu(sm)) == want


@pytest.mark.parametrize("sm,want", [
    (90, ""), (100, "needs a GPU older than sm_100: GPU 1 is sm_100; it runs here")])
def test_below_sm(sm, want):
    item = _Item(pytest.mark.below_sm(100, why="it runs here"))
    assert capabilities.missing(item, _gpu(sm)) == want


def test_without_a_gpu_the_gpu_markers_decide_nothing():
    item = _Item(pytest.mark.requires_sm(100), pytest.mark.below_sm(90))
    assert capabilities.missing(item, lambda: None) == ""


def test_requires_tool(monkeypatch):
    item = _Item(pytest.mark.requires_tool("nvcc", why="the NVRTC build alone is checked"))
    monkeypatch.setattr(capabilities.shutil, "which", lambda name: None)
    assert capabilities.missing(item, _gpu(90)) == \
        "nvcc is not on PATH; the NVRTC build alone is checked"
    monkeypatch.setattr(capabilities.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert capabilities.missing(item, _gpu(90)) == ""


def test_requires_driver_api(monkeypatch):
    """A driver entry point: asked of the driver only with a GPU (without one the marker
    decides nothing); a driver without it skips the case naming it."""
    item = _Item(pytest.mark.requires_driver_api("cuTensorMapEncodeIm2colWide", why="sm_100"))
    asked = []
    monkeypatch.setattr(encode, "driver_exports", lambda name: asked.append(name) or False)
    assert capabilities.missing(item, lambda: None) == "" and asked == []
    assert capabilities.missing(item, _gpu(90)) == "this driver has no cuTensorMapEncodeIm2colWide; sm_100"
    monkeypatch.setattr(encode, "driver_exports", lambda name: True)
    assert capabilities.missing(item, _gpu(90)) == ""


def test_what_the_host_encode_cases_need():
    """The host-encoding cases' needs, which its suite makes markers: an im2col-wide map
    the driver's entry point and sm_100, a replace into one the entry point only, a
    packed type's map of another rule sm_100, a packed type's valid maps its type's sm."""
    import fixtures.host_encode as he
    from fixtures.tensormap import params as tp
    from fixtures.tensormap.enums import DTYPES, DataType
    cases = he.rule_cases("standard")
    for c in cases:
        need = {(name, arg) for name, arg, _ in he.needs(c)}
        wide = isinstance(c.params, tp.Im2colWideParams)
        into_wide = isinstance(c.params, tp.ReplaceParams) and isinstance(c.params.base, tp.Im2colWideParams)
        assert (("requires_driver_api", he.WIDE_API) in need) == (wide or into_wide), c.id
        if wide:
            assert ("requires_sm", 100) in need, c.id
    assert any(not he.needs(c) for c in cases)
    packed = next(d for d in DataType if DTYPES[d].min_sm > 90)
    assert [(n, a) for n, a, _ in he.group_needs(packed)] == [("requires_sm", DTYPES[packed].min_sm)]
    assert he.group_needs(DataType.FLOAT16) == []


def test_a_case_without_markers_never_asks_for_the_gpu(monkeypatch):
    def no_gpu():
        raise AssertionError("the GPU was looked up for a case without capability markers")
    monkeypatch.setattr(capabilities, "run_gpu", no_gpu)
    capabilities.pytest_runtest_setup(_Item(pytest.mark.rule("x")))


def test_a_lacking_node_skips_at_setup(monkeypatch):
    monkeypatch.setattr(capabilities, "run_gpu", _gpu(90))
    with pytest.raises(pytest.skip.Exception, match="needs sm_100: GPU 1 is sm_90"):
        capabilities.pytest_runtest_setup(_Item(pytest.mark.requires_sm(100)))
