"""_wire.py: conversion between NumPy / PyTorch values and attnd's JSON.

Float tensors travel as tensor objects, ``{"dtype": "float32", "shape":
[..], "data": "<base64>"}`` (little-endian float32, row-major); boolean and
integer fields (masks, positions, token indices) stay JSON arrays, because
the contract takes them only in that form. Nothing here touches the
network.
"""
from __future__ import annotations

import base64
import hashlib
from typing import Any, Dict, Optional

import numpy as np
from numpy.typing import NDArray

# Request fields whose values are float tensors (v1 and v2). Any of them
# may be a tensor object or, in v2, a {"ref": ...} to the tensor store.
FLOAT_FIELDS = frozenset({
    "x", "memory", "value",
    "w_q", "w_k", "w_v", "w_o", "w_qkv",
    "b_q", "b_k", "b_v", "b_o", "b_qkv",
    "attn_bias",
})
# Boolean fields: JSON arrays of true/false only.
BOOL_FIELDS = frozenset({"key_padding_mask", "attn_mask"})
# Integer fields: JSON arrays of integers only.
INT_FIELDS = frozenset({"positions", "key_positions", "global_tokens"})
# Response fields that may come back as tensor objects (or nested arrays).
RESPONSE_TENSORS = frozenset({
    "output", "attention", "value_norms", "q", "k", "rollout",
})


def is_torch(value: Any) -> bool:
    """True for a torch.Tensor, found without importing torch (it is an
    optional dependency)."""
    return (type(value).__module__.split(".")[0] == "torch"
            and hasattr(value, "detach"))


def to_numpy(value: Any) -> NDArray[Any]:
    """A NumPy view or copy of a NumPy array, torch tensor, list or scalar.
    Float torch tensors of any precision (bfloat16 included, which NumPy
    lacks) come out as float32; others keep their dtype."""
    if is_torch(value):
        t = value.detach()
        if t.is_floating_point():
            t = t.float()
        return np.asarray(t.cpu().numpy())
    return np.asarray(value)


class ComplexValuesError(ValueError):
    """A tensor of complex values where attnd takes real ones."""


def as_float32(value: Any) -> NDArray[Any]:
    """value as a C-ordered little-endian float32 array of its own shape
    (the wire layout and the bytes a ref hashes; a 0-d value stays 0-d,
    where np.ascontiguousarray would make it 1-d). Raises ValueError for
    complex values, which have no float32 form: casting would drop the
    imaginary part with no more than a warning."""
    a = to_numpy(value)
    if a.dtype.kind == "c":
        raise ComplexValuesError("attnd takes real tensors; got %s values"
                                 % a.dtype)
    return np.asarray(a, dtype="<f4", order="C")


def tensor_object(a: NDArray[Any]) -> Dict[str, Any]:
    """The tensor object of a float32 array (see as_float32)."""
    return {"dtype": "float32", "shape": [int(d) for d in a.shape],
            "data": base64.b64encode(a.tobytes()).decode("ascii")}


def sha256_ref(a: NDArray[Any]) -> str:
    """The store's name for a float32 array: "sha256:" and the hex digest of
    its little-endian bytes in row-major order."""
    return "sha256:" + hashlib.sha256(a.tobytes()).hexdigest()


def is_tensor_object(value: Any) -> bool:
    return (isinstance(value, dict) and "data" in value and "shape" in value
            and value.get("dtype") == "float32")


def decode_tensor(value: Dict[str, Any]) -> NDArray[Any]:
    """A tensor object as a writable float32 array of its shape."""
    raw = bytearray(base64.b64decode(value["data"]))
    shape = tuple(int(d) for d in value["shape"])
    return np.frombuffer(raw, dtype="<f4").reshape(shape).astype(
        np.float32, copy=False)


def bool_list(value: Any, name: str) -> Any:
    """A boolean mask as nested lists of bools. A float array is refused:
    an additive mask is attn_bias, and guessing which floats mean "hidden"
    could compute a different attention in silence."""
    if isinstance(value, (list, tuple)) and not _has_arrays(value):
        return value
    a = to_numpy(value)
    if a.dtype.kind == "f":
        raise ValueError(
            "%s takes booleans (true hides a key); got a float array: send "
            "an additive float mask as attn_bias" % name)
    return a.astype(bool).tolist()


def int_list(value: Any, name: str) -> Any:
    """An integer field as nested lists of ints."""
    if isinstance(value, (list, tuple)) and not _has_arrays(value):
        return value
    a = to_numpy(value)
    if a.dtype.kind == "f":
        if not np.all(np.isfinite(a)) or not np.all(a == np.round(a)):
            raise ValueError("%s takes integers; got %r" % (name, a))
    return a.astype(np.int64).tolist()


def _has_arrays(value: Any) -> bool:
    """True when a list holds arrays or tensors somewhere (they need
    converting before json can write it)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, np.ndarray) or is_torch(v) or isinstance(
                v, np.generic):
            return True
    return False


def plain(value: Any) -> Any:
    """Any other value made writable by json: arrays and tensors become
    nested lists (floats, ints or bools by their dtype), NumPy scalars
    Python numbers; dicts and lists are converted recursively. Used for the
    objects v2 adds (rope, qk_norm, alibi, window) and for fields this
    client does not know."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray) or is_torch(value):
        a = to_numpy(value)
        if a.dtype.kind == "f":
            a = a.astype(np.float32).astype(np.float64)
        return a.tolist()
    return value


def decode_value(value: Any) -> Optional[Any]:
    """A response tensor field as a float32 array, whether it came as a
    tensor object or as nested JSON arrays."""
    if value is None:
        return None
    if is_tensor_object(value):
        return decode_tensor(value)
    if isinstance(value, list):
        return np.asarray(value, dtype=np.float32)
    return value
