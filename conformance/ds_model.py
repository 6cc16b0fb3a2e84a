"""zrepro's toy GPT (trainer/model/gpt.cpp) as a torch.nn.Module, and the Llama family as
Hugging Face's own LlamaForCausalLM.

The same parameters in the same order (DeepSpeed flattens and partitions in
registration order, as zrepro lays out its layers), the same arithmetic: token +
position embedding, pre-LN blocks (causal attention with the softmax in fp32, exact
GELU MLP), final LayerNorm, untied LM head without bias, cross-entropy over the scored
targets (-100, padding, not scored): their mean, or their sum for a token-normalised loss.
Initial values come from zrepro's export (`zrepro run --export-inputs`), or, for the
mixture-of-experts toy that --export-inputs does not take, from zrepro_inputs() below, which
draws them as zrepro does (bit-identical to the export for every network it does take).

MixtralForCausalLM4x: zrepro's tiny-mixtral in transformers 4.x's layout (one nn.Module per
expert), the layout in which DeepSpeed's ZeRO-3 fetches experts one by one (conformance/moe_zero3.py).
"""
import json
import math
import os

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


class RMSNorm(nn.Module):
    """LlamaRMSNorm / zrepro's Gpt::rms_norm: in fp32, back to the input dtype before the gain."""

    def __init__(self, h, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


class MixtralAttention(nn.Module):
    """Llama attention as zrepro's llama_block computes it (and LlamaAttention, eager): rotary on q
    and k with Hugging Face's default tables, grouped-query heads repeated, softmax in fp32."""

    def __init__(self, h, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, h // heads
        self.q_proj = nn.Linear(h, h, bias=False)
        self.k_proj = nn.Linear(h, kv_heads * self.d, bias=False)
        self.v_proj = nn.Linear(h, kv_heads * self.d, bias=False)
        self.o_proj = nn.Linear(h, h, bias=False)

    def forward(self, x, cos, sin, mask):
        B, S, _ = x.shape
        a, kvh, d = self.heads, self.kv_heads, self.d

        def rotate(t):
            rotated = torch.cat([-t[..., d // 2:], t[..., :d // 2]], dim=-1)
            return t * cos[:S].to(t.dtype) + rotated * sin[:S].to(t.dtype)
        q = rotate(self.q_proj(x).view(B, S, a, d).transpose(1, 2))
        k = rotate(self.k_proj(x).view(B, S, kvh, d).transpose(1, 2))
        v = self.v_proj(x).view(B, S, kvh, d).transpose(1, 2)
        if kvh != a:
            k = k.unsqueeze(2).expand(B, kvh, a // kvh, S, d).reshape(B, a, S, d)
            v = v.unsqueeze(2).expand(B, kvh, a // kvh, S, d).reshape(B, a, S, d)
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        att = att.masked_fill(mask[:S, :S], float("-inf"))
        att = torch.softmax(att, dim=-1, dtype=torch.float32).to(q.dtype)
        return self.o_proj(torch.matmul(att, v).transpose(1, 2).reshape(B, S, a * d))


class MixtralBlockSparseTop2MLP(nn.Module):
    """One expert of transformers 4.x's Mixtral: w2(silu(w1 x) * w3 x), no bias. Registered
    w1, w3, w2 (zrepro's order; 4.x registers w1, w2, w3: the order only names ds_ids)."""

    def __init__(self, h, inter):
        super().__init__()
        self.w1 = nn.Linear(h, inter, bias=False)
        self.w3 = nn.Linear(h, inter, bias=False)
        self.w2 = nn.Linear(inter, h, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MixtralSparseMoeBlock(nn.Module):
    """transformers 4.x's MixtralSparseMoeBlock (the class name DeepSpeed's leaf_module.classes
    matches by __class__.__name__): router `gate`, softmax in fp32, top-k renormalised, back to
    the hidden dtype, then the experts in ascending order, each on the tokens that picked it
    (an expert no token picked does not run, so under ZeRO-3 without a leaf it is not fetched).
    Tokens are taken token-major as zrepro's Gpt::moe_mlp takes them (4.x takes them slot-major:
    the same sums per token)."""

    def __init__(self, h, experts, top_k, inter):
        super().__init__()
        self.top_k = top_k
        self.gate = nn.Linear(h, experts, bias=False)
        self.experts = nn.ModuleList(MixtralBlockSparseTop2MLP(h, inter) for _ in range(experts))

    def forward(self, y):
        B, S, h = y.shape
        x = y.reshape(B * S, h)
        self.router_logits = self.gate(x)  # what output_router_logits returns (read by the aux loss)
        probs = torch.softmax(self.router_logits, dim=-1, dtype=torch.float32)
        top_w, top_i = probs.topk(self.top_k, dim=-1)
        top_w = (top_w / top_w.sum(-1, keepdim=True)).to(x.dtype)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            token, slot = torch.where(top_i == e)
            if token.numel() == 0:
                continue
            out = out.index_add(0, token, expert(x.index_select(0, token)) * top_w[token, slot].unsqueeze(-1))
        return out.view(B, S, h)


class MixtralDecoderLayer(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.input_layernorm = RMSNorm(m["hidden"], m["norm_eps"])
        self.self_attn = MixtralAttention(m["hidden"], m["heads"], m["kv_heads"])
        self.post_attention_layernorm = RMSNorm(m["hidden"], m["norm_eps"])
        self.block_sparse_moe = MixtralSparseMoeBlock(m["hidden"], m["experts"], m["experts_per_tok"],
                                                      m["moe_intermediate"])

    def forward(self, x, cos, sin, mask):
        r = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return r + self.block_sparse_moe(self.post_attention_layernorm(r))


class MixtralModel4x(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.embed_tokens = nn.Embedding(m["vocab"], m["hidden"])
        self.layers = nn.ModuleList(MixtralDecoderLayer(m) for _ in range(m["layers"]))
        self.norm = RMSNorm(m["hidden"], m["norm_eps"])


class MixtralForCausalLM4x(nn.Module):
    """zrepro's tiny-mixtral (trainer/model/gpt.cpp llama_block + moe_mlp) in transformers
    4.x's MixtralForCausalLM module tree (model.layers.N.block_sparse_moe.experts.E.w1, ...),
    untied head, on zrepro's pre-shifted inputs and targets."""

    # zrepro's parameter names (layout.json) -> this module tree's.
    NAMES = {"input_norm.weight": "input_layernorm.weight", "post_norm.weight": "post_attention_layernorm.weight",
             "attn.q.": "self_attn.q_proj.", "attn.k.": "self_attn.k_proj.", "attn.v.": "self_attn.v_proj.",
             "attn.o.": "self_attn.o_proj.", "mlp.gate.": "block_sparse_moe.gate.",
             "mlp.experts.": "block_sparse_moe.experts."}

    def __init__(self, m):
        super().__init__()
        self.model = MixtralModel4x(m)
        self.lm_head = nn.Linear(m["hidden"], m["vocab"], bias=False)
        S, d = m["seq"], m["hidden"] // m["heads"]
        # Hugging Face's default rotary tables in fp32, cast to the compute dtype where they are
        # used (DeepSpeed's ZeRO-3 casts parameters, not buffers), as zrepro copies them once into it.
        inv = 1.0 / torch.pow(torch.tensor(float(m["rope_theta"])), torch.arange(0, d, 2, dtype=torch.float32) / d)
        emb = torch.cat([torch.outer(torch.arange(S, dtype=torch.float32), inv)] * 2, dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        self.register_buffer("mask", torch.ones(S, S, dtype=torch.bool).triu(1), persistent=False)

    @property
    def wte(self):  # the embedding (a property: a second attribute would register the module twice)
        return self.model.embed_tokens

    hf_name = HfLlama.hf_name

    # output_router_logits: MixtralForCausalLM adds router_aux_loss_coef x transformers' own
    # load_balancing_loss_func of the layers' router logits (None: off).
    router_aux_loss_coef = None

    def forward(self, inputs, targets, reduction="mean"):
        x = self.model.embed_tokens(inputs)
        for layer in self.model.layers:
            x = layer(x, self.cos, self.sin, self.mask)
        logits = self.lm_head(self.model.norm(x))
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), ignore_index=-100,
                               reduction=reduction)
        if self.router_aux_loss_coef is None:
            return loss
        from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func
        moe = [layer.block_sparse_moe for layer in self.model.layers]
        aux = load_balancing_loss_func(tuple(b.router_logits for b in moe), len(moe[0].experts), moe[0].top_k, None)
        return loss + self.router_aux_loss_coef * aux.to(loss.device)


def moe_layout(m):
    """zrepro's ModelSpec::layer_shapes for a Mixtral-type MoE (no shared expert), experts in
    their block's group (the names are the same either way): layout.json's "layers"."""
    h, V, E, I = m["hidden"], m["vocab"], m["experts"], m["moe_intermediate"]
    kv = m["kv_heads"] * (h // m["heads"])
    layers, offset = [], 0

    def group(name, shapes):
        nonlocal offset
        params = []
        for pname, shape in shapes:
            n = math.prod(shape)
            params.append({"name": pname, "shape": shape, "offset": offset, "numel": n})
            offset += n
        layers.append({"name": name, "params": params})
    group("embed", [("wte", [V, h])])
    for b in range(m["layers"]):
        ps = [("input_norm.weight", [h]), ("attn.q.weight", [h, h]), ("attn.k.weight", [kv, h]),
              ("attn.v.weight", [kv, h]), ("attn.o.weight", [h, h]), ("post_norm.weight", [h]),
              ("mlp.gate.weight", [E, h])]
        for e in range(E):
            ps += [(f"mlp.experts.{e}.w1.weight", [I, h]), (f"mlp.experts.{e}.w3.weight", [I, h]),
                   (f"mlp.experts.{e}.w2.weight", [h, I])]
        group(f"block.{b}", ps)
    group("head", [("norm.weight", [h]), ("lm_head.weight", [V, h])])
    return layers, offset


_MASK64 = (1 << 64) - 1


def _splitmix64(state):
    state[0] = (state[0] + 0x9E3779B97F4A7C15) & _MASK64
    z = state[0]
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def zrepro_tokens(vocab, seq, seed, first, n):
    """zrepro's MarkovData(vocab, seq, seed).samples(first, n) (trainer/model/data.cpp),
    fixed lengths: [n, seq + 1] int64."""
    s = [(seed ^ 0x5EEDDA7A) & _MASK64]
    succ = [_splitmix64(s) % vocab for _ in range(vocab * 4)]
    cumulative = (0.5, 0.75, 0.9, 1.0)
    out = np.empty((n, seq + 1), dtype=np.int64)
    for i in range(n):
        st = [(seed * 0x100000001B3 + (first + i) * 0x9E3779B97F4A7C15) & _MASK64]
        tok = _splitmix64(st) % vocab
        out[i, 0] = tok
        for j in range(1, seq + 1):
            u = (_splitmix64(st) >> 11) * (1.0 / 9007199254740992.0)
            k = 0
            while k + 1 < 4 and u >= cumulative[k]:
                k += 1
            tok = succ[tok * 4 + k]
            out[i, j] = tok
    return out


def zrepro_init(layers, seed):
    """zrepro's gpt_init for the Llama family (trainer/model/gpt.cpp): one CPU generator seeded
    with `seed`, in layout order: norm gains 1, biases 0, every other tensor N(0, 0.02)."""
    g = torch.Generator().manual_seed(seed)
    parts = []
    for layer in layers:
        for p in layer["params"]:
            n = p["name"]
            if "norm" in n:
                v = torch.ones(p["shape"]) if "weight" in n else torch.zeros(p["shape"])
            elif "bias" in n:
                v = torch.zeros(p["shape"])
            else:
                v = torch.empty(p["shape"]).normal_(0.0, 0.02, generator=g)
            parts.append(v.reshape(-1))
    return torch.cat(parts)


def zrepro_inputs(out_dir, model, seed, steps, micro, grad_accum, world):
    """What `zrepro run --export-inputs` writes (layout.json, init.npy, tokens.npy), drawn here
    for a Mixtral-type MoE, which zrepro's export refuses."""
    layers, total = moe_layout(model)
    glob = micro * grad_accum * world
    layout = {"model": model, "layers": layers, "params": total, "seed": seed,
              "batch": {"steps": steps, "micro": micro, "grad_accum": grad_accum, "world": world, "global": glob},
              "seq_len_dist": "fixed", "loss_normalization": "mean",
              "drawn_by": "conformance/ds_model.py zrepro_inputs (zrepro's gpt_init and MarkovData)"}
    os.makedirs(out_dir, exist_ok=True)
    np.save(f"{out_dir}/init.npy", zrepro_init(layers, seed).numpy())
    np.save(f"{out_dir}/tokens.npy", zrepro_tokens(model["vocab"], model["seq"], seed, 0, steps * glob))
    with open(f"{out_dir}/layout.json", "w") as f:
        json.dump(layout, f, indent=2)
    return layout


def load(inputs_dir):
    """The model with zrepro's initial weights, the layout and the token array; the model's
    parameters in zrepro's layout order are model.ordered."""
    layout = json.load(open(f"{inputs_dir}/layout.json"))
    # The toy computes the exact GELU and an fp32 eager softmax; an export names other ops
    # (trainer/report/inputs_export.cpp), which this module does not compute.
    for key, ours in (("activation", "gelu"), ("softmax", "fp32")):
        if layout["model"].get(key, ours) != ours:
            raise SystemExit(f"{inputs_dir}/layout.json: model {key} {layout['model'][key]!r}; conformance/ds_model.py "
                             f"computes {ours!r} only (zrepro's toy presets)")
    init = torch.from_numpy(np.load(f"{inputs_dir}/init.npy"))
    tokens = torch.from_numpy(np.load(f"{inputs_dir}/tokens.npy"))
    if layout["model"]["family"] == "llama":
        moe = layout["model"].get("model_type") == "mixtral"
        model = MixtralForCausalLM4x(layout["model"]) if moe else HfLlama(layout["model"])
        by_name = dict((model if moe else model.hf).named_parameters())
        flat = [(layer["name"], p) for layer in layout["layers"] for p in layer["params"]]
        model.ordered = [by_name[model.hf_name(layer, p["name"])] for layer, p in flat]
        if len(model.ordered) != len(by_name):
            raise SystemExit(f"layout has {len(model.ordered)} parameters, {type(model).__name__} {len(by_name)}")
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
