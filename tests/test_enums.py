"""The driver enum values and the driver -> PTX table, checked against the seed texts
(004: Driver API; 003: PTX ISA Table 33) and the installed cuda-python."""
import re

import pytest

from fixtures.tensormap import enums
from fixtures.tensormap.enums import DataType, DTYPES, Interleave, OobFill, Swizzle
from seeds import seed

ENUM_BLOCK = re.compile(r"typedef enum (\w+)_enum \{(.*?)\}", re.S)
ENUMERATOR = re.compile(r"(CU_TENSOR_MAP_\w+)(?:\s*=\s*(\d+))?\s*,?\s*(?://\s*([^\n]*))?")
ENUM_TYPES = {"CUtensorMapDataType": DataType, "CUtensorMapInterleave": Interleave,
              "CUtensorMapSwizzle": Swizzle, "CUtensorMapL2promotion": enums.L2Promotion,
              "CUtensorMapFloatOOBfill": OobFill}


def driver_enum_blocks():
    """(enum name, [(C name, value, comment)]) for each fully numbered typedef in seed 004."""
    for name, body in ENUM_BLOCK.findall(seed("004")):
        items, value = [], 0
        for c_name, explicit, comment in ENUMERATOR.findall(body):
            value = int(explicit) if explicit else value
            items.append((c_name, value, comment.strip()))
            value += 1
        if items and re.search(r"=\s*0", body):   # listings without values are excerpts
            yield name, items


def test_every_enum_matches_seed_004():
    checked = set()
    for name, items in driver_enum_blocks():
        cls = ENUM_TYPES[name]
        ours = {enums.c_name(m): int(m) for m in cls}
        assert {n: v for n, v, _ in items} == ours, f"{name} differs from seed 004"
        checked.add(name)
    assert checked == set(ENUM_TYPES), f"seed 004 enums not found: {set(ENUM_TYPES) - checked}"


def test_element_sizes_match_seed_004_comments():
    for name, items in driver_enum_blocks():
        if name != "CUtensorMapDataType":
            continue
        for c_name, value, comment in items:
            n, unit = re.match(r"(\d+)\s*(byte|bit)", comment).groups()
            bits = int(n) * (8 if unit == "byte" else 1)
            assert DTYPES[DataType(value)].bits == bits, f"{c_name}: {comment}"


def table_33():
    rows = {}
    for line in seed("003").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].isdigit():
            rows[int(cells[0])] = cells[1:]
    assert len(rows) == 16, "Table 33 not found in seed 003"
    return rows


def test_ptx_elemtype_values_match_table_33():
    rows = table_33()
    for info in DTYPES.values():
        names = re.findall(r"`([^`]+)`", rows[info.ptx_elemtype][0])
        assert info.ptx_name in names, (
            f"{info.dtype.name}: PTX value {info.ptx_elemtype} is {names} in Table 33, "
            f"we say {info.ptx_name}")
    assert sorted(i.ptx_elemtype for i in DTYPES.values()) == list(range(16))


def test_the_values_that_differ():
    """The issue's warning: driver FLOAT64=8, BFLOAT16=9, FLOAT32_FTZ=10;
    PTX f32.ftz=8, f64=9, bf16=10."""
    assert (DataType.FLOAT64, DataType.BFLOAT16, DataType.FLOAT32_FTZ) == (8, 9, 10)
    assert [DTYPES[d].ptx_elemtype for d in (DataType.FLOAT32_FTZ, DataType.FLOAT64,
                                              DataType.BFLOAT16)] == [8, 9, 10]


@pytest.mark.parametrize("column,table", [
    (1, {v: n for v, n in [(0, "No interleave"), (1, "16B interleave"), (2, "32B interleave")]}),
    (4, {0: "Zero fill", 1: "OOB-NaN fill"}),
])
def test_interleave_and_fill_columns(column, table):
    rows = table_33()
    for value, text in table.items():
        assert rows[value][column] == text
    mapping = enums.PTX_INTERLEAVE if column == 1 else enums.PTX_FILL
    assert sorted(mapping.values()) == sorted(table)


def test_swizzle_columns():
    rows = table_33()
    for value, text in enums.PTX_SWIZZLE_MODE_NAMES.items():
        assert rows[value][2] == text
    for value, text in enums.PTX_ATOMICITY_NAMES.items():
        assert rows[value][3] == text
    # The driver's 128B_ATOM_* modes are 128B swizzling with a wider atomicity.
    assert enums.PTX_SWIZZLE[Swizzle.B128_ATOM_32B] == (3, 1)
    assert enums.PTX_SWIZZLE[Swizzle.B128_ATOM_32B_FLIP_8B] == (3, 2)
    assert enums.PTX_SWIZZLE[Swizzle.B128_ATOM_64B] == (3, 3)


def test_against_installed_cuda_python():
    driver = pytest.importorskip("cuda.bindings.driver")
    pairs = [(DataType, driver.CUtensorMapDataType), (Interleave, driver.CUtensorMapInterleave),
             (Swizzle, driver.CUtensorMapSwizzle), (enums.L2Promotion, driver.CUtensorMapL2promotion),
             (OobFill, driver.CUtensorMapFloatOOBfill),
             (enums.Im2colWideMode, driver.CUtensorMapIm2ColWideMode)]
    for ours, theirs in pairs:
        assert {enums.c_name(m): int(m) for m in ours} == {m.name: int(m) for m in theirs}


def test_hopper_has_13_types():
    assert len(enums.dtypes_for(90)) == 13 and len(enums.dtypes_for(100)) == 16


def test_short_ids_unique():
    for cls in (DataType, Interleave, Swizzle, enums.L2Promotion, OobFill):
        ids = [enums.short(m) for m in cls]
        assert len(set(ids)) == len(ids)
