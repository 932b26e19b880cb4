"""cuda.core's TensorMapDescriptor.replace_address (fixtures/library_maps/cuda_core_replace.py)
and its maps of tensors past 32 bits (cuda_core_large.py) without a GPU: the cases and the
judgement of what the isolated child saw. The children run on a GPU node
(suites/test_library_maps.py test_cuda_core_replace_address, test_cuda_core_large)."""
from __future__ import annotations

import numpy as np

from fixtures import library_maps as lm
from fixtures.cuda_layer import status
from fixtures.library_maps import cuda_core_large as cl, cuda_core_replace as cr
from fixtures.rules.registry import get
from fixtures.tma_box import tiled

A, B = bytes(range(128)), bytes(range(1, 129))


def _new_tensor(**kw):
    tiles = np.stack([tiled.plane_box(cr.tensor_a() + np.float32(cr.B_OFFSET), x, y, *cr.BOX)
                      for x, y in cr.COORDS])
    r = {"before": A, "want_before": A, "refused": "", "got": B, "want": B, "fresh": B,
         "tiles": tiles, "status": np.full(2, status.OK, dtype=np.uint32)}
    r.update(kw)
    return r


def test_the_cases_quote_cuda_cores_documentation():
    assert all(get(r).quote and get(r).document.startswith("cuda.core") for r in lm.REPLACE_CASES.values())


def test_a_replaced_map_that_is_the_drivers_and_loads_the_new_tensor_passes():
    assert lm.judge_replace("new-tensor", _new_tensor()) == ([], "")


def test_a_replaced_map_unlike_the_drivers_a_wrong_load_or_a_refusal_fails():
    (err,), _ = lm.judge_replace("new-tensor", _new_tensor(got=A))
    assert err[0] == "library.cuda-core.replace-address" and "not the driver's map over the new tensor" in err[1]
    r = _new_tensor()
    r["tiles"] = r["tiles"] + 1
    (err,), _ = lm.judge_replace("new-tensor", r)
    assert "did not read the new tensor's boxes" in err[1]
    (err,), _ = lm.judge_replace("new-tensor", _new_tensor(refused="ValueError: x"))
    assert "refused a tensor of the same shape" in err[1]
    (err,), _ = lm.judge_replace("new-tensor", _new_tensor(before=B))
    assert "before any replacement" in err[1]


def test_a_misaligned_or_host_address_must_be_refused_and_leave_the_map():
    refused = {"before": A, "want_before": A, "refused": "ValueError: not aligned", "got": A, "want": None}
    assert lm.judge_replace("misaligned", refused) == ([], "")
    (err,), _ = lm.judge_replace("misaligned", dict(refused, got=B))
    assert err[0] == "library.cuda-core.replace-refused" and "but changed the descriptor" in err[1]
    (err,), _ = lm.judge_replace("misaligned", dict(refused, refused="", got=B))
    assert "accepted a pointer 4 bytes into the tensor" in err[1]
    errors, seen = lm.judge_replace("host", dict(refused, refused="", got=B, want=B))
    assert errors == [] and "host memory" in seen
    (err,), _ = lm.judge_replace("host", dict(refused, refused="", got=B, want=A))
    assert "accepted a host array" in err[1]


# ------------------------------------------------------------------ tensors past 32 bits
def _large(case, **kw):
    c = lm.LARGE_CASES[case]
    want = bytes(range(128))
    r = {"want": want, "encode": "CUDA_SUCCESS", "lib": want, "status": status.OK,
         "expected": cl._pattern(c), "tile": cl._pattern(c).copy()}
    r.update(kw)
    return r


def test_the_large_cases_pass_32_bits_where_they_say_and_fit_their_allocation():
    e, s = lm.LARGE_CASES["elements-over-2g"], lm.LARGE_CASES["stride-over-2g"]
    assert e.rows * e.cols > 1 << 31 and s.row_stride > 1 << 31 and s.row_stride % 16 == 0
    for c in (e, s):
        (x, y), (bx, by) = c.at, c.box
        assert x + bx == c.cols and y + by == c.rows                 # the far corner
        assert (y + by - 1) * c.row_stride + (x + bx) * c.itemsize <= c.bytes_needed
        assert (bx * c.itemsize) % 16 == 0 and (cl._pattern(c) != 0).all()
    assert get("library.cuda-core.large").quote


def test_a_large_map_unlike_the_drivers_a_refusal_or_a_wrong_far_corner_fails():
    for case in lm.LARGE_CASES:
        assert lm.judge_large(case, _large(case)) == []
    (err,) = lm.judge_large("elements-over-2g", _large("elements-over-2g", lib=bytes(128)))
    assert err[0] == "library.cuda-core.large" and "not the driver's" in err[1]
    (err,) = lm.judge_large("stride-over-2g", _large("stride-over-2g", refused="ValueError: x"))
    assert "refused a map the driver encodes" in err[1]
    r = _large("stride-over-2g")
    r["tile"][1, 3] = 0
    (err,) = lm.judge_large("stride-over-2g", r)
    assert "1 of 512 elements differ" in err[1]
    (err,) = lm.judge_large("elements-over-2g", _large("elements-over-2g", want=None, encode="CUDA_ERROR_INVALID_VALUE"))
    assert "refused parameters seed 004 allows" in err[1]
