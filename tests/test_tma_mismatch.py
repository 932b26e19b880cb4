"""The one message of shared-memory bytes that differ from what they should be
(fixtures/engine/mismatch.py ``byte_mismatch``, used by every load suite, a multicast CTA,
a store's load-back and a load through a device-built map): the expected texts are
written out by hand for a small buffer (POISON is 0xA5)."""
from __future__ import annotations

from fixtures.engine import byte_mismatch, elem_hex


def test_elem_hex_reads_the_element_little_endian():
    buf = bytes([0x10, 0x32, 0x54, 0x76, 0x98, 0xBA])
    assert elem_hex(buf, 3, 2) == "0x7654"        # bytes 2..3
    assert elem_hex(buf, 5, 4) == "0xba98"        # bytes 4..5 (the tail: what is there)
    assert elem_hex(buf, 0, 1) == "0x10"


WANT = bytes([0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07])
# byte 1 differs, byte 2 still holds the poison, byte 7 lies past a footprint of 6
GOT = bytes([0x00, 0xFF, 0xA5, 0x03, 0x04, 0x05, 0x06, 0x70])


def test_tiled_and_im2col_shape_with_elements():
    msg = byte_mismatch(GOT, WANT, "box bytes 8", lambda off: f"row {off // 4}", 6,
                              esize=2)
    assert msg == (
        "3 of 8 shared-memory bytes differ from the model (box bytes 8)\n"
        "  byte 1: hardware 0xff, model 0x01; element hardware 0xff00, model 0x0100; row 0\n"
        "  byte 2: hardware 0xa5, model 0x02; element hardware 0x03a5, model 0x0302; row 0\n"
        "  byte 7: hardware 0x70, model 0x07; element hardware 0x7006, model 0x0706; row 1\n"
        "  1 differing byte(s) still hold the shared-memory poison 0xa5: the load did not "
        "write them\n"
        "  the load wrote past the box footprint (6 bytes)")
    assert byte_mismatch(GOT, WANT, "x", str, 8, esize=1, past="its footprint").count(
        "wrote past") == 0


def test_wide_shape_without_elements_and_extra_lines():
    msg = byte_mismatch(GOT[:3] + WANT[3:], WANT, "mode W", lambda off: "w", 6,
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
    msg = byte_mismatch(got, want, "w", lambda off: "", 20)
    assert msg.startswith("20 of 20 shared-memory bytes differ") and msg.count("  byte ") == 8


def test_against_and_names_say_what_is_compared():
    """A load through a device-built map against the load through the host map: the
    header names what the bytes differ from, each byte line the two sides."""
    msg = byte_mismatch(GOT[:3] + WANT[3:], WANT, "box bytes 8", lambda off: f"row {off // 4}",
                        8, esize=2, against="the load through the host map",
                        names=("device map", "host map"))
    assert msg == (
        "2 of 8 shared-memory bytes differ from the load through the host map (box bytes 8)\n"
        "  byte 1: device map 0xff, host map 0x01; element device map 0xff00, host map 0x0100;"
        " row 0\n"
        "  byte 2: device map 0xa5, host map 0x02; element device map 0x03a5, host map 0x0302;"
        " row 0\n"
        "  1 differing byte(s) still hold the shared-memory poison 0xa5: the load did not "
        "write them")


def test_unequal_lengths_are_reported_and_the_common_bytes_compared():
    # 5 bytes copied out of 8 expected: bytes 0..4 compared, 1 and 2 differ
    msg = byte_mismatch(GOT[:5], WANT, "short", lambda off: "r", 6)
    assert msg == (
        "2 of 5 shared-memory bytes differ from the model (short)\n"
        "5 bytes copied out, 8 expected; the first 5 compared\n"
        "  byte 1: hardware 0xff, model 0x01; r\n"
        "  byte 2: hardware 0xa5, model 0x02; r\n"
        "  1 differing byte(s) still hold the shared-memory poison 0xa5: the load did not "
        "write them")
    # 10 copied out of 8: the first 8 compared (bytes 1, 2 and 7 differ, 7 past 6)
    msg = byte_mismatch(GOT + bytes([0xA5, 0xA5]), WANT, "long", lambda off: "r", 6)
    assert msg.splitlines()[:3] == ["3 of 8 shared-memory bytes differ from the model (long)",
                                    "10 bytes copied out, 8 expected; the first 8 compared",
                                    "  byte 1: hardware 0xff, model 0x01; r"]
    assert msg.endswith("  the load wrote past the box footprint (6 bytes)")
    # the same bytes, one more copied out: no byte differs, the length still does
    assert byte_mismatch(WANT + bytes(1), WANT, "x", str, 8) == (
        "0 of 8 shared-memory bytes differ from the model (x)\n"
        "9 bytes copied out, 8 expected; the first 8 compared")
