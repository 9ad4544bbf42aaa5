#!/usr/bin/python3
"""Convert a qkv checkpoint from format_version 1 to format_version 2 (docs/checkpoint.md).

    scripts/convert_checkpoint.py IN.h5 OUT.h5     (OUT may be IN: the file is then replaced)
    scripts/convert_checkpoint.py --reseal FILE.h5 (recompute the qkv header after an edit)

Version 1 stored every string (the root attributes `format` and `qkv_version`, the `/config`
dataset) as a variable-length HDF5 string; version 2 stores them fixed-length (the string's
UTF-8 bytes, NUL-padded, at least 1 byte), which is all that changed. Everything else is copied
as it is: groups and attributes in creation order (tracked, as qkv writes them), every dataset
with its dtype, shape and contiguous layout. Version 2 files also start with a 512-byte HDF5 user
block holding qkv's text header (magic, format_version, file length, CRC-64/XZ of every byte after
the block), which the output gets.

--reseal recomputes that header in place (atomically) for a version-2 file that was edited on
purpose, e.g. with h5py (which keeps the user block), so that qkv loads it again; a file with no
user block (an HDF5 file starting with its signature) gets one put in front.

The output is built in memory, written to OUT.tmp-<pid> in OUT's directory and fsync'ed, read
back and compared with the input object by object, then renamed over OUT. The input is only ever opened read-only; on
any failure the temporary file is removed and OUT (if it exists) is left as it was. Exit status:
0 converted, 1 failed (the reason on stderr), 2 bad arguments.

Only convert files you trust (your own checkpoints): reading a variable-length string goes
through HDF5's own conversion, which a deliberately damaged file can crash; that is why qkv
itself no longer reads them.
"""
import io
import lzma
import os
import sys

import h5py
import numpy as np

FROM_VERSION, TO_VERSION = 1, 2
CRT = h5py.h5.INDEX_CRT_ORDER
HEADER_BYTES = 512
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def crc64_xz_slow(data):
    """CRC-64/XZ bit by bit (reflected ECMA-182 polynomial, init and xorout all ones)."""
    crc = (1 << 64) - 1
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xC96C5795D7870F42 if crc & 1 else 0)
    return crc ^ ((1 << 64) - 1)


def crc64_xz(data):
    """The same CRC at C speed: an .xz stream with check=CRC64 stores it after the block."""
    xz = lzma.compress(data, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=0)
    index_bytes = (int.from_bytes(xz[-8:-4], "little") + 1) * 4  # stream footer: backward size
    end = len(xz) - 12 - index_bytes
    return int.from_bytes(xz[end - 8:end], "little")


assert crc64_xz_slow(b"123456789") == crc64_xz(b"123456789") == 0x995DC9BBDF1939FA


def qkv_header(image):
    """The 512-byte header for a whole file image (user block included), as qkv writes it."""
    text = (f"qkv-checkpoint\nformat_version {TO_VERSION}\nbytes {len(image)}\n"
            f"crc64-xz {crc64_xz(bytes(image[HEADER_BYTES:])):016x}\n"
            f"# CRC-64/XZ of bytes 512 to the end (an HDF5 file with a 512-byte user block); "
            f"after editing the file on purpose: scripts/convert_checkpoint.py --reseal FILE\n").encode()
    return text.ljust(HEADER_BYTES, b"\0")


def sealed(image):
    """`image` with its qkv header recomputed (or a header block put in front of a bare HDF5 file)."""
    image = bytearray(image)
    if image[:8] == HDF5_SIGNATURE:
        image[0:0] = bytes(HEADER_BYTES)
    elif image[HEADER_BYTES:HEADER_BYTES + 8] != HDF5_SIGNATURE:
        fail("neither a qkv checkpoint nor an HDF5 file (no HDF5 signature at byte 0 or 512)")
    image[:HEADER_BYTES] = qkv_header(image)
    return bytes(image)


def write_atomically(path, data):
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def fail(msg):
    raise RuntimeError(msg)


def links_in_order(group):
    """Child names of a group in creation order (h5py's own iteration is by name)."""
    names = []
    group.id.links.iterate(lambda n: names.append(n.decode()), idx_type=CRT)
    return names


def attrs_in_order(obj):
    names = []
    h5py.h5a.iterate(obj.id, lambda n, *_: names.append(n.decode()), index_type=CRT)
    return names


def fixed_string(text):
    """A scalar fixed-length UTF-8 string: the bytes, NUL-padded, at least 1 byte (qkv's layout)."""
    raw = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    return np.array(raw, dtype=h5py.string_dtype("utf-8", max(1, len(raw))))


def is_string(dtype):
    return h5py.check_string_dtype(dtype) is not None


def string_value(value, where):
    if isinstance(value, np.ndarray):
        if value.shape != ():
            fail(f"{where}: expected one string, found shape {value.shape}")
        value = value[()]
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value).decode("utf-8")
    if isinstance(value, str):
        return value
    fail(f"{where}: expected a string, found {type(value).__name__}")


def copy_attrs(src, dst, where, replace={}):
    for name in attrs_in_order(src):
        value = src.attrs[name]
        if name in replace:
            dst.attrs.create(name, replace[name])
        elif is_string(src.attrs.get_id(name).dtype):
            dst.attrs.create(name, fixed_string(string_value(value, f"{where}@{name}")))
        else:
            dst.attrs.create(name, value, dtype=src.attrs.get_id(name).dtype)


