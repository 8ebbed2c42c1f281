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
from ._client import Client, Error, Result
from ._mha import mha_request
from ._wire import sha256_ref

__all__ = ["Client", "Error", "Result", "mha_request", "sha256_ref"]
__version__ = "0.1.0"
