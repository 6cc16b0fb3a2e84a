"""Record a Hugging Face causal LM's activation tape for `zrepro plan`, under FakeTensorMode.

For an architecture zrepro has no model of (Qwen3, Phi-3, Gemma-2, ...), the planner replays
the allocations and frees Hugging Face's own modules make in one micro-step, recorded here from
transformers' code in the user's Python: every tensor is a FakeTensor (shapes and dtypes, no
memory, no arithmetic), so a 4096-token micro-step of a 7B model takes seconds and no memory.
`zrepro record-model` runs this script; `zrepro plan --model THE_OUTPUT` reads it.

What is recorded ([Note: a recorded architecture], trainer/config/recorded_model.h):
- each ZeRO parameter group's parameter sizes: the embedding (with anything outside the decoder
  layers but the final norm and the LM head), one decoder layer (they are alike), the head;
- the tape of every part of a micro-step the planner replays (embed_forward, block_forward,
  between_blocks, head_forward, head_backward, block_backward, embed_backward, backward_tail;
  with gradient checkpointing block_forward_no_grad, between_checkpointed_blocks and the
  recomputed backward, the recomputation in it), cut at the decoder layers' module hooks and
  their own forward's start and end (marked inside transformers' checkpoint wrapper), taken from the middle layer of a
  three-layer copy of the model; the parameter gradients marked (post-accumulate-grad hooks);
- each size as a + c x micro_batch bytes: the step is recorded at micro-batch 2 and 3 (BATCHES)
  and every event must agree in kind and order (else the recording says so in "problems").
The sequence length, the dtype and the attention implementation are the recording's: a plan
with others asks for another recording. Mixtures of experts are refused: which experts run
depends on the router's values, which a FakeTensor does not have.

[Note: FakeTensorMode is not eager to transformers] applies (conformance/hf_fake_activations.py
measured it): transformers is told it is not tracing and the batch is not packed, as an eager
run finds. Measured exact against real CPU forwards there.

    python3 trainer/planner/hf_record.py --config config.json --seq 4096 --dtype bf16 --attn sdpa --out m.tape.json
"""
import argparse
import json
import os
import sys
import time
import weakref

EXIT_BAD_INPUT = 2
EXIT_MISSING = 5  # torch or transformers missing
EXIT_UNUSABLE = 6  # this model's step could not be cut into the planner's parts


def refuse(msg, code=EXIT_BAD_INPUT):
    print("hf_record.py: " + msg, file=sys.stderr)
    sys.exit(code)


MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")


def load_config(transformers, path, layers):
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        refuse(f"--config {path}: cannot read it as JSON ({e}); expected a Hugging Face config.json")
    if not isinstance(d, dict) or "model_type" not in d:
        refuse(f"--config {path}: no \"model_type\" key; expected a Hugging Face config.json")
    for k in MOE_KEYS:
        if isinstance(d.get(k), int) and d[k] > 0:
            refuse(f"--config {path}: \"{k}\": {d[k]}: a mixture of experts; which experts run depends on the "
                   "router's values, which a FakeTensor does not have, so its tape cannot be recorded this way "
                   "(zrepro plans mixtral and qwen2_moe itself)")
    try:
        cfg = transformers.AutoConfig.for_model(d["model_type"], **{k: v for k, v in d.items() if k != "model_type"})
    except (ValueError, KeyError) as e:
        refuse(f"--config {path}: model_type \"{d['model_type']}\": transformers {transformers.__version__} does not "
               f"know it ({e}); upgrade transformers or check the key")
    for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop", "attention_dropout", "hidden_dropout"):
        if hasattr(cfg, k):
            setattr(cfg, k, 0.0)
    full = getattr(cfg, "num_hidden_layers", None)
    if not isinstance(full, int) or full < 1:
        refuse(f"--config {path}: no num_hidden_layers; expected a decoder-only causal LM's config.json")
    cfg.num_hidden_layers = layers
    if hasattr(cfg, "layer_types") and isinstance(cfg.layer_types, list):
        cfg.layer_types = cfg.layer_types[:layers]
    return d, cfg, full


def decoder_layers(torch, model, n):
    """The ModuleList of the decoder layers: the one with n entries, the largest such."""
    best = None
    for _, mod in model.named_modules():
        if isinstance(mod, torch.nn.ModuleList) and len(mod) == n:
            size = sum(1 for _ in mod.parameters())
            if best is None or size > best[0]:
                best = (size, mod)
    if best is None:
        refuse("no list of decoder layers found in the model (a ModuleList of num_hidden_layers modules)")
    return list(best[1])


