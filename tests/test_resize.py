"""NHWC resizes with their coordinates as tables (:mod:`edgetune._tvm.kernels.resize`): the
same values as TOPI's resize for every method and coordinate mode it takes, up- and
downsampling, and the tables kept out of the pixels' loop by the default schedule."""

from __future__ import annotations

import numpy as np
import pytest

from edgetune._tvm.kernels.resize import METHODS, MODES


def _run(func, *arrays, dtype=np.float32):
    from edgetune._tvm.core import tvm

    lib = tvm().compile(tvm().IRModule({"main": func.with_attr("global_symbol", "main")}), target="llvm")
    out = tvm().runtime.tensor(np.zeros(arrays[-1], dtype))
    lib["main"](*(tvm().runtime.tensor(a) for a in arrays[:-1]), out)
    return out.numpy()


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("shape", "size"), [((1, 5, 7, 6), (10, 13)), ((2, 9, 8, 4), (4, 3)), ((1, 6, 6, 8), (12, 12))])
def test_tables_compute_what_topi_computes(method, mode, shape, size):
    from tvm import te, topi

    from edgetune._tvm.kernels.resize import resize2d_nhwc

    data = te.placeholder(shape, name="data")
    ours = te.create_prim_func([data, resize2d_nhwc(data, size, method, mode, "")])
    theirs = te.create_prim_func([data, topi.image.resize2d(data, (0.0, 0.0, 0.0, 0.0), size, layout="NHWC",
                                                            method=method, coordinate_transformation_mode=mode)])
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    out = (shape[0], *size, shape[3])
    np.testing.assert_array_equal(_run(ours, x, out), _run(theirs, x, out))


@pytest.mark.parametrize("mode", MODES)
def test_nearest_tables_gather_8_bit_images_as_topi_does(mode):
    """A nearest-neighbour resize of an int8 image (TFLite's RESIZE_NEAREST_NEIGHBOR, a QDQ
    upsampling on its 8-bit tensor) takes the tables too: the same elements as TOPI's."""
    from tvm import te, topi

    from edgetune._tvm.kernels.resize import resize2d_nhwc, supported

    assert supported("nearest_neighbor", mode, "int8") and not supported("linear", mode, "int8")
    shape, size = (1, 5, 7, 6), (10, 13)
    data = te.placeholder(shape, name="data", dtype="int8")
    ours = te.create_prim_func([data, resize2d_nhwc(data, size, "nearest_neighbor", mode, "")])
    theirs = te.create_prim_func([data, topi.image.resize2d(data, (0.0, 0.0, 0.0, 0.0), size, layout="NHWC",
                                                            method="nearest_neighbor",
                                                            coordinate_transformation_mode=mode)])
    x = np.random.default_rng(2).integers(-128, 128, shape).astype(np.int8)
    out = (shape[0], *size, shape[3])
    np.testing.assert_array_equal(_run(ours, x, out, dtype=np.int8), _run(theirs, x, out, dtype=np.int8))


def test_default_schedule_keeps_the_tables_out_of_the_pixel_loop():
    from tvm import te

    from edgetune import _tvm
    from edgetune._tvm.kernels.resize import TABLE, resize2d_nhwc
    from edgetune._tvm.schedules.common import child_blocks
    from edgetune._tvm.schedules.dispatch import default_schedule
    from edgetune.profiles import get_profile

    data = te.placeholder((1, 16, 16, 8), name="data")
    func = te.create_prim_func([data, resize2d_nhwc(data, (32, 32), "linear", "half_pixel", "")])
    target = _tvm.make_target(get_profile("pi4").target_spec())
    found = default_schedule(func, target)
    assert found.kind == "elementwise"
    sch = found.sch
    tables = [b for b in child_blocks(sch) if TABLE in sch.get(b).annotations]
    assert len(tables) == 8  # rows and columns: floor, low, high, weight
    text = sch.mod["main"].script()
    assert "T.parallel" in text and "cols_weight[v_x]" in text
