"""The project's kernels from Python, on NumPy arrays, through the installed kiln module.

    PYTHONPATH=PREFIX/lib/python python3 app.py build/libmy_kernels.so
"""
import sys

import numpy as np

import kiln

plugin = kiln.load_plugin(sys.argv[1])
for notice in plugin["notices"]:
    print("notice:", notice)
rt = kiln.Runtime("cpu")
a = np.random.default_rng(0).random((40, 500), dtype=np.float32)
out = np.zeros(40, np.float32)
rt.launch("row_sum", 40, 128, a, out, units=128)  # the arrays' own memory, no copies
rt.sync()
np.testing.assert_allclose(out, a.sum(axis=1), rtol=1e-5)
print("app.py: row_sum from Python is right")
