"""The shared memory around a TMA load's destination (fixtures/tma_load/guard_bytes.py)
without a GPU: the cases, the judgement of the regions the kernel copied out, and the
launches recorded over the reproducers' stand-ins against the kernel's declared
parameters. The kernel runs on a GPU node (suites/test_tma_load.py test_guard_bytes)."""
from __future__ import annotations

import numpy as np
import pytest

import fixtures.tma_load as tl
from fixtures.cuda_layer import status
from fixtures.repro import record
from fixtures.rules.registry import get
from fixtures.tensormap.enums import Swizzle
from fixtures.tma_load import guard_bytes as gb
from kernel_params import declared


def _clean(case):
    ctas = 2 if case.multicast else 1
    row = np.full(2 * gb.GUARD + case.box_bytes, gb.GUARD_FILL, dtype=np.uint8)
    row[gb.GUARD:gb.GUARD + case.box_bytes] = 7
    return np.stack([row] * ctas), np.full(ctas, status.OK, dtype=np.uint32)


def test_the_cases_are_legal_loads_at_each_place():
    cases = tl.guard_cases("standard")
    assert len(cases) == 3 * 4 * 3 + 1 and len({c.id for c in cases}) == len(cases)
    assert tl.guard_cases("full") == cases and len(tl.guard_cases("smoke")) == 4
    for c in cases:
        bx, by = c.box
        assert (bx * c.esize) % 16 == 0 and (c.x * c.esize) % 16 == 0 and by == gb.ROWS
        cols = gb.TENSOR_BYTES_PER_ROW // c.esize
        inside = 0 <= c.x and c.x + bx <= cols and 0 <= c.y and c.y + by <= gb.TENSOR_ROWS
        assert inside == c.id.endswith("inside"), c.id
    assert get("tma-load.destination-only").quote


@pytest.mark.parametrize("case", [c for c in tl.guard_cases("smoke")], ids=lambda c: c.id)
def test_untouched_guards_pass_one_changed_byte_on_either_side_fails(case):
    region, words = _clean(case)
    assert tl.judge_guards(case, region, words) == []
    before = region.copy()
    before[-1, gb.GUARD - 1] ^= 1                       # the byte just before the destination
    (err,) = tl.judge_guards(case, before, words)
    assert err[0] == "tma-load.destination-only" and "1 of the 128 bytes before" in err[1]
    assert "the nearest 1 bytes before it" in err[1] and err[2] == {"outcome": "bytes"}
    after = region.copy()
    after[0, gb.GUARD + case.box_bytes + 5] = 0
    (err,) = tl.judge_guards(case, after, words)
    assert f"after the box's {case.box_bytes} (the first 5 bytes past its end)" in err[1]
    late = words.copy()
    late[-1] = status.TIMEOUT
    (err,) = tl.judge_guards(case, region, late)
    assert "did not complete" in err[1] and err[1].startswith("CTA 1: " if case.multicast else "the load")


def test_each_launch_passes_the_kernels_declared_parameters(monkeypatch):
    monkeypatch.setattr(gb, "load_kernel", lambda source, **kw: record.FakeModule(source))
    with record.recording() as prog:
        gb.run_guards([c.id for c in tl.guard_cases("standard")], "standard", "sm_90a")
    launches = [s for s in prog.steps if s["op"] == "launch"]
    assert [s["kernel"] for s in launches] == ["guarded_load", "guarded_multicast"]
    for s in launches:
        assert [a[0] for a in s["args"]] == declared(gb.SOURCE, s["kernel"])
        assert s["cluster"] == (2 if s["kernel"] == "guarded_multicast" else 1)
        # the guard before, up to 1,023 bytes to the 1024-aligned destination, the box, the guard after
        assert s["shared"] >= gb.GUARD + 1023 + gb.SPANS[Swizzle.B128] * gb.ROWS + gb.GUARD
    assert [s["grid"] for s in launches] == [36, 2]
