"""Status words: the host side of the bounded waits."""
import numpy as np
import pytest

from fixtures.cuda_layer import status
from fixtures.cuda_layer.build import KERNEL_DIR


def test_all_ok_passes():
    status.check_status(np.zeros(4, np.uint32))


def test_timeout_names_the_case():
    st = np.array([status.OK, status.TIMEOUT, status.OK], np.uint32)
    with pytest.raises(AssertionError) as info:
        status.check_status(st, ["a", "f16-r2-box64x8", "c"])
    msg = str(info.value)
    assert "1 case(s)" in msg and "f16-r2-box64x8: timeout" in msg and "a:" not in msg


def test_unwritten_and_unknown_are_failures():
    st = np.array([status.UNWRITTEN, 77], np.uint32)
    bad = status.failures(st)
    assert "unwritten" in bad[0] and "unknown status 77" in bad[1]


def test_long_lists_are_cut():
    with pytest.raises(AssertionError, match="and 5 more"):
        status.check_status(np.ones(25, np.uint32))


def test_kernel_header_uses_the_same_codes():
    src = (KERNEL_DIR / "common.cuh").read_text()
    assert f"STATUS_OK = {status.OK}" in src
    assert f"STATUS_TIMEOUT = {status.TIMEOUT}" in src
    assert f"STATUS_BAD = {status.BAD}" in src
