"""Kernel argument packing (no GPU needed)."""
import ctypes

import numpy as np
import pytest

from fixtures.cuda_layer.kernel_launch import DevicePtr, pack_args, TensorMapArg


class FakeDeviceArray:
    __cuda_array_interface__ = {"data": (0xDEAD0000, False), "shape": (4,), "typestr": "<f4",
                                "version": 3}


class Params(ctypes.Structure):
    _fields_ = [("rank", ctypes.c_int32), ("dims", ctypes.c_uint64 * 5)]


def unpack(pointers, i, ctype):
    return ctype.from_address(pointers[i]).value


def test_each_kind_of_argument():
    tmap = bytes(range(128))
    params = Params(3, (ctypes.c_uint64 * 5)(1, 2, 3, 4, 5))
    held, ptrs = pack_args([FakeDeviceArray(), DevicePtr(0x1000), np.uint32(7), np.float32(1.5),
                            ctypes.c_int64(-2), TensorMapArg(tmap), params],
                           [8, 8, 4, 4, 8, 128, ctypes.sizeof(Params)])
    assert unpack(ptrs, 0, ctypes.c_uint64) == 0xDEAD0000
    assert unpack(ptrs, 1, ctypes.c_uint64) == 0x1000
    assert unpack(ptrs, 2, ctypes.c_uint32) == 7
    assert unpack(ptrs, 3, ctypes.c_float) == 1.5
    assert unpack(ptrs, 4, ctypes.c_int64) == -2
    assert ctypes.string_at(ptrs[5], 128) == tmap
    got = Params.from_address(ptrs[6])
    assert got.rank == 3 and list(got.dims) == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("bad", [7, 1.5, True, "x", [1, 2]])
def test_ambiguous_python_values_are_refused(bad):
    with pytest.raises(TypeError):
        pack_args([bad])


def test_size_mismatch_names_the_argument():
    with pytest.raises(TypeError, match=r"argument 1: uint32 is 4 bytes, the kernel's parameter is 8"):
        pack_args([DevicePtr(1), np.uint32(2)], [8, 8], "k")


def test_count_mismatch():
    with pytest.raises(TypeError, match="takes 3 arguments, got 1"):
        pack_args([np.int32(1)], [4, 4, 4], "k")


def test_tensor_map_must_be_128_bytes():
    with pytest.raises(ValueError, match="128 bytes"):
        TensorMapArg(b"\0" * 64)


# ---- cluster launches (cuLaunchKernelEx + CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
from fixtures.cuda_layer.kernel_launch import PORTABLE_CLUSTER, cluster_plan, launch_config  # noqa: E402


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16])
def test_cluster_plan_shape(n):
    plan = cluster_plan(n * 5, 128, n, 4096)
    assert plan.grid == (n * 5, 1, 1) and plan.block == (128, 1, 1) and plan.cluster == (n, 1, 1)
    assert plan.clusters == 5 and plan.cluster_size == n and plan.shared_mem == 4096
    assert plan.non_portable == (n > PORTABLE_CLUSTER)


def test_cluster_plan_refuses_partial_clusters_and_oversize():
    with pytest.raises(ValueError, match="whole number of clusters"):
        cluster_plan(6, 128, 4)
    with pytest.raises(ValueError, match="more than 16"):
        cluster_plan(32, 128, 32)
    with pytest.raises(ValueError):
        cluster_plan(0, 128, 1)


def test_launch_config_packs_the_cluster_attribute():
    pytest.importorskip("cuda.bindings")
    from cuda.bindings import driver as d
    cfg = launch_config(cluster_plan((8, 2), (64, 2), (4, 2), 1000))
    assert (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ) == (8, 2, 1)
    assert (cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ) == (64, 2, 1)
    assert cfg.sharedMemBytes == 1000 and cfg.numAttrs == 1
    (attr,) = cfg.attrs
    assert attr.id == d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    cd = attr.value.clusterDim
    assert (cd.x, cd.y, cd.z) == (4, 2, 1)
