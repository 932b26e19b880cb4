"""What a kernel of kernels/ declares it takes, read from its ``extern "C" __global__``
definition, in the words the reproducers' recorded launches use for their arguments
(fixtures/repro/record.py ``_arg``): "map" (a CUtensorMap by value), "buf" (a pointer),
"int32", "uint32", "uint64". The self-tests compare each recorded launch with it."""
from __future__ import annotations

import re

from fixtures.cuda_layer.build import KERNEL_DIR

_SCALARS = {"int": "int32", "tmac::u32": "uint32", "tmac::u64": "uint64", "tmac::s32": "int32"}


def declared(source: str, kernel: str) -> list[str]:
    text = (KERNEL_DIR / source).read_text()
    m = re.search(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\)\s*)?' + kernel
                  + r"\((.*?)\)\s*\{", text, re.S)
    assert m, f"{source} defines no kernel {kernel}"
    kinds = []
    for p in m.group(1).split(","):
        t = " ".join(p.split()[:-1]).replace("const ", "")
        kinds.append("buf" if "*" in t else "map" if "TensorMap" in t else _SCALARS[t])
    return kinds
