"""zrepro's toy GPT (trainer/model/gpt.cpp) as a torch.nn.Module, and the Llama family as
Hugging Face's own LlamaForCausalLM.

The same parameters in the same order (DeepSpeed flattens and partitions in
registration order, as zrepro lays out its layers), the same arithmetic: token +
position embedding, pre-LN blocks (causal attention with the softmax in fp32, exact
GELU MLP), final LayerNorm, untied LM head without bias, cross-entropy over the scored
targets (-100, padding, not scored): their mean, or their sum for a token-normalised loss.
Initial values come from zrepro's export (`zrepro run --export-inputs`).
"""
import json
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, h, heads, inter):
        super().__init__()
        self.heads = heads
        # Registration order = zrepro's BlockParam order.
        self.ln1 = nn.LayerNorm(h, eps=1e-5)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h, eps=1e-5)
        self.fc = nn.Linear(h, inter)
        self.fc2 = nn.Linear(inter, h)

    def forward(self, x, mask):
        B, S, h = x.shape
        a = self.heads
        hd = h // a
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q, k, v = (t.view(B, S, a, hd).transpose(1, 2) for t in (q, k, v))
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(mask[:S, :S], float("-inf"))
        att = torch.softmax(att, dim=-1, dtype=torch.float32).to(x.dtype)
        y = torch.matmul(att, v).transpose(1, 2).reshape(B, S, h)
        r = x + self.proj(y)
        return r + self.fc2(F.gelu(self.fc(self.ln2(r))))


class ToyGpt(nn.Module):
    def __init__(self, model):
        super().__init__()
        V, S, h = model["vocab"], model["seq"], model["hidden"]
        # Embedding modules, as in Hugging Face's GPT-2 (DeepSpeed's model_to_params
        # takes the largest module's own parameters: here the word embedding).
        self.wte = nn.Embedding(V, h)
        self.wpe = nn.Embedding(S, h)
        self.blocks = nn.ModuleList(
            Block(h, model["heads"], model["intermediate"]) for _ in range(model["layers"]))
        self.ln_f = nn.LayerNorm(h, eps=1e-5)
        self.lm_head = nn.Linear(h, V, bias=False)
        self.register_buffer("mask", torch.ones(S, S, dtype=torch.bool).triu(1), persistent=False)

    def forward(self, inputs, targets, reduction="mean"):
        S = inputs.shape[1]
        x = F.embedding(inputs, self.wte.weight) + self.wpe.weight[:S].unsqueeze(0)
        for b in self.blocks:
            x = b(x, self.mask)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), ignore_index=-100,
                               reduction=reduction)


class HfLlama(nn.Module):
    """transformers' LlamaForCausalLM (eager attention) on zrepro's pre-shifted inputs and
    targets: the logits of input_ids, cross-entropy against the targets as ToyGpt's. Its
    parameters are Hugging Face's modules; `ordered` lists them in zrepro's layout order
    (DeepSpeed flattens the optimizer's parameter list in the order it is given)."""

    # zrepro's parameter names (layout.json) -> Hugging Face's.
    NAMES = {"input_norm.weight": "input_layernorm.weight", "post_norm.weight": "post_attention_layernorm.weight",
             "attn.q.": "self_attn.q_proj.", "attn.k.": "self_attn.k_proj.", "attn.v.": "self_attn.v_proj.",
             "attn.o.": "self_attn.o_proj.", "mlp.gate.": "mlp.gate_proj.", "mlp.up.": "mlp.up_proj.",
             "mlp.down.": "mlp.down_proj."}

    def __init__(self, model):
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(vocab_size=model["vocab"], hidden_size=model["hidden"], intermediate_size=model["intermediate"],
                          num_hidden_layers=model["layers"], num_attention_heads=model["heads"],
                          num_key_value_heads=model["kv_heads"], max_position_embeddings=model["seq"],
                          rms_norm_eps=model["norm_eps"], rope_theta=model["rope_theta"],
                          attention_bias=model["qkv_bias"], mlp_bias=model["mlp_bias"],
                          tie_word_embeddings=model["tied"], attn_implementation="eager")
        self.hf = LlamaForCausalLM(cfg)
        self.wte = self.hf.model.embed_tokens  # the embedding ds_run.py hooks

    def hf_name(self, layer, param):
        if layer == "embed":
            return "model.embed_tokens.weight"
        if layer == "head":
            return "model.norm.weight" if param == "norm.weight" else "lm_head.weight"
        for z, h in self.NAMES.items():
            if param.startswith(z):
                param = h + param[len(z):]
                break
        return f"model.layers.{layer.split('.')[1]}.{param}"

    def forward(self, inputs, targets, reduction="mean"):
        logits = self.hf(input_ids=inputs).logits
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), ignore_index=-100,
                               reduction=reduction)


def load(inputs_dir):
    """The model with zrepro's initial weights, the layout and the token array; the model's
    parameters in zrepro's layout order are model.ordered."""
    layout = json.load(open(f"{inputs_dir}/layout.json"))
    init = torch.from_numpy(np.load(f"{inputs_dir}/init.npy"))
    tokens = torch.from_numpy(np.load(f"{inputs_dir}/tokens.npy"))
    if layout["model"]["family"] == "llama":
        model = HfLlama(layout["model"])
        by_name = dict(model.hf.named_parameters())
        flat = [(layer["name"], p) for layer in layout["layers"] for p in layer["params"]]
        model.ordered = [by_name[model.hf_name(layer, p["name"])] for layer, p in flat]
        if len(model.ordered) != len(by_name):
            raise SystemExit(f"layout has {len(model.ordered)} parameters, LlamaForCausalLM {len(by_name)}")
        with torch.no_grad():
            for p, (_, spec) in zip(model.ordered, flat):
                if list(p.shape) != spec["shape"]:
                    raise SystemExit(f"{spec['name']}: module shape {list(p.shape)}, layout {spec['shape']}")
                p.copy_(init[spec["offset"]:spec["offset"] + spec["numel"]].view(p.shape))
        return model, layout, tokens
    model = ToyGpt(layout["model"])
    names = [p["name"] for layer in layout["layers"] for p in layer["params"]]
    params = list(model.parameters())
    if len(params) != len(names):
        raise SystemExit(f"layout has {len(names)} parameters, the module {len(params)}")
    # zrepro's layer params map onto the module's parameters in order.
    flat = [p for layer in layout["layers"] for p in layer["params"]]
    with torch.no_grad():
        for p, spec in zip(params, flat):
            if list(p.shape) != spec["shape"]:
                raise SystemExit(f"{spec['name']}: module shape {list(p.shape)}, layout {spec['shape']}")
            p.copy_(init[spec["offset"]:spec["offset"] + spec["numel"]].view(p.shape))
    model.ordered = params
    return model, layout, tokens


def micro_batch(tokens, layout, step, micro_step, rank):
    """The samples zrepro's rank `rank` trains on at (step, micro_step)."""
    b = layout["batch"]
    first = step * b["global"] + (micro_step * b["world"] + rank) * b["micro"]
    first %= tokens.shape[0] - b["micro"] + 1  # extra micro-steps (a mismatch case) reuse samples
    t = tokens[first:first + b["micro"]]
    # Padding (-100 after a sample's length, --seq-len-dist) goes in as token 0, unscored.
    return t[:, :-1].clamp(min=0).contiguous(), t[:, 1:].contiguous()
