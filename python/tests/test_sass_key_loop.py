"""bench/gpu/sass_key_loop.py: finding fa3's key loop in SASS and counting its
instructions, on a made-up listing in cuobjdump's format."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu"))
import sass_key_loop  # noqa: E402


def listing(name, lines):
    """cuobjdump -sass text: one instruction per 16 bytes from address 0."""
    out = [f"\t\tFunction : {name}", "\t.headerflags\t@\"EF_CUDA_SM90\""]
    for i, text in enumerate(lines):
        out.append(f"        /*{16 * i:04x}*/                   {text} ;   /* 0x0000000000000000 */")
        out.append("                                                              /* 0x0000000000000000 */")
    return "\n".join(out) + "\n"


KERNEL = [
    "MOV R1, c[0x0][0x28]",                                         # 0x00
    "UIADD3 UR4, UR4, 0x1, URZ",                                    # 0x10  outer loop starts here
    "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], RZ, !UPT",           # 0x20  inner (key) loop starts here
    "UIADD3 UR10, UR10, 0x2, URZ",                                  # 0x30
    "R2UR UR12, R4",                                                # 0x40
    "HGMMA.64x128x16.F32.BF16 R88, R152, gdesc[UR12].tnspB, R88",  # 0x50
    "MUFU.EX2 R5, R5",                                              # 0x60
    "@!P0 BRA 0x20",                                                # 0x70  the key loop's back edge
    "UMOV UR5, 0x1",                                                # 0x80
    "@P1 BRA 0x10",                                                 # 0x90  the tile loop's back edge
    "EXIT",                                                         # 0xa0
]


def test_innermost_loop_with_both_wgmma_forms():
    kernels = sass_key_loop.parse(listing("_Z6kernelv", KERNEL))
    body = sass_key_loop.key_loop(kernels["_Z6kernelv"])
    assert [a for a, _ in body] == list(range(0x20, 0x80, 0x10))  # not the enclosing tile loop
    stats = sass_key_loop.loop_stats(body)
    assert stats["instructions"] == 6
    assert stats["uniform"] == 1  # UIADD3; R2UR is counted apart
    assert stats["r2ur"] == 1
    assert stats["hgmma"] == 2


def test_a_loop_with_one_wgmma_form_is_not_the_key_loop():
    only_ss = [t for t in KERNEL if "tnspB" not in t]
    kernels = sass_key_loop.parse(listing("_Z6kernelv", only_ss))
    assert sass_key_loop.key_loop(kernels["_Z6kernelv"]) is None


def test_predicated_opcodes():
    assert sass_key_loop.opcode("@!P0 HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], R24") == "HGMMA"
    assert sass_key_loop.opcode("@UP1 UIADD3 UR4, UR4, 0x1, URZ") == "UIADD3"
    assert sass_key_loop.opcode("@PT MUFU.EX2 R5, R5") == "MUFU"


def test_main_reads_saved_sass(tmp_path, capsys):
    path = tmp_path / "k.sass"
    path.write_text(listing("_Z6kernelv", KERNEL))
    assert sass_key_loop.main([str(path), "--list-uniform"]) == 0
    out = capsys.readouterr().out
    assert "key loop 6 instructions, 1 uniform, 1 R2UR, 2 HGMMA" in out
    assert "UIADD3 UR10, UR10, 0x2, URZ" in out
