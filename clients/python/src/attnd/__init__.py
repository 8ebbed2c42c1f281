"""attnd: the Python client of the attnd attention service.

    import attnd
    c = attnd.Client("http://localhost:8080")
    r = c.attend(x=x, w_q=wq, w_k=wk, w_v=wv, num_heads=4, mask="causal")
    r.output, r.attention          # float32 NumPy arrays

- Client.attend(**fields): POST /attend with the contract's fields; NumPy
  arrays, torch tensors or lists for tensors.
- Client.layers(layers, rollout=False, **defaults): a whole model's layers
  in one request.
- Client.mha(module, query, key, value, ...): torch.nn.MultiheadAttention's
  forward, computed by the service.
- attnd.hf: layer requests from Hugging Face attention modules.
"""
from typing import Any

from ._client import Client, Error, Result
from ._mha import mha_request
from . import _wire


def sha256_ref(tensor: Any) -> str:
    """The tensor store's name of a tensor (NumPy array, torch tensor or
    list): "sha256:" and the hex SHA-256 of its values as little-endian
    float32 in row-major order."""
    return _wire.sha256_ref(_wire.as_float32(tensor))


__all__ = ["Client", "Error", "Result", "mha_request", "sha256_ref"]
__version__ = "0.1.0"