def eager_answers(transformers):
    """[Note: FakeTensorMode is not eager to transformers]: the answers an eager run finds."""
    import transformers.masking_utils as masking
    import transformers.utils.import_utils as iu
    iu.is_fake_tensor = lambda x: False
    if hasattr(masking, "find_packed_sequence_indices"):
        masking.find_packed_sequence_indices = lambda position_ids: None


class Recorder:
    """Every storage an op creates (+bytes) and its death (-bytes), and marks between them."""

    def __init__(self, torch):
        from torch.utils._python_dispatch import TorchDispatchMode
        self.events = []  # ("mark", name) | ("+"/"-", key, nbytes)
        self.live = {}
        self.param_grads = {}  # allocation serial -> parameter name
        self.before = set()  # storages that existed before the recording (parameters, buffers, the batch)
        rec = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for t in torch.utils._pytree.tree_leaves(out):
                    if isinstance(t, torch.Tensor):
                        rec.note(t, func)
                return out

        self.mode = Mode()

    def note(self, t, func=None):
        st = t.untyped_storage()
        key = st._cdata
        if key in self.live or key in self.before:  # a view of a live tensor, a parameter or the batch
            return
        n = st.nbytes()
        serial = len(self.events)  # this allocation's own name: a storage's address is reused after it dies
        self.live[key] = serial
        self.events.append(("+", serial, n, str(func)))
        weakref.finalize(st, self.freed, key, serial, n)

    def freed(self, key, serial, n):
        if self.live.get(key) == serial:
            del self.live[key]
            self.events.append(("-", serial, n, ""))

    def mark(self, name):
        self.events.append(("mark", name))


def record(torch, transformers, cfg, attn, dtype, B, S, ckpt):
    """One micro-step at micro-batch B: the events, the marks, the parameter groups."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode(allow_non_fake_inputs=True):
        try:
            model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn, dtype=dtype)
        except ValueError as e:  # transformers' own refusal (an attention the class does not support, ...)
            refuse(f"transformers {transformers.__version__} refuses this model with --attn {attn}: {e}")
        model.config.use_cache = False
        model.train()
        if ckpt:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        layers = decoder_layers(torch, model, cfg.num_hidden_layers)
        r = Recorder(torch)
        mark_inner_forward(layers, r)
        for i, layer in enumerate(layers):
            layer.register_forward_pre_hook(lambda m, a, i=i: r.mark(f"F_pre{i}"))
            layer.register_forward_hook(lambda m, a, o, i=i: r.mark(f"F_post{i}"))
            if not ckpt:
                layer.register_full_backward_pre_hook(lambda m, g, i=i: r.mark(f"B_pre{i}"))
        emb = model.get_input_embeddings()
        emb.register_full_backward_pre_hook(lambda m, g: r.mark("E_pre"))
        names = {id(p): n for n, p in model.named_parameters()}
        def grad_done(p):  # the gradient's allocation: the live one of its storage
            serial = r.live.get(p.grad.untyped_storage()._cdata)
            if serial is not None:
                r.param_grads.setdefault(serial, names[id(p)])

        for p in model.parameters():
            p.register_post_accumulate_grad_hook(grad_done)
        ids = torch.randint(0, cfg.vocab_size, (B, S))
        for t in list(model.parameters()) + list(model.buffers()) + [ids]:
            r.before.add(t.untyped_storage()._cdata)
        with r.mode:
            r.mark("start")
            out = model(input_ids=ids, labels=ids)
            r.mark("forward_end")
            out.loss.backward()
            r.mark("backward_end")
            del out
            r.mark("end")
        groups = param_groups(model, layers, emb)
        tied = any(p is emb.weight for p in model.get_output_embeddings().parameters())
        return r, groups, tied


def mark_inner_forward(layers, r):
    """Marks I_preN / I_postN around each decoder layer's own forward, also when a checkpoint
    recomputes it in backward (transformers checkpoints `forward` inside the module hooks, so
    the hooks do not fire again): the wrapped forward's closure is given a marking one."""
    index = {id(layer): i for i, layer in enumerate(layers)}
    MARK["recorder"], MARK["index"] = r, index
    cls = type(layers[0])
    f = cls.forward
    orig = getattr(f, "__wrapped__", None)
    cells = [c for c in (f.__closure__ or ()) if orig is not None and c.cell_contents is orig]
    if getattr(cls, "_zrepro_marked", False):
        return
    if not cells:  # not wrapped for checkpointing: mark the class's forward itself
        def marked(self, *a, __f=f, **k):
            return marked_call(__f, self, a, k)
        cls.forward = marked
    else:
        def marked(self, *a, __f=orig, **k):
            return marked_call(__f, self, a, k)
        cells[0].cell_contents = marked
    cls._zrepro_marked = True


