"""The dense-layer compute (TE) over packed weights."""

from __future__ import annotations

from typing import Any

from .conv import crop


def dense_packed(data: Any, weights: Any, features: int) -> Any:
    """``data[..., K] @ W[K, N]`` with W packed as [Np/NB, K, NB] (N padded to a multiple of NB)."""
    from tvm import te

    nbo, k, nb = (int(x) for x in weights.shape)
    lead = [int(x) for x in data.shape[:-1]]
    rk = te.reduce_axis((0, k), "rk")

    def value(*idx: Any) -> Any:
        *rows, j = idx
        return te.sum(data[(*rows, rk)] * weights[j // nb, rk, j % nb], axis=[rk])

    out = te.compute((*lead, nbo * nb), value, name="dense_packed", attrs={"edgetune.kernel": "dense_packed"})
    return crop(out, features)
