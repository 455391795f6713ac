"""Frames as the vision backends hand them on: PIL images for local models, JPEG bytes for remote services.

A frame is an RGB array (``h, w, 3``; other dtypes are clipped to ``uint8``, a grey ``h, w`` array is repeated
into three channels, extra channels are dropped) or a PIL image. Imports numpy at module level and PIL when
called.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

__all__ = ["encode_jpeg", "to_pil"]


def to_pil(image: Any) -> Any:
    """An RGB PIL image of a frame (a PIL image is converted to RGB)."""
    from PIL import Image

    if isinstance(image, Image.Image):
        return image.convert("RGB")
    arr = np.asarray(image)
    if arr.dtype != np.uint8:
        arr = np.clip(arr, 0, 255).astype(np.uint8)
    if arr.ndim == 2:
        arr = np.repeat(arr[..., None], 3, axis=2)
    return Image.fromarray(np.ascontiguousarray(arr[..., :3]))


def encode_jpeg(image: Any, quality: int = 85) -> bytes:
    """JPEG bytes of a frame; bytes pass through unchanged."""
    if isinstance(image, bytes | bytearray):
        return bytes(image)
    rgb = to_pil(image)
    if rgb.mode != "RGB":  # e.g. a two-channel array
        rgb = rgb.convert("RGB")
    buf = io.BytesIO()
    rgb.save(buf, format="JPEG", quality=quality)
    return buf.getvalue()