MARK = {}


def marked_call(f, self, a, k):
    r, i = MARK["recorder"], MARK["index"].get(id(self))
    if i is not None:
        r.mark(f"I_pre{i}")
    out = f(self, *a, **k)
    if i is not None:
        r.mark(f"I_post{i}")
    return out


def param_groups(model, layers, emb):
    """ZeRO's groups as zrepro plans them: embed, one decoder layer, head."""
    in_layer = {}
    for i, layer in enumerate(layers):
        for n, p in layer.named_parameters():
            in_layer[id(p)] = (i, n)
    head_ids = {id(p) for p in model.get_output_embeddings().parameters()}
    emb_ids = {id(p) for p in emb.parameters()}
    embed, block, head = [], [], []
    for n, p in model.named_parameters():
        if id(p) in in_layer:
            if in_layer[id(p)][0] == 1:
                block.append({"name": in_layer[id(p)][1], "shape": list(p.shape)})
        elif id(p) in emb_ids or ("norm" not in n and id(p) not in head_ids):
            embed.append({"name": n, "shape": list(p.shape)})
        else:
            head.append({"name": n, "shape": list(p.shape)})
    return {"embed": embed, "block": block, "head": head}


# The micro-batches recorded: every size is a + c x B between them. Micro-batch 1 takes a path
# of its own in places (transformers flattens one sequence's labels without a copy), a few
# kilobytes it does not matter to a plan, so two larger ones are recorded.
BATCHES = (2, 3)


# The spans of a micro-step between the marks: the embedding's forward (E), each decoder layer's
# own forward (L0f, L1f, L2f: inside transformers' checkpoint wrapper) and what lies between two
# of them (b01, b12), the head's forward (H); in backward the head's (HB), each layer's (L2b,
# L1b, L0b: from its backward pre-hook to the next one's, the first layer's to the embedding's),
# the embedding's (EB) and what follows (T). With checkpointing the same forward spans, and in
# backward each layer's recomputation with its backward (R2, R1, R0: from the start of its
# recomputed forward to the next one's; torch stops a recomputation early, once it has every
# saved tensor, so its end is not marked).
SPANS = {
    "E": ("start", "I_pre0"), "L0f": ("I_pre0", "I_post0"), "b01": ("I_post0", "I_pre1"),
    "L1f": ("I_pre1", "I_post1"), "b12": ("I_post1", "I_pre2"), "L2f": ("I_pre2", "I_post2"),
    "H": ("I_post2", "forward_end"), "HB": ("forward_end", "B_pre2"), "L2b": ("B_pre2", "B_pre1"),
    "L1b": ("B_pre1", "B_pre0"), "L0b": ("B_pre0", "E_pre"), "EB": ("E_pre", "backward_end"),
    "T": ("backward_end", "end"),
}
SPANS_CHECKPOINTED = dict(
    {k: v for k, v in SPANS.items() if k not in ("HB", "L2b", "L1b", "L0b")},
    HB=("forward_end", "I_pre2#2"), R2=("I_pre2#2", "I_pre1#2"), R1=("I_pre1#2", "I_pre0#2"), R0=("I_pre0#2", "E_pre"))


def minus(a, b):
    """a's tokens that b does not have, then the inverse of b's that a does not have."""
    rest = list(b)
    out = []
    for t in a:
        if t in rest:
            rest.remove(t)
        else:
            out.append(t)
    return out + [("-" if t[0] == "+" else "+") + t[1:] for t in rest]


