#!/usr/bin/env python3
"""Prepare a stock Linux guest for vmm's Linux tests (vmm/tests/linux.rs).

Usage: scripts/linux_guest.py BZIMAGE OUTDIR

Writes OUTDIR/bzImage (a copy) and OUTDIR/vmlinux, the ELF kernel inside
the bzImage (what `vmm run --entry pvh` boots): the payload the boot
protocol header locates (setup_sects, payload_offset, payload_length) is
decompressed by its magic: gzip, xz and LZMA with Python's own modules,
LZ4 (Debian's choice) and zstd with the `lz4`/`zstd` tools. What the
kernel's scripts/extract-vmlinux does by scanning, done from the header.
"""
import gzip
import lzma
import os
import shutil
import subprocess
import sys


def payload(image):
    if image[0x202:0x206] != b"HdrS":
        sys.exit(f"not a bzImage: no 'HdrS' at 0x202")
    version = int.from_bytes(image[0x206:0x208], "little")
    if version < 0x208:
        sys.exit(f"boot protocol {version:#x} has no payload fields (2.08+)")
    setup_sects = image[0x1F1] or 4
    start = (setup_sects + 1) * 512
    offset = int.from_bytes(image[0x248:0x24C], "little")
    length = int.from_bytes(image[0x24C:0x250], "little")
    data = image[start + offset : start + offset + length]
    if len(data) != length:
        sys.exit("the payload runs past the end of the image")
    return data


def decompress(data):
    if data[:2] in (b"\x1f\x8b", b"\x1f\x9e"):
        return gzip.decompress(data)
    if data[:6] == b"\xfd7zXZ\x00" or data[:3] == b"\x5d\x00\x00":
        return lzma.decompress(data)
    tool = {b"\x02\x21\x4c\x18": "lz4", b"\x28\xb5\x2f\xfd": "zstd"}.get(data[:4])
    if tool is None:
        sys.exit(f"unknown payload compression (magic {data[:4].hex()})")
    if shutil.which(tool) is None:
        sys.exit(f"the payload is {tool}-compressed and no `{tool}` tool is installed")
    # The kernel appends the decompressed size; the tools stop before it.
    out = subprocess.run([tool, "-dc"], input=data, capture_output=True)
    if not out.stdout.startswith(b"\x7fELF"):
        sys.exit(f"{tool} -dc failed: {out.stderr.decode(errors='replace')[:200]}")
    return out.stdout


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, outdir = sys.argv[1], sys.argv[2]
    image = open(src, "rb").read()
    vmlinux = decompress(payload(image))
    if not vmlinux.startswith(b"\x7fELF"):
        sys.exit("the payload is not an ELF kernel")
    os.makedirs(outdir, exist_ok=True)
    tmp = os.path.join(outdir, ".vmlinux.tmp")
    with open(tmp, "wb") as f:
        f.write(vmlinux)
    os.replace(tmp, os.path.join(outdir, "vmlinux"))
    shutil.copyfile(src, os.path.join(outdir, "bzImage"))


main()
