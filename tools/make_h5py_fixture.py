#!/usr/bin/python3
"""Write tests/fixtures/h5py_bool.h5: booleans as h5py stores them (numpy bool -> a 1-byte HDF5
enum FALSE = 0, TRUE = 1), for the C++ test that qkv's HDF5 reader loads them
(tests/io/test_h5py_files.cpp). Run with Debian's /usr/bin/python3 (h5py 3.7):

    /usr/bin/python3 tools/make_h5py_fixture.py tests/fixtures/h5py_bool.h5
"""
import sys

import h5py
import numpy as np


def main(path):
    with h5py.File(path, "w") as f:
        f["pad"] = np.array([[False, False, True], [False, True, True]])          # (B, Tk)
        f.create_group("masks")["causal"] = np.tril(np.ones((4, 4), dtype=bool))  # (Tq, Tk)
        f["ints01"] = np.array([[1, 0, 1]], dtype=np.int8)   # integers 0 / 1 also make a mask
        f["not_a_mask"] = np.array([0, 2, 1], dtype=np.int64)
        f["floats"] = np.array([0.5, 1.0], dtype=np.float32)
        f["empty"] = np.zeros((0, 3), dtype=bool)
        f.attrs["flag"] = np.bool_(True)
        f.attrs["off"] = np.bool_(False)
        f.attrs["count"] = np.int64(7)


if __name__ == "__main__":
    main(sys.argv[1])