# [Note: a recorded tape replays as the planner's] The planner replays the middle layer's tapes
# for every layer, and between_blocks after every block, the last too (zrepro's own model frees
# the previous block's output there). Where transformers' first or last layer differs (the
# rotary tables the first layer's backward frees last, the hidden state the head frees), the
# difference goes to the part beside it that the planner replays once, and what the step leaves
# alive but its gradients (the loss) is freed at its end: a micro-step's allocations and frees
# are then the recorded ones, each in its part, with and without checkpointing.
def step_tapes(s, checkpointed):
    """The planner's parts from the spans; with checkpointing the parts it replays once carry the
    checkpointed step's own tokens (PART@checkpointed)."""
    b2, b1, b0 = ("R2", "R1", "R0") if checkpointed else ("L2b", "L1b", "L0b")
    mid_f, mid_b, btw = s["L1f"], s[b1], s["b12"]
    once = {
        "embed_forward": s["E"] + minus(s["L0f"], mid_f) + minus(s["b01"], btw),
        "head_forward": minus(s["L2f"], mid_f) + minus(s["H"], btw),
        "head_backward": s["HB"] + minus(s[b2], mid_b),
        "embed_backward": minus(s[b0], mid_b) + s["EB"],
        "backward_tail": s["T"],
    }
    if checkpointed:
        out = {k + "@checkpointed": v for k, v in once.items()}
        out.update({"block_forward_no_grad": mid_f, "between_checkpointed_blocks": btw,
                    "block_backward_recomputed_mlp": mid_b})
        return out
    return dict(once, block_forward=mid_f, between_blocks=btw, block_backward_mlp=mid_b)


def replay_net(tapes, symbols, ckpt):
    """What the planner's replay of one micro-step (four layers) leaves allocated, parameter
    gradients apart, at micro-batch 1 and 2 (both 0 when the parts balance)."""
    c = "@checkpointed" if ckpt else ""
    blocks = (["block_forward_no_grad", "between_checkpointed_blocks"] if ckpt else ["block_forward", "between_blocks"])
    back = ["block_backward_recomputed_mlp"] if ckpt else ["block_backward_mlp"]
    seq = (["embed_forward" + c] + blocks * 4 + ["head_forward" + c, "head_backward" + c] + back * 4 +
           ["embed_backward" + c, "backward_tail" + c])
    nets = []
    for B in (1, 2):
        n = 0
        for part in seq:
            for t in tapes.get(part, "").split():
                if not t[1:].startswith("W"):
                    a, k = symbols[t[1:]]
                    n += (a + k * B) * (1 if t[0] == "+" else -1)
        nets.append(n)
    return 0 if nets == [0, 0] else nets


def second_marks(r):
    """In a checkpointed step each layer's forward hooks fire twice: name the second F_preN#2."""
    seen = set()
    for i, e in enumerate(r.events):
        if e[0] == "mark":
            if e[1] in seen:
                r.events[i] = ("mark", e[1] + "#2")
            seen.add(e[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True, help="the model's Hugging Face config.json")
    ap.add_argument("--seq", type=int, required=True, help="tokens per sequence, as the job trains")
    ap.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16")
    ap.add_argument("--attn", choices=("eager", "sdpa"), default="sdpa")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.seq < 1:
        refuse(f"--seq: got {a.seq}, expected a positive number of tokens")
    try:
        import torch
        import transformers
    except ImportError as e:
        refuse(f"this Python ({sys.executable}) cannot import {e.name}: the recording runs Hugging Face's own "
               "modules (pip install torch transformers, or --python another interpreter)", EXIT_MISSING)
    torch.set_num_threads(1)
    eager_answers(transformers)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.dtype]
    raw, cfg, full_layers = load_config(transformers, a.config, 3)
    t0 = time.time()
    runs = {}
    for ckpt in (False, True):
        for B in BATCHES:
            r, groups, tied = record(torch, transformers, cfg, a.attn, dtype, B, a.seq, ckpt)
            if ckpt:
                second_marks(r)
            runs[(ckpt, B)] = (r, groups, tied)
    symbols, problems, spans = {}, [], {}
    for ckpt in (False, True):
        ra = runs[(ckpt, BATCHES[0])][0]
        rb = runs[(ckpt, BATCHES[1])][0]
        events = named_events(ra, rb, BATCHES[0], BATCHES[1], symbols, problems,
                              "checkpointed" if ckpt else "plain")
        if events is None:
            refuse("the recording is not usable: " + "; ".join(problems), EXIT_UNUSABLE)
        spans[ckpt] = cut_spans(events, SPANS_CHECKPOINTED if ckpt else SPANS, problems)
        spans[ckpt]["T"] += still_live(events)
    tapes = dict(step_tapes(spans[False], False), **step_tapes(spans[True], True))
    tapes = {k: " ".join(v) for k, v in tapes.items()}
    kinds = sorted(set(getattr(cfg, "layer_types", None) or []))
    if len(kinds) > 1:
        problems.append(f"the decoder layers are not alike (layer_types {kinds}): the plan replays the middle "
                        "recorded layer's tape for every layer")
    for ckpt in (False, True):
        net = replay_net(tapes, symbols, ckpt)
        if net != 0:
            problems.append(f"{'with' if ckpt else 'without'} checkpointing a replayed micro-step leaves {net} bytes "
                            "allocated (micro-batch 1 and 2, gradients apart): the parts do not balance")
    tapes["block_recompute"] = ""
    tapes["block_backward_attn"] = ""
    tapes["block_backward_recomputed_attn"] = ""
    tapes["block_recompute_release"] = ""
    _, groups, tied = runs[(False, BATCHES[0])]
    doc = {"generated_by": "trainer/planner/hf_record.py", "kind": "zrepro activation tape",
           "recorded": time.strftime("%Y-%m-%d"), "versions": {"torch": torch.__version__,
                                                               "transformers": transformers.__version__},
           "config_file": os.path.abspath(a.config), "hf_config": raw, "model_type": raw["model_type"],
           "layers": full_layers, "seq": a.seq, "dtype": a.dtype, "attention": a.attn, "tied": tied,
           "groups": groups, "symbols": symbols, "tapes": tapes, "problems": problems,
           "method": "FakeTensorMode, micro-batch 2 and 3, the middle of three decoder layers; transformers told "
                     "it is not tracing and the batch is not packed",
           "record_s": round(time.time() - t0, 2)}
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, a.out)
    print(f"hf_record.py: {raw['model_type']} ({a.dtype}, {a.attn}, seq {a.seq}): {len(symbols)} sizes, "
          f"{sum(len(t.split()) for t in tapes.values())} events in {doc['record_s']} s -> {a.out}")
    if problems:
        print("hf_record.py: problems (in the recording, and said by every plan from it): " + "; ".join(problems))
    return 0


