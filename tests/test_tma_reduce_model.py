"""The TMA reduction arithmetic model (fixtures/tma_store/reduce_model.py) against hand-worked
examples from the PTX ISA sentences it quotes, and exact rational arithmetic."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from fixtures.tensormap.enums import DataType as D, DTYPES
from fixtures.tma_store import reduce_model as m


def red(op, d, old, val, **readings):
    r = m.DEFAULT.with_(**readings) if readings else m.DEFAULT
    nb = DTYPES[m.as_dtype(d)].bits // 8
    u = {2: np.uint16, 4: np.uint32, 8: np.uint64}[nb]
    return [int(x) for x in m.reduce(op, d, np.array(old, dtype=u), np.array(val, dtype=u), r)]


# --- the table ---------------------------------------------------------------------------
def test_table_parsed_from_the_quote():
    assert m.ISA_TYPES == {
        "add": ("u32", "s32", "u64", "f32", "f16", "bf16"),
        "min": ("u32", "s32", "u64", "s64", "f16", "bf16"),
        "max": ("u32", "s32", "u64", "s64", "f16", "bf16"),
        "inc": ("u32",), "dec": ("u32",),
        "and": ("b32", "b64"), "or": ("b32", "b64"), "xor": ("b32", "b64")}
    assert set(m.ISA_TYPES) == set(m.OPS)


def test_allowed_equals_the_table():
    """ALLOWED (default readings) is exactly the table, with FLOAT32_FTZ as .f32 and the
    integer map types as .b32/.b64."""
    by_isa = {"u32": D.UINT32, "s32": D.INT32, "u64": D.UINT64, "s64": D.INT64,
              "f16": D.FLOAT16, "bf16": D.BFLOAT16, "f32": D.FLOAT32}
    want = set()
    for op, types in m.ISA_TYPES.items():
        for t in types:
            if t in by_isa:
                want.add((op, by_isa[t]))
            if t == "f32":
                want.add((op, D.FLOAT32_FTZ))
            if t == "b32":
                want |= {(op, D.UINT32), (op, D.INT32)}
            if t == "b64":                  # measured: INT64 is not .b64 (EVIDENCE)
                want |= {(op, D.UINT64)}
    assert set(m.ALLOWED) == want and len(want) == 30
    integer = m.allowed_pairs(m.DEFAULT.with_(bitwise_types="integer"))
    assert set(integer) - set(m.ALLOWED) == {(op, D.INT64) for op in ("and", "or", "xor")}
    assert "bitwise-types" in m.EVIDENCE and m.DEFAULT.bitwise_types == "unsigned-64"
    for src in m.ALLOWED.values():
        assert src.startswith(m.ISA_TENSOR)


@pytest.mark.parametrize("op,d", [("add", D.INT64), ("add", D.FLOAT64), ("min", D.FLOAT32),
                                  ("max", D.FLOAT32), ("inc", D.INT32), ("dec", D.UINT64),
                                  ("add", D.UINT8), ("and", D.FLOAT32), ("add", D.TFLOAT32)])
def test_pairs_the_table_leaves_out_are_refused(op, d):
    assert not m.is_allowed(op, d)
    with pytest.raises(ValueError):
        m.reduce(op, d, np.zeros(1, np.uint64), np.zeros(1, np.uint64))


def test_open_readings_change_allowed():
    wide = m.DEFAULT.with_(bitwise_types="any-width")
    assert m.is_allowed("xor", D.FLOAT32, wide) and m.is_allowed("or", D.FLOAT64, wide)
    assert not m.is_allowed("add", D.FLOAT32_FTZ, m.DEFAULT.with_(f32ftz_map="refused"))
    with pytest.raises(ValueError):
        m.Readings(nan_result="whatever")


# --- integers ------------------------------------------------------------------------------
def test_integer_add_wraps():
    assert red("add", "u32", [0xFFFFFFFF, 7], [2, 8]) == [1, 15]
    assert red("add", "s32", [0x7FFFFFFF], [1]) == [0x80000000]           # INT_MAX + 1
    assert red("add", "u64", [(1 << 64) - 1], [(1 << 64) - 1]) == [(1 << 64) - 2]


def test_integer_min_max_signedness():
    assert red("min", "u32", [0xFFFFFFFF], [1]) == [1]
    assert red("min", "s32", [0xFFFFFFFF], [1]) == [0xFFFFFFFF]           # -1 < 1
    assert red("max", "s64", [1 << 63], [0]) == [0]                        # INT64_MIN < 0
    assert red("max", "u64", [1 << 63], [0]) == [1 << 63]


def test_inc_dec_follow_the_atom_definitions():
    # inc(r, s) = (r >= s) ? 0 : r+1
    assert red("inc", "u32", [0, 4, 5, 6, 0xFFFFFFFF], [5, 5, 5, 5, 0xFFFFFFFF]) == [1, 5, 0, 0, 0]
    assert red("inc", "u32", [0], [0]) == [0]
    # dec(r, s) = (r==0 || r > s) ? s : r-1
    assert red("dec", "u32", [0, 1, 5, 6, 3], [5, 5, 5, 5, 0]) == [5, 0, 4, 5, 0]
    assert red("dec", "u32", [0], [0xFFFFFFFF]) == [0xFFFFFFFF]


def test_bitwise():
    assert red("and", "u32", [0xF0F0F0F0], [0xFF00FF00]) == [0xF000F000]
    assert red("or", "u64", [1 << 63], [1]) == [(1 << 63) | 1]
    assert red("or", "s64", [1 << 63], [1], bitwise_types="integer") == [(1 << 63) | 1]
    assert red("xor", "u64", [(1 << 64) - 1], [0x5555]) == [((1 << 64) - 1) ^ 0x5555]


# --- floating point ---------------------------------------------------------------------------
F16_ONE, BF16_ONE, F32_ONE = 0x3C00, 0x3F80, 0x3F800000


def test_ties_round_to_even():
    # 1 + ulp/2 -> 1 (even); (1 + ulp) + ulp/2 -> 1 + 2 ulp (even)
    assert red("add", "f16", [F16_ONE, F16_ONE + 1], [0x1000, 0x1000]) == [F16_ONE, F16_ONE + 2]
    assert red("add", "bf16", [BF16_ONE, BF16_ONE + 1], [0x3B80, 0x3B80]) == [BF16_ONE, BF16_ONE + 2]
    assert red("add", "f32", [F32_ONE, F32_ONE + 1], [0x33800000] * 2) == [F32_ONE, F32_ONE + 2]
    # largest finite + ulp/2 rounds to infinity
    assert red("add", "f16", [0x7BFF], [0x4C00]) == [0x7C00]               # 65504 + 16


def test_signed_zeros_of_add():
    assert red("add", "f32", [0x80000000], [0x80000000]) == [0x80000000]  # -0 + -0 = -0
    assert red("add", "f16", [F16_ONE], [F16_ONE | 0x8000]) == [0]         # x + -x = +0
    assert red("add", "bf16", [0x8000], [0]) == [0]                        # -0 + +0 = +0


def test_f32_add_subnormal_readings():
    # smallest subnormal + smallest subnormal
    assert red("add", "f32", [1], [1]) == [2]                  # by-map (default, measured)
    assert red("add", "f32ftz", [1], [1]) == [0]
    assert m.DEFAULT.f32_add_subnormals == "by-map" and "f32-add-subnormals" in m.EVIDENCE
    assert red("add", "f32", [1], [1], f32_add_subnormals="flush") == [0]
    assert red("add", "f32", [1], [1], f32_add_subnormals="preserve") == [2]
    assert red("add", "f32ftz", [1], [1], f32_add_subnormals="preserve") == [2]
    # flushed inputs keep their sign: -subnormal + -0 = -0
    assert red("add", "f32ftz", [0x80000001], [0x80000000]) == [0x80000000]
    # a normal result from subnormal inputs is flushed on input: 0 under flush
    assert red("add", "f32ftz", [0x007FFFFF], [0x00000001]) == [0]
    assert red("add", "f32", [0x007FFFFF], [1], f32_add_subnormals="preserve") == [0x00800000]


def test_half_subnormals_reading():
    assert red("add", "f16", [1], [1]) == [2]
    assert red("add", "f16", [1], [1], half_subnormals="flush") == [0]
    assert red("min", "bf16", [1], [0x3F80]) == [1]
    assert red("min", "bf16", [1], [0x3F80], half_subnormals="flush") == [0]


def test_nan_result_readings():
    qnan_payload, snan = 0x7FC00005, 0x7F800001
    assert red("add", "f32", [qnan_payload], [F32_ONE]) == [0x7FFFFFFF]    # canonical (default)
    assert red("add", "f32", [F32_ONE], [snan], nan_result="old-first") == [0x7FC00001]
    assert red("add", "f32", [qnan_payload], [snan], nan_result="old-first") == [qnan_payload]
    assert red("add", "f32", [qnan_payload], [snan], nan_result="val-first") == [0x7FC00001]
    assert red("add", "f16", [0x7C00], [0xFC00], nan_result="old-first") == [0x7FFF]  # inf-inf
    assert red("add", "bf16", [0x7F80], [0x7F80]) == [0x7F80]             # inf + inf = inf


def test_minmax_nan_readings():
    nan = 0x7E01
    assert red("min", "f16", [nan], [F16_ONE]) == [F16_ONE]                  # min_num
    assert red("max", "f16", [F16_ONE], [nan]) == [F16_ONE]
    assert red("min", "f16", [nan], [0x7D00]) == [0x7FFF]                    # both NaN
    assert red("min", "f16", [nan], [F16_ONE], minmax_nan="nan") == [0x7FFF]
    assert red("min", "f16", [nan], [0x7D00], minmax_nan="num-keep") == [nan]


def test_minmax_signed_zero_readings():
    pz, nz = 0x0000, 0x8000
    assert red("min", "bf16", [pz, nz], [nz, pz]) == [nz, nz]               # ordered (default)
    assert red("max", "bf16", [pz, nz], [nz, pz]) == [pz, pz]
    assert red("min", "f16", [pz, nz], [nz, pz], minmax_zero="val-on-tie") == [nz, pz]
    assert red("min", "f16", [pz, nz], [nz, pz], minmax_zero="old-on-tie") == [pz, nz]
    assert red("max", "f16", [0xFC00], [0xBC00]) == [0xBC00]                 # -1 > -inf


def test_minmax_keeps_operand_bits():
    assert red("max", "bf16", [0x0001], [0x8001]) == [0x0001]                # subnormals kept
    assert red("min", "f16", [0x3555], [0x3556]) == [0x3555]


def test_reduce_keeps_the_callers_dtype():
    out = m.reduce("add", "f16", np.array([1.5], np.float16), np.array([2.0], np.float16))
    assert out.dtype == np.float16 and out[0] == np.float16(3.5)
    out = m.reduce("add", "f32", np.array([1.0], np.float32), np.array([2.0**-30], np.float32))
    assert out.dtype == np.float32 and out[0] == np.float32(1.0 + 2.0**-30)


# --- the float adds against exact rational arithmetic -------------------------------------
def _exact_add(a, b, fmt):
    va, vb = m.exact_value(a, fmt), m.exact_value(b, fmt)
    if va is None or vb is None:
        return None
    bits = m.exact_round(va + vb, fmt)
    if va + vb == 0:                                  # IEEE: exact zero sum is +0 unless both -0
        sign = {"f16": 0x8000, "bf16": 0x8000, "f32": 0x80000000}[fmt]
        bits = sign if (a & sign and b & sign) else 0
    return bits


@pytest.mark.parametrize("d,fmt", [("f16", "f16"), ("bf16", "bf16"), ("f32", "f32")])
def test_float_add_is_the_exact_sum_rounded_once(d, fmt):
    """Every generated pair (edges, ties, seeded random) with finite operands, subnormals
    kept: the model's add equals the exact sum rounded once (BF16_ADD_EXACTNESS)."""
    r = m.DEFAULT.with_(f32_add_subnormals="preserve")
    old, val = m.operand_pairs("add", d, n_random=3000, seed=1, readings=r)
    got = m.reduce("add", d, old, val, r)
    checked = 0
    for a, b, g in zip(old.tolist(), val.tolist(), got.tolist()):
        want = _exact_add(a, b, fmt)
        if want is None:
            continue
        assert g == want, (hex(a), hex(b), hex(g), hex(want))
        checked += 1
    assert checked > 2000


