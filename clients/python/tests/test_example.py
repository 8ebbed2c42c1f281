"""test_example.py: examples/hf_model.py runs end to end, with a stand-in
`transformers` module (AutoTokenizer, AutoModel) that serves hf_standins'
TinyGPT2 and TinyLlama, since transformers itself is not installed here."""
import importlib.util
import json
import os
import sys
import types

import pytest
import torch

from hf_standins import TinyGPT2, TinyLlama

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples",
                       "hf_model.py")


class _Tokenizer:
    def __call__(self, text, return_tensors="pt"):
        ids = [hash(w) % 50 for w in text.split()]
        return {"input_ids": torch.tensor([ids])}

    def convert_ids_to_tokens(self, ids):
        return ["t%d" % int(i) for i in ids]


@pytest.fixture
def fake_transformers(monkeypatch):
    mod = types.ModuleType("transformers")
    models = {"tiny-gpt2": TinyGPT2, "tiny-llama": TinyLlama}

    class AutoModel:
        @staticmethod
        def from_pretrained(name, **kw):
            torch.manual_seed(0)
            return models[name]()

    class AutoTokenizer:
        @staticmethod
        def from_pretrained(name):
            return _Tokenizer()

    mod.AutoModel, mod.AutoTokenizer = AutoModel, AutoTokenizer
    monkeypatch.setitem(sys.modules, "transformers", mod)


def _example():
    spec = importlib.util.spec_from_file_location("hf_model", EXAMPLE)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


@pytest.mark.parametrize("model", ["tiny-gpt2", "tiny-llama"])
def test_example_runs(server, fake_transformers, tmp_path, capsys, model):
    out = tmp_path / "req.json"
    _example().main(["--model", model, "--url", server.url, "--rollout",
                     "--check", "--save-request", str(out)])
    body = json.loads(out.read_text())
    assert body["rollout"] is True and len(body["layers"]) >= 2
    text = capsys.readouterr().out
    worst = float(text.rsplit(":", 1)[1])
    assert worst < 1e-3, text
