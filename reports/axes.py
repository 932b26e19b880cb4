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
  mode        tile, im2col, im2colw (-> im2col-w), im2colw128 (-> im2col-w128); the host-encoding
              suite's spellings tiled, im2colwide + wideW / wideW128 too; the [...] parameters
              first, then the test's name.  Without one, the suite file gives it: test_tma_load.py and test_multicast.py load tiles, test_im2col_load.py im2col
  cluster     cl1 ... cl16 (the cluster size)
  mask        mask0b{bits} (bit i = CTA rank i, most significant first, one digit per CTA of the
              cluster): "all" (every CTA), "one" (a single CTA), "sparse" (any other subset)
  map         dev-template, dev-zeros, dev-copy (a map built or copied on the device); the other
              cases of the load suites (LOAD_SUITES) load through the host-encoded map: "host"
A case without a fragment for an axis counts under "-" for that axis (the parsed dict has no key).
Fragments are read from the part after the file's "::" only (a file path names no value).
"""
from __future__ import annotations

import re

try:
    from fixtures.tensormap.enums import DTYPES, SHORT, Interleave, OobFill, Swizzle
    _DTYPES = [i.short for i in DTYPES.values()]
    _SWZ = list(SHORT[Swizzle].values())
    _IL = list(SHORT[Interleave].values())
    _FILL = list(SHORT[OobFill].values())
except ImportError:  # the report tools also run outside the checkout's harness
    _DTYPES = ["u8", "u16", "u32", "s32", "u64", "s64", "f16", "f32", "f64", "bf16", "f32ftz", "tf32",
               "tf32ftz", "b4x16", "b4x16p64", "b6x16p32"]
    _SWZ = ["swz0", "swz32", "swz64", "swz128", "swz128a32", "swz128a32f8", "swz128a64"]
    _IL = ["il0", "il16", "il32"]
    _FILL = ["zerofill", "nanfill"]
_SCOPES = ["cta", "cluster", "gpu", "sys"]
_L2 = ["l2none", "l2-64", "l2-128", "l2-256"]
_MODES = ["tile", "im2col", "im2col-w", "im2col-w128"]
_MODE_OF = {"tile": "tile", "tiled": "tile", "im2col": "im2col", "im2colw": "im2col-w",
            "im2colw128": "im2col-w128", "wideW": "im2col-w", "wideW128": "im2col-w128"}
_MASKS = ["all", "one", "sparse"]
_MAPS = ["host", "dev-template", "dev-zeros", "dev-copy"]
# The load suites: each case loads through a map; the file says the mode when the id does not.
LOAD_SUITES = {"test_tma_load.py": "tile", "test_multicast.py": "tile", "test_im2col_load.py": "im2col"}

_B = r"(?:(?<=[\[\]\-_,=/:.\s])|^)"
_E = r"(?=[\[\]\-_,=/:.\s]|$)"


def _alt(words):
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


# One expression for every axis, its branches named by axis, read left to right once: the
# first match of an axis gives its value (no spelling's match holds another axis's, and no
# place of an id begins spellings of two axes). A search per axis read each id up to
# eleven times: a full sweep's 81,596 ids took 0.68 s on the CPU machine, against 0.49 s
# read once (the same result for each of the three sweeps' ids and `--traps=all`'s).
_ONE = re.compile(_B + "(?:" + "|".join([
    f"(?P<dtype>{_alt(_DTYPES)})", f"(?P<swizzle>{_alt(_SWZ)})", f"(?P<interleave>{_alt(_IL)})",
    f"(?P<fill>{_alt(_FILL)})",
    r"rank[=\-_]?(?P<rank>\d)", r"r(?P<rank_r>\d)", r"(?P<rank_d>\d)d",
    rf"scope[=\-_]?(?P<scope>{_alt(_SCOPES)})", rf"(?P<scope_after>{_alt(_SCOPES)})[\-_]?scope",
    f"(?P<l2>{_alt(_L2)})", r"cl(?P<cluster>1[0-6]|[1-9])",
    f"(?P<mode>{_alt(_MODE_OF)})",    # "im2colwide" (the host-encoding suite) is a prefix of its
    #                                   wideW / wideW128 fragment, not a mode
    r"mask0b(?P<mask>[01]{1,16})", r"dev-(?P<map>template|zeros|copy)"]) + ")" + _E)
_AXIS_OF = {"rank_r": "rank", "rank_d": "rank", "scope_after": "scope"}
AXES = ("dtype", "swizzle", "interleave", "fill", "rank", "scope", "l2", "mode", "cluster", "mask", "map")
_PLAIN = ("dtype", "swizzle", "interleave", "fill", "rank", "scope", "l2", "cluster")
ORDER = {"dtype": _DTYPES, "swizzle": _SWZ, "interleave": _IL, "fill": _FILL,
         "rank": [str(i) for i in range(1, 6)], "scope": _SCOPES, "l2": _L2, "mode": _MODES,
         "cluster": [str(i) for i in range(1, 17)], "mask": _MASKS, "map": _MAPS}


def mask_kind(bits: str, cluster: int | None = None) -> str:
    """``"1011"`` -> "sparse": "all" when every one of the cluster's CTAs is in the mask (all
    digits 1 and one digit per CTA; the cluster size is ``cluster``, else the number of
    digits), "one" for a single CTA, "sparse" otherwise."""
    n = len(bits) if cluster is None else cluster
    if set(bits) == {"1"} and len(bits) == n:
        return "all"
    return "one" if bits.count("1") == 1 else "sparse"


def parse(case_id: str) -> dict[str, str]:
    """``suites/x.py::test_load[f16-rank3-swz128]`` -> {"dtype": "f16", "rank": "3", ...}."""
    path, sep, tail = case_id.partition("::")
    if not sep:                        # a file's node id (a collection error) or a bare name
        path, tail = (case_id, "") if case_id.endswith(".py") else ("", case_id)
    found: dict[str, str] = {}
    params_at = tail.find("[")
    mode = params_mode = None
    for m in _ONE.finditer(tail):
        group = m.lastgroup
        if group == "mode":      # the [...] parameters' first, else the test's name's
            value = _MODE_OF[m.group(group)]
            mode = mode or value
            if params_mode is None and 0 <= params_at <= m.start():
                params_mode = value
            continue
        found.setdefault(_AXIS_OF.get(group, group), m.group(group))
    out = {a: found[a] for a in _PLAIN if a in found}
    suite_file = path.replace("\\", "/").rsplit("/", 1)[-1]
    mode = params_mode or mode or LOAD_SUITES.get(suite_file)   # test_im2col_load[...-im2colw-...]: im2col-w
    if mode:
        out["mode"] = mode
    if "mask" in found:
        out["mask"] = mask_kind(found["mask"], int(out["cluster"]) if "cluster" in out else None)
    if "map" in found:
        out["map"] = "dev-" + found["map"]
    elif suite_file in LOAD_SUITES:
        out["map"] = "host"
    return out


def sort_key(axis: str, value: str):
    order = ORDER.get(axis, [])
    return (value == "-", order.index(value) if value in order else len(order), value)
