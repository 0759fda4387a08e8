"""The kiln Python module on NumPy arrays (always) and PyTorch tensors (when torch imports).

Run by ctest as `python_module` (Debian's python3 with PYTHONPATH=build/python), or directly:
    PYTHONPATH=build/python python3 tests/python/test_kiln.py -v
"""
import gc
import os
import sys
import unittest

import numpy as np

import kiln

try:
    import torch
except ImportError:  # reported as skipped, with the reason
    torch = None


def cpu():
    return kiln.Runtime("cpu")


class Devices(unittest.TestCase):
    def test_devices_list_the_cpu(self):
        names = {d["name"]: d for d in kiln.devices()}
        self.assertIn("cpu", names)
        self.assertTrue(names["cpu"]["available"])
        for d in names.values():
            if not d["available"]:
                self.assertTrue(d["reason"], d)

    def test_an_unknown_device_is_an_error_that_lists_them(self):
        with self.assertRaises(kiln.Error) as e:
            kiln.Runtime("tpu:0")
        self.assertIn("cuda-emu", str(e.exception))
        self.assertIsInstance(e.exception, RuntimeError)
        self.assertEqual(e.exception.kind, "not found")
        self.assertIn("'trace'", kiln.Error.__doc__)

    def test_the_type_stubs_name_exactly_the_public_names(self):
        import ast
        stub = os.path.join(os.path.dirname(kiln.__file__), "_kiln.pyi")
        with open(stub) as f:
            tree = ast.parse(f.read())
        def public(names):
            return {n for n in names if not n.startswith("_") or n in (
                "__dlpack__", "__dlpack_device__", "__array_interface__")}
        stubbed = {}
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                stubbed[node.name] = public(n.name for n in node.body
                                            if isinstance(n, ast.FunctionDef))
                stubbed[node.name] |= public(n.target.id for n in node.body
                                             if isinstance(n, ast.AnnAssign))
            elif isinstance(node, ast.FunctionDef):
                stubbed[node.name] = None
        ext = kiln._kiln
        module = public(n for n in dir(ext) if not n.startswith("__"))
        self.assertEqual(set(stubbed), module)
        for name, members in stubbed.items():
            if members is None:
                continue
            cls = getattr(ext, name)
            have = public(n for n in vars(cls) if n != "__init__")
            if name == "Error":
                have = {"kind"}  # set on each instance
            self.assertEqual(members - {"__init__"}, have, name)
            for m in members - {"__init__", "kind"}:
                # More than pybind11's signature line: what it is or does.
                doc = (getattr(cls, m).__doc__ or "").strip().splitlines()
                prop = isinstance(vars(cls)[m], property)
                self.assertGreater(len(doc), 0 if prop else 1, f"{name}.{m} has no docstring")
        for f in (n for n, members in stubbed.items() if members is None):
            self.assertGreater(len((getattr(ext, f).__doc__ or "").strip().splitlines()), 1, f)

    def test_every_public_name_of_the_package_has_a_docstring(self):
        import kiln.lib
        for module in (kiln, kiln.lib):
            for name in module.__all__:
                value = getattr(module, name)
                if isinstance(value, tuple):
                    continue  # OPS, REDUCE_OPS: documented by their #: comments
                self.assertTrue((getattr(value, "__doc__", None) or "").strip(),
                                f"{module.__name__}.{name}")
        self.assertIn("NumPy arrays", kiln.lib.matmul.__doc__ + kiln.lib.__doc__)
        self.assertTrue(os.path.exists(os.path.join(os.path.dirname(kiln.__file__), "py.typed")))


