"""Measure what the model of fixtures/tma_model.py needs from the hardware, and
check a whole sweep of load cases against the model outside pytest.

    python3 tools/probe_tma_bits.py --out DIR [--level standard]

1. nanfill: for every data type, a box fully outside the tensor with the
   NaN-request fill: the bit pattern that lands (and whether encode accepts the
   fill for integer types).
2. bits: for every data type, an in-bounds box of special values (subnormals,
   NaNs with payloads, infinities, signed zeros, low mantissa bits): which
   elements the load changes (FTZ, TF32 truncation...).
3. sweep: every data case of a sweep level, in batches, against the model: a
   summary of mismatches by category; the hardware bytes of the mismatching cases
   go to DIR/mismatch.npz.

Writes DIR/probe.json and prints a summary.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fixtures import cuda_env, gpu as placement, status as st  # noqa: E402
from fixtures import tma_cases, tma_model  # noqa: E402
from fixtures.enums import DTYPES, DataType, Interleave, OobFill, Swizzle, short  # noqa: E402
from fixtures.tma_cases import Case  # noqa: E402
from fixtures.tma_model import TiledLoad, elem_size  # noqa: E402
from fixtures.tma_probes import _module, run_batch  # noqa: E402

EXTRA = 2048          # bytes copied out past the model's guard in the sweep
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _case(cid, dt, coords, fill, n_inner=None, rows=4):
    es = elem_size(dt)
    box0 = n_inner or 64 // es
    dims = (box0, rows)
    p = TiledLoad(dt, 2, dims, (box0 * es,), (box0, rows), (1, 1), Interleave.NONE,
                  Swizzle.NONE, fill, coords)
    return Case(cid, p, "data", box0 * es * rows)


def probe_nanfill(module):
    out = {}
    dts = [d for d in DTYPES if not DTYPES[d].is_packed]
    cases = [_case(f"nanfill-{short(d)}", d, (0, 100), OobFill.NAN_REQUEST_ZERO_FMA) for d in dts]
    cases += [_case(f"zerofill-{short(d)}", d, (0, 100), OobFill.NONE) for d in dts]
    runs = run_batch(module, cases)
    for c, r in zip(cases, runs):
        es = c.load.esize
        ent = {"encode": r.encode_status, "status": r.status}
        if r.image is not None:
            elems = np.frombuffer(r.image[:tma_model.smem_bytes(c.load)], dtype=UINT[es])
            uniq = sorted(set(int(v) for v in elems))
            ent["patterns"] = [f"0x{v:0{2 * es}x}" for v in uniq]
            ent["model"] = "0x" + tma_model.fill_pattern(c.load.dtype, c.load.oob_fill)[::-1].hex()
        out[c.id] = ent
    return out


def probe_bits(module):
    """In-bounds loads of special values: which bits change."""
    out = {}
    dts = [d for d in DTYPES if not DTYPES[d].is_packed]
    cases, datas = [], []
    for d in dts:
        es = elem_size(d)
        c = _case(f"bits-{short(d)}", d, (0, 0), OobFill.NONE, n_inner=64 // es, rows=8)
        cases.append(c)
    runs = run_batch(module, cases)
    for c, r in zip(cases, runs):
        es = c.load.esize
        src = r.pool[r.tensor_base:r.tensor_base + c.tensor_bytes].view(UINT[es])
        ent = {"encode": r.encode_status, "status": r.status}
        if r.image is not None:
            got = np.frombuffer(r.image[:c.tensor_bytes], dtype=UINT[es])
            changed = np.flatnonzero(got != src)
            ent["elements"] = int(src.size)
            ent["changed"] = int(changed.size)
            ent["examples"] = [f"0x{int(src[i]):0{2 * es}x}->0x{int(got[i]):0{2 * es}x}"
                               for i in changed[:16]]
            sp = set(tma_cases.specials(c.load.dtype))
            ent["specials_present"] = int(sum(int(v) in sp for v in src))
        out[c.id] = ent
    return out


def interleave_probe_cases():
    """Interleaved loads built to be decoded: large non-overlapping strides,
    box sizes of distinct primes per dimension, all in bounds unless named."""
    out = []
    specs = []
    for il, swz in ((Interleave.B16, Swizzle.NONE), (Interleave.B32, Swizzle.B32),
                    (Interleave.B16, Swizzle.B64)):
        chunk = 16 if il == Interleave.B16 else 32
        for dt in (DataType.UINT8, DataType.FLOAT16, DataType.FLOAT32, DataType.FLOAT64):
            es = elem_size(dt)
            for inner in sorted({16, chunk, 2 * chunk, 64}):
                for rank, box_rest in ((3, (3, 5)), (3, (5, 2)), (4, (2, 3, 5)), (5, (2, 3, 1, 5)),
                                       (5, (3, 1, 2, 2))):
                    specs.append((il, swz, dt, inner // es, rank, box_rest, 1, "in"))
            specs.append((il, swz, dt, chunk // es, 3, (3, 2), 2, "in"))
            specs.append((il, swz, dt, chunk // es, 3, (3, 2), 1, "lo0"))
            specs.append((il, swz, dt, chunk // es, 3, (3, 2), 1, "hi0"))
            specs.append((il, swz, dt, chunk // es, 3, (3, 2), 1, "lo1"))
            specs.append((il, swz, dt, chunk // es, 4, (3, 2, 2), 1, "hi2"))
    for n, (il, swz, dt, box0, rank, rest, es0, where) in enumerate(specs):
        es = elem_size(dt)
        box = (box0,) + rest
        dims = [box0 + max(1, 16 // es)] + [b + 2 for b in rest]
        strides, run = [], 2048
        for i in range(1, rank):
            strides.append(run)
            run *= dims[i]
        coords = [0] + [1] * (rank - 1)
        if where == "lo0":
            coords[0] = -max(1, 16 // es)
        elif where == "hi0":
            coords[0] = dims[0] - max(1, 16 // es)
        elif where == "lo1":
            coords[1] = -1
        elif where == "hi2":
            coords[2] = dims[2] - 1
        p = TiledLoad(dt, rank, tuple(dims), tuple(strides), box, (es0,) + (1,) * (rank - 1),
                      il, swz, OobFill.NONE, tuple(coords))
        cid = (f"ilprobe{n}-{short(dt)}-r{rank}-box{'x'.join(map(str, box))}-{short(swz)}-"
               f"{short(il)}-es0{es0}-{where}")
        out.append(Case(cid, p, "data", run))
    return out


def probe_interleave(module, out_dir):
    cases = interleave_probe_cases()
    by_rank = collections.defaultdict(list)
    for c in cases:
        by_rank[c.rank].append(c)
    rep, imgs = {}, {}
    for rank, cs in sorted(by_rank.items()):
        try:
            # room for the "dimension 0 counts 16/32-byte units" reading (H1) twice over
            h1 = max(-(-c.load.box_dim[0] // c.load.element_strides[0]) * 32
                     * int(np.prod(c.load.box_dim[1:])) for c in cs)
            extra = int(min(2 * h1, 160 * 1024))
            runs = run_batch(module, cs, extra_copy=extra, tx_override=(1 << 20) - 1,
                             timeout_ns=30_000_000)
        except Exception as exc:
            rep[f"rank{rank}"] = repr(exc)
            print("INTERLEAVE BATCH FAILED", rank, exc, flush=True)
            break
        rep[f"rank{rank}-extra"] = extra
        for c, r in zip(cs, runs):
            rep[c.id] = {"encode": r.encode_status, "status": r.status}
            if r.image is not None:
                img = np.frombuffer(r.image, np.uint8)
                nz = np.flatnonzero(img != tma_model.POISON)
                rep[c.id]["written_last"] = int(nz[-1]) if nz.size else -1
                imgs[c.id] = img[: (int(nz[-1]) + 16 if nz.size else 0)]
    np.savez_compressed(out_dir / "interleave.npz", **imgs)
    return rep


def category(case):
    p = case.load
    cs = case.id.rsplit("-es", 1)[1].split("-", 1)[1] if "-es" in case.id else "?"
    cs = cs.split("-dst")[0]
    cs = cs.rsplit("-d", 1)[0] if cs.startswith(("straddle", "outside")) else cs
    return (short(p.dtype), short(p.swizzle), short(p.interleave), short(p.oob_fill),
            "es1" if "-es1-" in case.id else "esN", cs,
            "dst" if p.smem_offset else "dst0")


def sweep(module, level, out_dir, cap_bytes=12 << 20, with_interleave=False):
    cases = [c for c in tma_cases.generate(level) if c.expect == "data"
             and (with_interleave or c.load.interleave == Interleave.NONE)]
    t0 = time.time()
    by_rank = collections.defaultdict(list)
    for c in cases:
        by_rank[c.rank].append(c)
    results = {}
    launches = 0
    broken = None
    for rank, cs in sorted(by_rank.items()):
        for k in range(0, len(cs), 512):
            if broken:
                break
            try:
                for c, r in zip(cs[k:k + 512], run_batch(module, cs[k:k + 512], extra_copy=EXTRA)):
                    results[c.id] = (c, r)
            except Exception as exc:   # a trap kills the context: stop, say where
                broken = {"rank": rank, "first": cs[k].id, "last": cs[min(k + 511, len(cs) - 1)].id,
                          "error": repr(exc)}
                print("BATCH FAILED", broken, flush=True)
            launches += 1
    t_gpu = time.time() - t0
    fails = collections.Counter()
    totals = collections.Counter()
    examples = {}
    saved = {}
    saved_bytes = 0
    kinds = collections.Counter()
    for cid, (c, r) in results.items():
        cat = category(c)
        totals[cat[:3]] += 1
        if r.encode_status != "CUDA_SUCCESS":
            kind = "encode:" + r.encode_status
        elif r.status != st.OK:
            kind = "status:" + st.describe(r.status).split(":")[0]
        elif not r.global_intact:
            kind = "global"
        else:
            want = tma_model.load(c.load, r.pool, r.tensor_base)
            g = np.frombuffer(r.image, np.uint8)
            w = np.frombuffer(want.data + bytes([tma_model.POISON]) * EXTRA, np.uint8)
            if np.array_equal(g, w):
                continue
            d = np.flatnonzero(g != w)
            kind = "data"
            if (g[d] == tma_model.POISON).all():
                kind = "data:unwritten"
            elif (d >= tma_model.copy_bytes(c.load)).any():
                kind = "data:past-guard"
            elif (d >= tma_model.footprint(c.load)).any():
                kind = "data:past-footprint"
        kinds[kind] += 1
        fails[cat[:3] + (kind,)] += 1
        key = cat + (kind,)
        examples.setdefault(key, cid)
        if r.image is not None and saved_bytes < cap_bytes and len(examples) and \
                sum(1 for s in saved if s.startswith(cid.split('-es')[0])) < 2:
            saved[cid] = np.frombuffer(r.image, np.uint8)
            saved_bytes += len(r.image)
    if saved:
        np.savez_compressed(out_dir / "mismatch.npz", **saved)
    return {
        "level": level, "cases": len(cases), "broken": broken, "ran": len(results), "launches": launches, "seconds": round(t_gpu, 2),
        "failed": sum(kinds.values()), "kinds": dict(kinds),
        "fail_by_dtype_swz_il": {"|".join(k): v for k, v in sorted(fails.items())},
        "total_by_dtype_swz_il": {"|".join(k): v for k, v in sorted(totals.items())},
        "examples": {"|".join(k): v for k, v in list(examples.items())[:400]},
        "saved": sorted(saved),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--level", default="standard")
    ap.add_argument("--skip-sweep", action="store_true")
    ap.add_argument("--skip-ilprobe", action="store_true")
    ap.add_argument("--with-interleave", action="store_true",
                    help="sweep the interleaved cases too")
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    state = cuda_env.probe()
    if not state.available:
        print("no GPU:", state.reason)
        return 2
    g = placement.Gpu.open(placement.home_device(state))
    from fixtures.encode import driver_version
    module = _module(g.arch, None)
    report = {"device": g.name, "cc": g.cc, "driver": driver_version()}
    report["nanfill"] = probe_nanfill(module)
    report["bits"] = probe_bits(module)
    (out_dir / "probe.json").write_text(json.dumps(report, indent=1))
    if not args.skip_sweep:
        report["sweep"] = sweep(module, args.level, out_dir,
                                with_interleave=args.with_interleave)
        (out_dir / "probe.json").write_text(json.dumps(report, indent=1))
    # last: a load writing past its shared memory kills the context
    if not args.skip_ilprobe:
        report["interleave"] = probe_interleave(module, out_dir)
    (out_dir / "probe.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({k: report[k] for k in ("device", "cc", "driver", "nanfill", "bits")},
                     indent=1))
    if "sweep" in report:
        s = report["sweep"]
        print(json.dumps({k: s[k] for k in ("level", "cases", "ran", "broken", "launches",
                                            "seconds", "failed", "kinds")}, indent=1))
        print(json.dumps(s["fail_by_dtype_swz_il"], indent=0)[:6000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