def test_exact_round_reference():
    assert m.exact_round(Fraction(1), "f16") == F16_ONE
    assert m.exact_round(Fraction(65520), "f16") == 0x7C00                  # halfway to 2^16
    assert m.exact_round(Fraction(1, 2**24), "f16") == 1                    # smallest subnormal
    assert m.exact_round(Fraction(1, 2**25), "f16") == 0                    # tie to even 0
    assert m.exact_round(Fraction(3, 2**26), "f16") == 1


# --- generators ---------------------------------------------------------------------------
def test_generators_are_deterministic_and_hit_the_edges():
    for (op, d) in m.ALLOWED:
        a1, b1 = m.operand_pairs(op, d)
        a2, b2 = m.operand_pairs(op, d)
        assert np.array_equal(a1, a2) and np.array_equal(b1, b2)
        assert len(a1) > 100
    old, val = m.operand_pairs("inc", "u32")
    pairs = set(zip(old.tolist(), val.tolist()))
    assert {(5, 5), (4, 5), (6, 5), (0, 0), (0xFFFFFFFF, 0xFFFFFFFF)} <= pairs
    old, val = m.operand_pairs("add", "f16")
    pairs = set(zip(old.tolist(), val.tolist()))
    assert (F16_ONE, 0x1000) in pairs and (0x7BFF, 0x7BFF - (11 << 10)) in pairs
    assert any(m.is_nan(np.array([v], np.uint16), "f16")[0] and not v & 0x0200 for v in val.tolist())


def test_every_open_reading_has_candidates_and_a_default():
    import dataclasses
    names = {f.name.replace("_", "-") for f in dataclasses.fields(m.Readings)}
    assert names == set(m.OPEN_READINGS) - {"disallowed-pair"}
    for name, (question, cands) in m.OPEN_READINGS.items():
        assert question.endswith("?") or "?" in question
        assert cands
