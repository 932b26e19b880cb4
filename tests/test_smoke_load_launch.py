"""The smoke loads' one launch (fixtures/toolchain/smoke.py ``load_boxes``, through
fixtures/engine/device_maps.py ``load_by_value``), recorded without a GPU over the
reproducers' stand-ins. The loads run on a GPU node (suites/test_toolchain.py)."""
from __future__ import annotations

import numpy as np

from fixtures.engine import device_maps
from fixtures.repro import record
from fixtures.toolchain import smoke
from kernel_params import declared


def test_the_smoke_loads_launch_smoke_load_as_it_declares(monkeypatch):
    """``load_boxes`` (through ``engine.device_maps.load_by_value``, which cuda.core's map
    checks share) recorded over the reproducers' stand-ins: one launch of kernels/smoke_load.cu
    with the kernel's parameters in order, the barrier told the box's bytes plus the extra."""
    monkeypatch.setattr(device_maps, "load_kernel", lambda source, **kw: record.FakeModule(source))
    host = np.zeros((64, 64), dtype=np.float32)
    with record.recording() as prog:
        tiles, words = smoke.load_boxes(host, (32, 8), [(0, 0), (32, 56)], arch="sm_90a", expect_extra=16)
    (launch,) = [s for s in prog.steps if s["op"] == "launch"]
    assert (launch["kernel"], launch["grid"], launch["block"], launch["shared"]) == ("smoke_load", 2, 128, 1024 + 1024)
    assert [a[0] for a in launch["args"]] == declared("smoke_load.cu", "smoke_load")
    assert [a[1] for a in launch["args"][5:7]] == [1024, 1040] and launch["args"][1][1] == 2
    # the stand-in kernel writes nothing: the poison and the unwritten words come back
    assert tiles.shape == (2, 8, 32) and tiles.dtype == np.float32 and words.tolist() == [0xFFFFFFFF] * 2
