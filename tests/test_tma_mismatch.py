"""The one message of a TMA load whose shared-memory bytes differ from the model
(fixtures/tma_load/mismatch.py, used by the tiled, im2col and im2col-wide suites): the
expected texts are written out by hand for a small buffer (POISON is 0xA5)."""
from __future__ import annotations

import fixtures.tma_load as tl


def test_elem_hex_reads_the_element_little_endian():
    buf = bytes([0x10, 0x32, 0x54, 0x76, 0x98, 0xBA])
    assert tl.elem_hex(buf, 3, 2) == "0x7654"        # bytes 2..3
    assert tl.elem_hex(buf, 5, 4) == "0xba98"        # bytes 4..5 (the tail: what is there)
    assert tl.elem_hex(buf, 0, 1) == "0x10"


WANT = bytes([0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07])
# byte 1 differs, byte 2 still holds the poison, byte 7 lies past a footprint of 6
GOT = bytes([0x00, 0xFF, 0xA5, 0x03, 0x04, 0x05, 0x06, 0x70])


def test_tiled_and_im2col_shape_with_elements():
    msg = tl.mismatch_message(GOT, WANT, "box bytes 8", lambda off: f"row {off // 4}", 6,
                              esize=2)
    assert msg == (
        "3 of 8 shared-memory bytes differ from the model (box bytes 8)\n"
        "  byte 1: hardware 0xff, model 0x01; element hardware 0xff00, model 0x0100; row 0\n"
        "  byte 2: hardware 0xa5, model 0x02; element hardware 0x03a5, model 0x0302; row 0\n"
        "  byte 7: hardware 0x70, model 0x07; element hardware 0x7006, model 0x0706; row 1\n"
        "  1 differing byte(s) still hold the shared-memory poison 0xa5: the load did not "
        "write them\n"
        "  the load wrote past the box footprint (6 bytes)")
    assert tl.mismatch_message(GOT, WANT, "x", str, 8, esize=1, past="its footprint").count(
        "wrote past") == 0


def test_wide_shape_without_elements_and_extra_lines():
    msg = tl.mismatch_message(GOT[:3] + WANT[3:], WANT, "mode W", lambda off: "w", 6,
                              poison="the poison", past="the rows' footprint",
                              extra=["  suspects: a, b"])
    assert msg == (
        "2 of 8 shared-memory bytes differ from the model (mode W)\n"
        "  byte 1: hardware 0xff, model 0x01; w\n"
        "  byte 2: hardware 0xa5, model 0x02; w\n"
        "  1 differing byte(s) still hold the poison 0xa5: the load did not write them\n"
        "  suspects: a, b")


def test_only_the_first_eight_bytes_are_described():
    want = bytes(20)
    got = bytes([1] * 20)
    msg = tl.mismatch_message(got, want, "w", lambda off: "", 20)
    assert msg.startswith("20 of 20 shared-memory bytes differ") and msg.count("  byte ") == 8