def named_events(ra, rb, Ba, Bb, symbols, problems, what):
    """Both recordings' events aligned, each allocation named by its size a + c x B (a free by
    its allocation's name): [(kind, name or mark)]."""
    ea, eb = ra.events, rb.events
    if len(ea) != len(eb) or any(x[0] != y[0] or (x[0] == "mark" and x[1] != y[1]) for x, y in zip(ea, eb)):
        problems.append(f"{what}: micro-batch {Ba} and {Bb} record different events ({len(ea)} vs {len(eb)})")
        return None
    names, out = {}, []
    for x, y in zip(ea, eb):
        if x[0] == "mark":
            out.append(x)
            continue
        if x[0] == "-":
            out.append(("-", names.get(x[1], "?")))
            continue
        c = (y[2] - x[2]) // (Bb - Ba)
        base = x[2] - c * Ba
        if base + c * Ba != x[2] or base + c * Bb != y[2]:
            problems.append(f"{what}: a size {x[2]} -> {y[2]} is not a + c x micro-batch")
        grad = x[1] in ra.param_grads
        if grad != (y[1] in rb.param_grads):
            problems.append(f"{what}: a parameter gradient at micro-batch {Ba} is not one at {Bb}")
        prefix = "W" if grad else "x"
        name = next((k for k, v in symbols.items() if k[0] == prefix and v == [base, c]), None)
        if name is None:
            name = f"{prefix}{sum(1 for k in symbols if k[0] == prefix)}"
        symbols[name] = [base, c]
        names[x[1]] = name
        out.append(("+", name))
    return out


def still_live(events):
    """Frees for what the micro-step leaves alive but its parameter gradients (the loss, the
    rotary tables its layers saved): a training loop drops them before the next micro-step."""
    live = {}
    for kind, name in events:
        if kind == "mark" and name == "end":
            break
        if kind == "+" and not name.startswith("W"):
            live[name] = live.get(name, 0) + 1
        elif kind == "-" and live.get(name, 0) > 0:
            live[name] -= 1
    return [f"-{n}" for n, k in sorted(live.items()) for _ in range(k)]


def cut_spans(events, spans, problems):
    """The tokens between each span's two marks."""
    where = {e[1]: i for i, e in enumerate(events) if e[0] == "mark"}
    out = {}
    for span, (a, b) in spans.items():
        if a not in where or b not in where:
            refuse(f"recording: the marks {a} .. {b} of span {span} were not seen (the hooks did not fire as "
                   "expected; transformers may build this model's layers otherwise)", EXIT_UNUSABLE)
        toks = [k + n for k, n in events[where[a] + 1:where[b]] if k != "mark"]
        if any(t.endswith("?") for t in toks):
            problems.append(f"{span}: frees a tensor allocated before the recording began")
        out[span] = toks
    return out


if __name__ == "__main__":
    sys.exit(main())
