"""Parameter axes parsed from case ids (the readable ids the suites give their cases).

Recognised spellings (``fixtures.tensormap.enums.short`` and a few plain forms), each a
whole id fragment between ``[ ] - _ , = / : .`` or the ends:
  dtype       u8 u16 u32 s32 u64 s64 f16 f32 f64 bf16 f32ftz tf32 tf32ftz b4x16 b4x16p64 b6x16p32
  swizzle     swz0 swz32 swz64 swz128 swz128a32 swz128a32f8 swz128a64
  interleave  il0 il16 il32
  fill        zerofill nanfill
  rank        rank3, rank=3, r3, 3d
  scope       scope-gpu, scope=sys, scope_cta, gpu-scope, scopegpu (cta, cluster, gpu, sys)
  l2          l2none l2-64 l2-128 l2-256
A case without a fragment for an axis counts under "-" for that axis.
"""
from __future__ import annotations

import re

try:
    from fixtures.tensormap.enums import DTYPES, SHORT, Interleave, OobFill, Swizzle
    _DTYPES = [i.short for i in DTYPES.values()]
    _SWZ = list(SHORT[Swizzle].values())
    _IL = list(SHORT[Interleave].values())
    _FILL = list(SHORT[OobFill].values())
except Exception:  # the report tools also run outside the checkout's harness
    _DTYPES = ["u8", "u16", "u32", "s32", "u64", "s64", "f16", "f32", "f64", "bf16", "f32ftz", "tf32",
               "tf32ftz", "b4x16", "b4x16p64", "b6x16p32"]
    _SWZ = ["swz0", "swz32", "swz64", "swz128", "swz128a32", "swz128a32f8", "swz128a64"]
    _IL = ["il0", "il16", "il32"]
    _FILL = ["zerofill", "nanfill"]
_SCOPES = ["cta", "cluster", "gpu", "sys"]
_L2 = ["l2none", "l2-64", "l2-128", "l2-256"]

_B = r"(?:(?<=[\[\]\-_,=/:.\s])|^)"
_E = r"(?=[\[\]\-_,=/:.\s]|$)"


def _alt(words):
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


_PATTERNS = {
    "dtype": re.compile(_B + f"({_alt(_DTYPES)})" + _E),
    "swizzle": re.compile(_B + f"({_alt(_SWZ)})" + _E),
    "interleave": re.compile(_B + f"({_alt(_IL)})" + _E),
    "fill": re.compile(_B + f"({_alt(_FILL)})" + _E),
    "rank": re.compile(_B + r"(?:rank[=\-_]?(\d)|r(\d)|(\d)d)" + _E),
    "scope": re.compile(_B + rf"(?:scope[=\-_]?({_alt(_SCOPES)})|({_alt(_SCOPES)})[\-_]?scope)" + _E),
    "l2": re.compile(_B + f"({_alt(_L2)})" + _E),
}
AXES = ("dtype", "swizzle", "interleave", "fill", "rank", "scope", "l2")
ORDER = {"dtype": _DTYPES, "swizzle": _SWZ, "interleave": _IL, "fill": _FILL,
         "rank": [str(i) for i in range(1, 6)], "scope": _SCOPES, "l2": _L2}


def parse(case_id: str) -> dict[str, str]:
    """``suites/x.py::test_load[f16-rank3-swz128]`` -> {"dtype": "f16", "rank": "3", ...}."""
    tail = case_id.split("::", 1)[-1]
    out = {}
    for axis, rx in _PATTERNS.items():
        m = rx.search(tail)
        if m:
            out[axis] = next(g for g in m.groups() if g is not None)
    return out


def sort_key(axis: str, value: str):
    order = ORDER.get(axis, [])
    return (value == "-", order.index(value) if value in order else len(order), value)
