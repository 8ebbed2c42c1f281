#!/usr/bin/env python3
"""hf_model.py: every attention layer of a Hugging Face model, computed by
attnd in one request.

    pip install ./clients/python transformers
    python3 clients/python/examples/hf_model.py --model gpt2 \\
        --text "The animal didn't cross the street because it was tired" \\
        --rollout --check --save-request gpt2.json

The model runs once on the text; attnd.hf.capture records the hidden states
entering each attention module and reads its weights (q/k/v/o in their
stored out_in layout, GPT-2's c_attn as w_qkv, RoPE's inv_freq, grouped-
query heads). Client.layers sends them all (weights by ref from the second
run on) and prints, for each layer and head, the token the last token
attends to most. --check compares each layer's output with the module's
own; --save-request writes the request, every tensor inline, for the
dashboard's "paste / upload a request" box.
"""
import argparse
import json
import sys

import numpy as np
import torch

import attnd
import attnd.hf


def module_outputs(model):
    """Forward hooks that record what each attention module computes (for
    BERT, its output.dense: attnd's output stops before the residual and
    LayerNorm). Returns (outputs list, hook handles)."""
    outputs, handles = [], []
    for _, mod in attnd.hf.attention_modules(model):
        target = mod.output.dense if attnd.hf.attention_kind(mod) == "bert" \
            else mod

        def hook(_m, _inp, out):
            outputs.append(out[0] if isinstance(out, tuple) else out)
        handles.append(target.register_forward_hook(hook))
    return outputs, handles


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="gpt2",
                    help="a Hugging Face model id or folder (default gpt2)")
    ap.add_argument("--text", default="The animal didn't cross the street "
                    "because it was tired")
    ap.add_argument("--url", default="http://localhost:8080")
    ap.add_argument("--rollout", action="store_true",
                    help="also ask for the attention rollout over layers")
    ap.add_argument("--check", action="store_true",
                    help="compare each layer's output with the module's")
    ap.add_argument("--save-request", metavar="FILE",
                    help="write the request JSON (tensors inline) to FILE")
    args = ap.parse_args(argv)

    try:
        from transformers import AutoModel, AutoTokenizer
    except ImportError:
        sys.exit("this example needs transformers: pip install transformers")
    tok = AutoTokenizer.from_pretrained(args.model)
    try:  # the eager path: the attention the way the modules write it
        model = AutoModel.from_pretrained(args.model,
                                          torch_dtype=torch.float32,
                                          attn_implementation="eager")
    except (TypeError, ValueError):
        model = AutoModel.from_pretrained(args.model,
                                          torch_dtype=torch.float32)
    model.eval()

    inputs = tok(args.text, return_tensors="pt")
    tokens = tok.convert_ids_to_tokens(inputs["input_ids"][0])
    outputs, handles = module_outputs(model) if args.check else ([], [])
    try:
        layers = attnd.hf.capture(model, **inputs)
    finally:
        for h in handles:
            h.remove()
    print("%s: %d attention layers, %d tokens" % (args.model, len(layers),
                                                 len(tokens)))

    if args.save_request:
        client = attnd.Client(args.url)
        with open(args.save_request, "w") as f:
            json.dump(client.request_json(layers=layers, tokens=[tokens],
                                          rollout=args.rollout or None), f)
        print("request written to", args.save_request)

    client = attnd.Client(args.url)
    r = client.layers(layers, rollout=args.rollout, tokens=[tokens])
    print("attnd: %.1f ms, %d params, %.3g flops" % (
        r.meta.get("elapsed_ms", 0), r.meta.get("params", 0),
        r.meta.get("flops", 0)))
    for i, lay in enumerate(r.layers):
        a = lay.attention[0]  # [h][n][m] of the only batch element
        top = [tokens[int(j)] for j in a[:, -1].argmax(-1)]
        print("layer %2d: %r attends most to %s" % (i, tokens[-1], top))
    if args.rollout and r.rollout is not None:
        roll = r.rollout[0, -1]
        print("rollout of %r: %s" % (tokens[-1], ", ".join(
            "%s %.2f" % (tokens[j], roll[j]) for j in np.argsort(-roll)[:5])))
    if args.check:
        worst = max(float(np.max(np.abs(lay.output - o.detach().numpy())))
                    for lay, o in zip(r.layers, outputs))
        print("largest difference from the model's own outputs: %.3g" % worst)


if __name__ == "__main__":
    main()