def copy_group(src, dst, where, replace={}):
    copy_attrs(src, dst, where, replace)
    for name in links_in_order(src):
        obj = src.get(name, getlink=True)
        path = f"{where.rstrip('/')}/{name}"
        if not isinstance(obj, h5py.HardLink):
            fail(f"{path}: a {type(obj).__name__}, expected a group or a dataset")
        obj = src[name]
        if isinstance(obj, h5py.Group):
            copy_group(obj, dst.create_group(name, track_order=True), path)
        elif isinstance(obj, h5py.Dataset):
            if is_string(obj.dtype):
                ds = dst.create_dataset(name, data=fixed_string(string_value(obj[()], path)))
            elif obj.size == 0:
                ds = dst.create_dataset(name, shape=obj.shape, dtype=obj.dtype)
            else:
                ds = dst.create_dataset(name, data=obj[()], dtype=obj.dtype)
            copy_attrs(obj, ds, path)
        else:
            fail(f"{path}: neither a group nor a dataset")


def same_value(a, b):
    if isinstance(a, (str, bytes, np.bytes_)) or isinstance(b, (str, bytes, np.bytes_)):
        return string_value(a, "") == string_value(b, "")
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def is_fixed_string(dtype):
    info = h5py.check_string_dtype(dtype)
    return info is not None and info.length is not None


def compare_attrs(src, out, where, skip=()):
    if attrs_in_order(src) != attrs_in_order(out):
        fail(f"{where}: attributes {attrs_in_order(out)} differ from the input's {attrs_in_order(src)}")
    for name in attrs_in_order(src):
        if name in skip:
            continue
        if is_string(src.attrs.get_id(name).dtype) and not is_fixed_string(out.attrs.get_id(name).dtype):
            fail(f"{where}@{name}: not written as a fixed-length string")
        if not same_value(src.attrs[name], out.attrs[name]):
            fail(f"{where}@{name}: the written value differs from the input's")


def compare(src, out, where):
    """Everything in `src` is in `out`, equal, in the same order; `out` has nothing else."""
    compare_attrs(src, out, where, skip=("format_version",) if where == "/" else ())
    if links_in_order(src) != links_in_order(out):
        fail(f"{where}: children {links_in_order(out)} differ from the input's {links_in_order(src)}")
    for name in links_in_order(src):
        a, b, path = src[name], out[name], f"{where.rstrip('/')}/{name}"
        if isinstance(a, h5py.Group):
            compare(a, b, path)
            continue
        if is_string(a.dtype):
            if not is_fixed_string(b.dtype) or not same_value(a[()], b[()]):
                fail(f"{path}: not written as the same fixed-length string")
        elif a.shape != b.shape or a.dtype != b.dtype or (a.size and not same_value(a[()], b[()])):
            fail(f"{path}: the written dataset differs from the input's")
        compare_attrs(a, b, path)


def check_input(src):
    if "format" not in src.attrs or "format_version" not in src.attrs:
        fail("not a qkv checkpoint (no root attribute 'format' or 'format_version')")
    version = src.attrs["format_version"]
    if not np.issubdtype(np.asarray(version).dtype, np.integer):
        fail("format_version is not an integer")
    if int(version) == TO_VERSION:
        fail(f"already format_version {TO_VERSION}, nothing to convert")
    if int(version) != FROM_VERSION:
        fail(f"format_version {int(version)}; this script converts {FROM_VERSION} to {TO_VERSION}")
    fmt = string_value(src.attrs["format"], "@format")
    if fmt != "qkv-checkpoint":
        fail(f"{path}: format is '{fmt}', expected 'qkv-checkpoint'")


def convert(src_path, dst_path):
    tmp = f"{dst_path}.tmp-{os.getpid()}"
    try:
        with h5py.File(src_path, "r") as src:
            check_input(src)
            # Built in memory and written by Python, as qkv's save_checkpoint does: after a write
            # error (a full disk) HDF5's own file driver leaves a file it crashes on at exit.
            image = io.BytesIO()
            with h5py.File(image, "w", track_order=True, userblock_size=HEADER_BYTES) as dst:
                copy_group(src, dst, "/", replace={"format_version": np.int64(TO_VERSION)})
            with open(tmp, "wb") as f:
                f.write(sealed(image.getvalue()))
                f.flush()
                os.fsync(f.fileno())
            with h5py.File(tmp, "r") as out:
                compare(src, out, "/")
                if int(out.attrs["format_version"]) != TO_VERSION:
                    fail("format_version was not updated")
        os.rename(tmp, dst_path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    try:
        fd = os.open(os.path.dirname(os.path.abspath(dst_path)), os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    except OSError:
        pass  # best effort, as in qkv's save_checkpoint


def reseal(path):
    with open(path, "rb") as f:
        image = f.read()
    write_atomically(path, sealed(image))
    with h5py.File(path, "r") as f:  # still an HDF5 file that h5py reads
        if f.userblock_size != HEADER_BYTES:
            fail(f"user block of {f.userblock_size} bytes after resealing, expected {HEADER_BYTES}")


def main(argv):
    if len(argv) == 3 and argv[1] == "--reseal":
        try:
            reseal(argv[2])
        except (RuntimeError, OSError) as e:
            print(f"convert_checkpoint: {argv[2]}: {e} (nothing written)", file=sys.stderr)
            return 1
        print(f"{argv[2]}: qkv header recomputed")
        return 0
    if len(argv) != 3 or argv[1].startswith("-"):
        print("usage: " + __doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        print("       " + __doc__.strip().splitlines()[3].strip(), file=sys.stderr)
        return 2
    src, dst = argv[1], argv[2]
    try:
        convert(src, dst)
    except (RuntimeError, OSError, KeyError, ValueError, UnicodeDecodeError) as e:
        print(f"convert_checkpoint: {src}: {e} (nothing written)", file=sys.stderr)
        return 1
    print(f"{src} -> {dst}: format_version {FROM_VERSION} -> {TO_VERSION}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
