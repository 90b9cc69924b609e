#!/usr/bin/env python3
"""Writes the NPY fixtures of data/npy_test.cc with NumPy's own writer.

  cd data/testdata/npy && /usr/bin/python3 make_fixtures.py

Every value follows from its index i (row-major order) by a formula that
data/npy_test.cc repeats, so the test knows each element without reading
NumPy's output:

  unsigned bytes, bool:  U(i) = (i * 7) % 251                (bool: U(i) % 2)
  signed integers:       S(i) = ((i * 7) % 251 - 125) * scale
                         scale 1 (int8), 200 (int16), 2**20 (int32),
                         2**40 (int64); uint16: U(i) * 250
  floats:                F(i) = ((i * 7) % 251 - 125) / 8

The files are tiny (a few hundred bytes each) and written once; the test
reads them from the source tree.
"""

import os

import numpy as np


def u(n):
    return np.array([(i * 7) % 251 for i in range(n)], dtype=np.int64)


def s(n, scale):
    return (u(n) - 125) * scale


def f(n):
    return (u(n) - 125) / 8.0


def save(name, array, version=None):
    if version is None:
        np.save(name, array)
    else:
        with open(name, "wb") as out:
            np.lib.format.write_array(out, array, version=version)


def main():
    os.chdir(os.path.dirname(os.path.abspath(__file__)))
    # An MNIST-like batch, N×H×W bytes; float32 N×C×H×W; int64 labels.
    save("images_u1.npy", u(3 * 4 * 5).astype(np.uint8).reshape(3, 4, 5))
    save("nchw_f4.npy", f(2 * 3 * 2 * 2).astype("<f4").reshape(2, 3, 2, 2))
    save("labels_i8.npy", np.array([(i * 3) % 10 for i in range(12)], dtype="<i8"))
    # Every integer and float type, little- and big-endian, 9 elements each.
    signed = {"i1": 1, "i2": 200, "i4": 2**20, "i8": 2**40}
    for order, tag in (("<", "le"), (">", "be")):
        for code, scale in signed.items():
            save(f"{tag}_{code}.npy", s(9, scale).astype(order + code))
        save(f"{tag}_u2.npy", (u(9) * 250).astype(order + "u2"))
        save(f"{tag}_f4.npy", f(9).astype(order + "f4"))
        save(f"{tag}_f8.npy", f(9).astype(order + "f8"))
    # The other header versions: 2.0 (a 4-byte header length) and 3.0 (UTF-8).
    save("v2_f4.npy", f(6).astype("<f4").reshape(2, 3), version=(2, 0))
    save("v3_u1.npy", u(5).astype(np.uint8), version=(3, 0))
    # A 0-d array, an empty one, a bool one, non-finite floats.
    save("scalar_f8.npy", np.array(2.5, dtype="<f8"))
    save("empty_f4.npy", np.zeros((0, 3), dtype="<f4"))
    save("bool_b1.npy", (u(7) % 2).astype(bool))
    save("nonfinite_f8.npy", np.array([np.nan, np.inf, -np.inf, 1e300, -0.0], dtype="<f8"))
    # What NumPy writes for arrays traind refuses.
    save("fortran_f4.npy", np.asfortranarray(f(6).astype("<f4").reshape(2, 3)))
    save("strings_U5.npy", np.array(["cat", "horse"], dtype="<U5"))


if __name__ == "__main__":
    main()