class NumPy(unittest.TestCase):
    def test_axpy_writes_the_numpy_array_in_place(self):
        rt = cpu()
        x = np.arange(1000, dtype=np.float32)
        y = np.ones(1000, dtype=np.float32)
        rt.launch("axpy", 4, 256, x, y, 2.0)
        rt.sync()
        np.testing.assert_array_equal(y, 2 * np.arange(1000, dtype=np.float32) + 1)

    def test_a_kernel_object_and_comptime_values_by_name(self):
        rt = cpu()
        k = rt.kernel("row_sum")
        self.assertEqual(k.name, "row_sum")
        self.assertEqual(k.params, ["in", "out", "units"])
        kinds = {p["name"]: p["kind"] for p in k.parameters}
        self.assertEqual(kinds, {"in": "tensor", "out": "tensor", "units": "comptime"})
        self.assertTrue(k.parameters[0]["const"])
        self.assertEqual(k.parameters[0]["dtype"], "f32")
        self.assertEqual(k.parameters[2]["type"], "int")
        self.assertEqual(k.parameters[2]["default"], "256")
        a = np.random.default_rng(1).random((37, 300), dtype=np.float32)
        out = np.zeros(37, np.float32)
        rt.launch(k, 37, 64, a, out, units=64)
        rt.sync()
        np.testing.assert_allclose(out, a.sum(axis=1), rtol=1e-5)
        rt.launch(k, 37, 32, a, out, units="32")  # a comptime value in its text form
        rt.sync()
        np.testing.assert_allclose(out, a.sum(axis=1), rtol=1e-5)

    def test_a_strided_view_is_used_without_a_copy(self):
        rt = cpu()
        base = np.zeros((8, 10), np.float32)
        view = base[:, 1::2]  # every other column: strides (10, 2) elements
        t = rt.tensor(view)
        self.assertEqual(t.shape, (8, 5))
        self.assertEqual(t.strides, (10, 2))
        back = np.from_dlpack(t)  # kiln -> NumPy: the same memory, the same view
        self.assertEqual(back.__array_interface__["data"][0],
                         view.__array_interface__["data"][0])
        self.assertEqual(back.strides, view.strides)
        base[0, 1] = 7.0
        self.assertEqual(back[0, 0], 7.0)

    def test_flat_kernels_refuse_views_they_would_read_flat(self):
        # axpy indexes x and y flat: a strided x would be read at the wrong elements, a strided
        # y written between its elements, a broadcast y past the end (docs/runtime.md "Views").
        rt = cpu()
        x = np.arange(8192, dtype=np.float32)[::2]
        y = np.ones(4096, np.float32)
        with self.assertRaisesRegex(kiln.Error, r"argument 'x'.*strides \[2\]"):
            rt.launch("axpy", 4, 256, x, y, 2.0)
        g = np.full(64, -5.0, np.float32)
        with self.assertRaisesRegex(kiln.Error, r"argument 'y'"):
            rt.launch("axpy", 1, 256, np.ones(16, np.float32), g[:32:2], 2.0)
        self.assertTrue((g == -5.0).all())  # nothing written between the view's elements
        b = np.zeros(4096, np.float32)
        with self.assertRaisesRegex(kiln.Error, r"argument 'y'"):
            rt.launch("axpy", 4, 256, x.copy(),
                      np.lib.stride_tricks.as_strided(b, (4096,), (0,)), 1.0)
        # The contiguous copies the message asks for work.
        rt.launch("axpy", 4, 256, np.ascontiguousarray(x), y, 2.0)
        rt.sync()
        np.testing.assert_array_equal(y, 2 * np.arange(0, 8192, 2, dtype=np.float32) + 1)

    def test_random_views_compute_the_reference_or_are_refused(self):
        # The library's copy takes any view; axpy only dense ones. Either way, no element outside
        # the output view changes.
        rt = cpu()
        rng = np.random.default_rng(7)
        ran = refused = 0
        for trial in range(60):
            base = np.full(512, -9.0, np.float32)
            n = int(rng.integers(1, 40))
            step = int(rng.integers(1, 4))
            start = int(rng.integers(0, 8))
            y = base[start:start + n * step:step]
            x = np.arange(n, dtype=np.float32) if trial % 2 else \
                np.arange(2 * n, dtype=np.float32)[::2]
            before = base.copy()
            try:
                rt.launch("axpy", (n + 255) // 256, 256, x, y, 3.0)
                rt.sync()
            except kiln.Error:
                refused += 1
                np.testing.assert_array_equal(base, before)
                continue
            ran += 1
            want = before.copy()
            want[start:start + n * step:step] = 3.0 * x + before[start:start + n * step:step]
            np.testing.assert_array_equal(base, want)
        self.assertGreater(ran, 5)
        self.assertGreater(refused, 5)

    def test_upload_converts_big_endian_arrays(self):
        rt = cpu()
        a = np.arange(10, dtype=">f4")
        t = rt.upload(a)
        np.testing.assert_array_equal(np.from_dlpack(t), np.arange(10, dtype=np.float32))

    def test_kiln_tensors_round_trip_through_numpy(self):
        rt = cpu()
        x = np.arange(12, dtype=np.float64).reshape(3, 4)
        t = rt.upload(x)  # a copy, on any device
        self.assertEqual((t.dtype, t.shape, t.device), ("f64", (3, 4), "cpu"))
        n = np.from_dlpack(t)
        np.testing.assert_array_equal(n, x)
        np.testing.assert_array_equal(t.numpy(), x)
        # np.asarray: a writable view of the same memory (NumPy 1 marks what it takes through
        # DLPack read-only, and will not export that again).
        w = np.asarray(t)
        self.assertTrue(w.flags.writeable)
        self.assertEqual(w.__array_interface__["data"][0], n.__array_interface__["data"][0])
        again = rt.tensor(w)  # kiln -> NumPy -> kiln: still the same memory
        self.assertEqual(np.asarray(again).__array_interface__["data"][0],
                         w.__array_interface__["data"][0])
        w[1, 2] = -1.0
        self.assertEqual(np.asarray(again)[1, 2], -1.0)
        del t, again
        gc.collect()
        self.assertEqual(w[1, 2], -1.0)  # NumPy's view keeps the memory alive

    def test_read_only_arrays_are_not_written(self):
        rt = cpu()
        x = np.ones(256, np.float32)
        y = np.ones(256, np.float32)
        y.flags.writeable = False
        try:
            rt.launch("axpy", 1, 256, x, y, 2.0)
        except (kiln.Error, BufferError, TypeError):
            pass  # refused: NumPy will not export it, or kiln will not write it
        else:
            self.fail("a read-only array was accepted as a kernel's output")
        np.testing.assert_array_equal(y, np.ones(256, np.float32))

    def test_asarray_of_a_type_numpy_lacks_is_an_error_not_an_object_array(self):
        t = cpu().empty("bf16", [4])
        with self.assertRaisesRegex(TypeError, "bf16 has no NumPy type"):
            np.asarray(t)
        emu = kiln.Runtime("cuda-emu").empty("f32", [4])
        with self.assertRaisesRegex(TypeError, "not in host memory"):
            np.asarray(emu)

    def test_a_capsule_consumed_twice_is_an_error(self):
        rt = cpu()
        cap = np.arange(4, dtype=np.float32).__dlpack__()
        rt.tensor(cap)
        with self.assertRaises(kiln.Error) as e:
            rt.tensor(cap)
        self.assertIn("consumed already", str(e.exception))

    def test_the_producer_stays_alive_while_kiln_uses_its_memory(self):
        rt = cpu()
        t = rt.tensor(np.full(1000, 3.0, np.float32))  # the array's only reference is kiln's
        gc.collect()
        np.testing.assert_array_equal(np.from_dlpack(t), np.full(1000, 3.0, np.float32))

    def test_unsupported_types_and_bad_arguments_are_errors(self):
        rt = cpu()
        with self.assertRaises(kiln.Error) as e:
            rt.tensor(np.zeros(4, np.complex64))
        self.assertIn("has no kiln type", str(e.exception))
        with self.assertRaises(kiln.Error) as e:
            rt.launch("axpy", 1, 256, np.zeros(4, np.float32))
        self.assertIn("'y' (argument 2) is missing", str(e.exception))
        # What the binding layer converts names the argument and says what it takes.
        x, y = np.zeros(4, np.float32), np.zeros(4, np.float32)
        for call, message in [
            (lambda: rt.launch("axpy", 1, 256, [1, 2], y, 1.0), "argument 1 is a list"),
            (lambda: rt.launch("axpy", 1, 256, x, y, a=None), "argument 'a' is a NoneType"),
            (lambda: rt.launch("axpy", 1, 256, x, y, 2**70), "argument 3 is 1180591620717411303424"),
            (lambda: rt.launch("axpy", 1.5, 256, x, y, 1.0), "cubes must be an integer, not a float"),
            (lambda: rt.launch("axpy", (1, "a"), 256, x, y, 1.0), "cubes[1] must be an integer"),
            (lambda: rt.launch("axpy", 1, (1, 1, 1, 1), x, y, 1.0), "cube_dim is an int or a tuple"),
            (lambda: rt.launch(3, 1, 256, x, y, 1.0), "a name (str) or a kiln.Kernel; got a int"),
            (lambda: rt.empty("f32", (2, "a")), "shape[1] must be an integer, not a str"),
        ]:
            with self.assertRaises(kiln.Error) as e:
                call()
            self.assertIn(message, str(e.exception))
        # NumPy scalars are the values they hold.
        y[:] = 1
        rt.launch("axpy", np.int64(1), np.int32(256), np.ones(4, np.float32), y, np.float32(2))
        np.testing.assert_array_equal(y, np.full(4, 3, np.float32))
        with self.assertRaises(kiln.Error) as e:
            rt.kernel("axpx")
        self.assertEqual(e.exception.kind, "not found")

    def test_errors_carry_the_kernel_source_line(self):
        rt = kiln.Runtime("cpu", checked=True)
        a = np.ones((10, 64), np.float32)
        out = np.zeros(10, np.float32)
        with self.assertRaises(kiln.Error) as e:
            rt.launch("row_sum", 10, 128, a, out, units=64)
        self.assertIn("kernels/examples/row_sum.cpp:", str(e.exception))
        rt.launch("row_sum", 12, 64, a, out, units=64)  # two cubes past the rows
        with self.assertRaises(kiln.Error) as e:
            rt.sync()
        self.assertEqual(e.exception.kind, "kernel fault")
        self.assertIn("kernels/examples/row_sum.cpp:", str(e.exception))

    def test_checked_mode_and_line_widths_per_launch(self):
        rt = cpu()  # unchecked
        a = np.ones((10, 64), np.float32)
        out = np.zeros(10, np.float32)
        rt.launch("row_sum", 12, 64, a, out, units=64, checked=True)  # two cubes past the rows
        with self.assertRaises(kiln.Error) as e:
            rt.sync()
        self.assertEqual(e.exception.kind, "kernel fault")
        x = np.arange(64, dtype=np.float32)
        y = np.zeros(64, np.float32)
        rt.launch("axpy", 1, 256, x, y, 2.0, lines={"x": 4, "y": 4})
        rt.sync()
        np.testing.assert_array_equal(y, 2 * x)
        with self.assertRaisesRegex(kiln.Error, "argument 'x'.*line width 3"):
            rt.launch("axpy", 1, 256, x, y, 2.0, lines={"x": 3})
        with self.assertRaisesRegex(kiln.Error, "checked= takes True, False or None"):
            rt.launch("axpy", 1, 256, x, y, 2.0, checked=1)
        with self.assertRaisesRegex(kiln.Error, "lines= takes a dict"):
            rt.launch("axpy", 1, 256, x, y, 2.0, lines=4)
        with self.assertRaisesRegex(kiln.Error, "lines names 'z', which is not a tensor parameter"):
            rt.launch("axpy", 1, 256, x, y, 2.0, lines={"z": 4})
        with self.assertRaisesRegex(kiln.Error, "lines names 'a', which is not a tensor parameter"):
            rt.launch("axpy", 1, 256, x, y, 2.0, lines={"a": 4})
        for bad in (-1, 2**70):
            with self.assertRaisesRegex(kiln.Error, r"lines\['x'\]"):
                rt.launch("axpy", 1, 256, x, y, 2.0, lines={"x": bad})

    def test_cache_statistics(self):
        rt = cpu()
        x = np.ones(16, np.float32)
        rt.launch("axpy", 1, 256, x, x.copy(), 1.0)
        before = kiln.cache_stats()
        rt.launch("axpy", 1, 256, x, x.copy(), 1.0)
        after = kiln.cache_stats()
        self.assertEqual(after["memory_hits"], before["memory_hits"] + 1)
        self.assertEqual(after["compiles"], before["compiles"])
        self.assertGreaterEqual(after["compile_ms"] + after["disk_load_ms"], 0.0)


class Streams(unittest.TestCase):
    def test_launch_takes_kernel_cubes_and_cube_dim_first(self):
        rt = cpu()
        x = np.arange(4, dtype=np.float32)
        y = np.zeros(4, dtype=np.float32)
        with self.assertRaisesRegex(TypeError, "first three arguments are positional"):
            rt.launch("axpy", 1)
        with self.assertRaisesRegex(TypeError, "first four arguments are positional"):
            rt.launch_on(rt.new_stream(), "axpy", 1)
        with self.assertRaisesRegex(kiln.Error, "the stream is a kiln.Stream"):
            rt.launch_on("not a stream", "axpy", 1, 256, x, y, 1.0)
        with self.assertRaisesRegex(kiln.Error, "name \\(str\\) or a kiln.Kernel; got a int"):
            rt.launch(3, 1, 256, x, y, 1.0)
        k = rt.kernel("axpy")
        rt.launch(k, (1,), (256, 1, 1), x, y, 1.0, checked=True)  # this launch's option
        rt.sync()
        self.assertEqual(y.tolist(), x.tolist())

    def test_a_launcher_binds_a_kernel_its_comptime_values_and_options(self):
        rt = cpu()
        a = np.arange(3 * 40, dtype=np.float32).reshape(3, 40)
        out = np.zeros(3, np.float32)
        for wait in (False, True):
            out[:] = 0
            row_sum = rt.launcher("row_sum", wait=wait, units=64, checked=True)
            self.assertEqual(row_sum.kernel.name, "row_sum")
            self.assertEqual(row_sum.wait, wait)
            self.assertIn("units=", repr(row_sum))
            row_sum(3, 64, a, out)
            if not wait:
                rt.sync()
            np.testing.assert_allclose(out, a.sum(1), rtol=1e-6)
        with self.assertRaisesRegex(kiln.Error, "no comptime parameter 'unit'"):
            rt.launcher("row_sum", unit=64)
        with self.assertRaisesRegex(kiln.Error, "'units' is a tensor"):
            rt.launcher("row_sum", units=a)
        with self.assertRaisesRegex(kiln.Error, "not registered|no kernel|unknown"):
            rt.launcher("no_such_kernel")
        with self.assertRaisesRegex(kiln.Error, "name \\(str\\) or a kiln.Kernel; got a int"):
            rt.launcher(3)
        with self.assertRaisesRegex(kiln.Error, "lines= takes a dict"):
            rt.launcher("row_sum", lines=4)
        row_sum = rt.launcher(rt.kernel("row_sum"), units=64)
        for bad in (0, -1, 2**40, (1, 2, 3, 4)):
            with self.assertRaisesRegex(kiln.Error, "cubes"):
                row_sum(bad, 64, a, out)
        with self.assertRaisesRegex(TypeError, "positional arguments only"):
            row_sum(3)
        with self.assertRaisesRegex(TypeError, "positional arguments only"):
            row_sum(3, 64, a, out=out)
        with self.assertRaisesRegex(kiln.Error, "'out' is a runtime parameter"):
            row_sum(3, 64, a, "text")

    def test_launches_on_a_stream_of_their_own(self):
        rt = cpu()
        s = rt.new_stream()
        x = np.arange(512, dtype=np.float32)
        y = np.zeros(512, np.float32)
        rt.launch_on(s, "axpy", 2, 256, x, y, 1.0)
        rt.sync(s)
        np.testing.assert_array_equal(y, x)
        rt.sync(stream=s)
        rt.sync(None)
        with self.assertRaisesRegex(TypeError, "one optional argument, stream"):
            rt.sync(s, s)
        with self.assertRaisesRegex(TypeError, "one optional argument, stream"):
            rt.sync(stream_=s)
        with self.assertRaisesRegex(kiln.Error, "sync: the stream is a kiln.Stream; got a str"):
            rt.sync("s")

    def test_a_cuda_stream_handle_needs_a_gpu_runtime(self):
        with self.assertRaises(kiln.Error) as e:
            cpu().wrap_stream(0)
        self.assertEqual(e.exception.kind, "unsupported")


class Plugins(unittest.TestCase):
    def test_load_plugin_registers_its_kernels(self):
        path = os.environ.get("KILN_USER_PLUGIN")
        if not path:
            self.skipTest("KILN_USER_PLUGIN is not set (ctest sets it)")
        p = kiln.load_plugin(path)
        self.assertIn("tile_transpose", p["kernels"])
        rt = cpu()
        a = np.arange(6 * 7, dtype=np.float32).reshape(6, 7)
        out = np.zeros((7, 6), np.float32)
        rt.launch("tile_transpose", (1, 1), (8, 8), a, out, tile=8)
        rt.sync()
        np.testing.assert_array_equal(out, a.T)
        with self.assertRaises(kiln.Error):
            kiln.load_plugin("/no/such/plugin.so")


@unittest.skipIf(torch is None, "PyTorch is not importable here (pip install torch to run these)")
class PyTorch(unittest.TestCase):
    def test_axpy_on_torch_tensors_in_place(self):
        rt = cpu()
        x = torch.arange(1000, dtype=torch.float32)
        y = torch.ones(1000, dtype=torch.float32)
        rt.launch("axpy", 4, 256, x, y, 2.0)
        rt.sync()
        self.assertTrue(torch.equal(y, 2 * torch.arange(1000, dtype=torch.float32) + 1))

    def test_expanded_outputs_are_refused(self):
        rt = cpu()
        x = torch.arange(16, dtype=torch.float32)
        y = torch.zeros(1, dtype=torch.float32).expand(16)
        with self.assertRaisesRegex(kiln.Error, r"argument 'y'"):
            rt.launch("axpy", 1, 256, x, y, 2.0)
        with self.assertRaisesRegex(kiln.Error, r"argument 'x'"):
            rt.launch("axpy", 1, 256, torch.arange(32, dtype=torch.float32)[::2],
                      torch.zeros(16), 2.0)

    def test_tensors_kiln_must_not_read_as_memory_are_refused(self):
        rt = cpu()
        x = torch.arange(4, dtype=torch.float32)
        y = torch.zeros(4, dtype=torch.float32)
        # A negative view's elements are the negation of its memory's (PyTorch's own DLPack
        # export drops the negation); kiln refuses it rather than read the wrong sign.
        with self.assertRaisesRegex(kiln.Error, r"negative view.*resolve_neg"):
            rt.launch("axpy", 1, 256, torch._neg_view(x), y, 1.0)
        rt.launch("axpy", 1, 256, torch._neg_view(x).resolve_neg(), y, 1.0)
        rt.sync()
        self.assertTrue(torch.equal(y, -x))
        # A tensor that requires a gradient: a kernel writing it would bypass autograd.
        with self.assertRaisesRegex(BufferError, "require gradient"):
            rt.launch("axpy", 1, 256, x, torch.zeros(4, requires_grad=True), 1.0)
        # A subclass (nn.Parameter, detached) goes through the same fast import.
        p = torch.nn.Parameter(torch.zeros(4), requires_grad=False)
        rt.launch("axpy", 1, 256, x, p, 2.0)
        rt.sync()
        self.assertTrue(torch.equal(p, 2 * x))

    def test_a_torch_tensor_lives_while_kiln_uses_it(self):
        rt = cpu()
        t = rt.tensor(torch.arange(8, dtype=torch.float32))  # the only reference to the memory
        import gc

        gc.collect()
        self.assertEqual(t.numpy().tolist(), list(range(8)))

    def test_bf16_both_ways(self):
        rt = cpu()
        x = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.bfloat16)
        rt.launch("scale_generic", 1, 256, x, 2.0)  # the bf16 instantiation, in place
        rt.sync()
        self.assertTrue(torch.equal(x, torch.tensor([2.0, 4.0, 6.0, 8.0], dtype=torch.bfloat16)))
        back = torch.from_dlpack(rt.tensor(x))
        self.assertEqual(back.dtype, torch.bfloat16)
        self.assertEqual(back.data_ptr(), x.data_ptr())

    def test_the_custom_operator_example(self):
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python"))
        import torch_custom_op

        a = torch.randn(33, 100)
        self.assertTrue(torch.allclose(torch_custom_op.row_sum(a), a.sum(dim=1), rtol=1e-5, atol=1e-4))
        compiled = torch.compile(torch_custom_op.row_sum, backend="eager")
        self.assertTrue(torch.allclose(compiled(a), a.sum(dim=1), rtol=1e-5, atol=1e-4))


if __name__ == "__main__":
    # Directly (ctest's python_numpy): everything but the PyTorch tests, which python_torch runs
    # with pytest in the environment that has PyTorch (the plugin test replaces axpy, which
    # they launch, so they do not share a process with it).
    sys.argv[1:1] = ["Devices", "NumPy", "Streams", "Plugins"]
    unittest.main()
