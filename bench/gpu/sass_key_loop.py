#!/usr/bin/env python3
"""The instruction mix of each fa3 kernel's key loop, from its SASS.

For every kernel in the inputs (object files, cubins or shared libraries,
read with `cuobjdump -sass`; or SASS text saved from it), the key loop is the
innermost loop whose body issues both wgmma forms: S = Q K^T (HGMMA with both
operands in shared memory) and O += P V (HGMMA with `.tnspB`, P from
registers). One line per kernel: the body's instruction count (the masked
path included, as laid out), its uniform-datapath instructions (U*: ring
slots, descriptors, barrier addresses), R2UR moves (vector to uniform
registers, which the wgmmas then wait on), HGMMAs, and the most frequent
opcodes. How it was used: docs/perf/gpu-fa3.md, "The key loop's descriptors
and ring slot" (FlashAttention-3's kernel read from the fa3-fwd wheel the same way).

    python3 bench/gpu/sass_key_loop.py build/.../fa3_bf16_d128_128.cu.o [more ...]
    python3 bench/gpu/sass_key_loop.py --list-uniform kernel.sass   # the loop's uniform instructions, in order
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys

_FUNCTION = re.compile(r"Function\s*:\s*(\S+)")
_INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_BRANCH = re.compile(r"\bBRA\b(?:\s+\S+,)?\s+0x([0-9a-f]+)")
_PREDICATE = re.compile(r"^@!?U?P[T0-9]+\s+")


def opcode(text):
    """`@!P0 HGMMA.64x128x16.F32.BF16 R24, ...` -> `HGMMA`."""
    return _PREDICATE.sub("", text).split()[0].split(".")[0]


def parse(sass_text):
    """{kernel name: [(address, instruction text)]} of `cuobjdump -sass` output."""
    kernels, name = {}, None
    for line in sass_text.splitlines():
        m = _FUNCTION.search(line)
        if m:
            name = m.group(1)
            kernels[name] = []
            continue
        m = _INSTRUCTION.match(line)
        if m and name is not None:
            kernels[name].append((int(m.group(1), 16), m.group(2)))
    return kernels


def key_loop(instructions):
    """The shortest backward-branch body holding both HGMMA forms, or None."""
    index = {address: i for i, (address, _) in enumerate(instructions)}
    best = None
    for i, (address, text) in enumerate(instructions):
        m = _BRANCH.search(text)
        if not m:
            continue
        target = int(m.group(1), 16)
        if target >= address or target not in index:
            continue
        body = instructions[index[target]:i + 1]
        hgmma = [t for _, t in body if opcode(t) == "HGMMA"]
        if any("tnspB" in t for t in hgmma) and any("tnspB" not in t for t in hgmma):
            if best is None or len(body) < len(best):
                best = body
    return best


def loop_stats(body):
    ops = collections.Counter(opcode(t) for _, t in body)
    return {
        "instructions": len(body),
        "uniform": sum(n for op, n in ops.items() if op.startswith("U")),
        "r2ur": ops.get("R2UR", 0),
        "hgmma": ops.get("HGMMA", 0),
        "top": ops.most_common(8),
    }


def cuobjdump():
    """cuobjdump from PATH, the CUDA toolkit, or the pip wheel nvidia-cuda-cuobjdump."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    if os.path.exists("/usr/local/cuda/bin/cuobjdump"):
        return "/usr/local/cuda/bin/cuobjdump"
    try:
        import nvidia  # the namespace package of NVIDIA's pip wheels
        for root in nvidia.__path__:
            for sub in ("cu13/bin", "cuda_cuobjdump/bin"):
                p = os.path.join(root, sub, "cuobjdump")
                if os.path.exists(p):
                    return p
    except ImportError:
        pass
    return None


def read_sass(path):
    with open(path, "rb") as f:
        head = f.read(4)
    if head != b"\x7fELF":
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    tool = cuobjdump()
    if tool is None:
        raise RuntimeError("cuobjdump not found (CUDA toolkit, or pip install nvidia-cuda-cuobjdump)")
    return subprocess.run([tool, "-sass", path], check=True, capture_output=True, text=True).stdout


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="+", help="object files, cubins, shared libraries, or saved SASS text")
    ap.add_argument("--list-uniform", action="store_true", help="also print each key loop's uniform instructions")
    args = ap.parse_args(argv)
    status = 0
    for path in args.inputs:
        try:
            kernels = parse(read_sass(path))
        except (OSError, RuntimeError, subprocess.CalledProcessError) as e:
            print(f"{path}: {e}", file=sys.stderr)
            status = 1
            continue
        for name, instructions in kernels.items():
            body = key_loop(instructions)
            if body is None:
                continue
            s = loop_stats(body)
            top = " ".join(f"{op} {n}" for op, n in s["top"])
            print(f"{os.path.basename(path)} {name[-48:]}: key loop {s['instructions']} instructions, "
                  f"{s['uniform']} uniform, {s['r2ur']} R2UR, {s['hgmma']} HGMMA; {top}")
            if args.list_uniform:
                for address, text in body:
                    if opcode(text).startswith("U") or opcode(text) == "R2UR":
                        print(f"    {address:#07x} {text}")
    return status


if __name__ == "__main__":
    sys.exit(main())
