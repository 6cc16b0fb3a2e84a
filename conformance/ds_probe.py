"""What a real DeepSpeed run holds and sends: a live-tensor walk by memory
category and a collective byte counter. Used by ds_run.py inside each rank.

Memory: every tensor reachable from the model's parameters, the engine's ZeRO
optimizer (its tensor attributes, by name) and the wrapped optimizer's state, plus
every other live tensor the garbage collector tracks, de-duplicated by storage
(a view or a flat buffer that backs many parameters counts once). A storage takes
the first category that claims it, in this order:
  params            model parameters (stage 3: each parameter's ds_tensor partition)
                    and the flat low-precision buffers that back them
  optimizer_states  optimizer state (exp_avg, exp_avg_sq, step) and the fp32 master
                    partition where it is a separate copy
  grads             parameter .grad, accumulated and partitioned gradient buffers
  bucket_buffers    the reduce (ipg) bucket buffers
  other             any other live tensor (listed by shape in `other_tensors`)
"""
import gc
import warnings

import torch

warnings.filterwarnings("ignore", category=FutureWarning)  # gc walks touch deprecated torch.distributed names

CATEGORIES = ("params", "optimizer_states", "grads", "bucket_buffers", "other")


def _tensors_in(obj, depth=0):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif depth < 4 and isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _tensors_in(o, depth + 1)
    elif depth < 4 and isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors_in(o, depth + 1)
    elif depth < 4 and type(obj).__name__.startswith("IPGBucket"):
        yield from _tensors_in(vars(obj), depth + 1)


def _key(t):
    s = t.untyped_storage()
    return (s.data_ptr(), t.device.type), s.nbytes()


def _attr_category(name):
    n = name.lower()
    if "norm" in n or "meta" in n:
        return None  # a scalar grad norm; meta-device shape records hold no memory
    if "ipg" in n or "bucket" in n:
        return "bucket_buffers"
    if "grad" in n:
        return "grads"
    if "fp32" in n or "master" in n:
        return "optimizer_states"
    if "bit16" in n or "fp16" in n or "lp_param" in n:
        return "params"
    return None


def memory_by_category(engine, model):
    """Bytes per category on this rank right now, and where each came from."""
    claimed = {}  # storage key -> (category, source)

    def claim(t, category, source):
        if t is None or not isinstance(t, torch.Tensor) or t.device.type == "meta":
            return
        if t.untyped_storage().nbytes() == 0:
            return
        k, _ = _key(t)
        if k not in claimed:
            claimed[k] = (category, source, t.untyped_storage().nbytes())

    params = list(model.parameters())
    for p in params:
        if hasattr(p, "ds_tensor"):
            claim(p.ds_tensor, "params", "param.ds_tensor")
        claim(p.data, "params", "param")
    zero_opt = engine.optimizer if engine.zero_optimization() else None
    if zero_opt is not None:
        # Buckets before gradients: a gradient that is a view into a bucket buffer
        # (contiguous_gradients) is bucket memory.
        attrs = [(n, v, _attr_category(n)) for n, v in vars(zero_opt).items()]
        order = ("params", "bucket_buffers", "optimizer_states", "grads")
        for cat in order:
            for name, value, c in attrs:
                if c == cat:
                    for t in _tensors_in(value):
                        claim(t, cat, name)
        for group in getattr(zero_opt, "single_partition_of_fp32_groups", []):
            claim(group.grad, "grads", "single_partition_of_fp32_groups.grad")
    inner = getattr(zero_opt, "optimizer", None) if zero_opt is not None else engine.optimizer
    if inner is not None:
        for group in inner.param_groups:
            for p in group["params"]:
                if id(p) not in {id(q) for q in params}:
                    claim(p.data, "optimizer_states", "optimizer param (master)")
        for st in inner.state.values():
            for t in _tensors_in(st):
                claim(t, "optimizer_states", "optimizer.state")
    for p in params:
        if p.grad is not None:
            claim(p.grad, "grads", "param.grad")
    other = []
    for o in gc.get_objects():
        try:
            if isinstance(o, torch.Tensor) and o.device.type != "meta" and o.untyped_storage().nbytes() > 0:
                k, n = _key(o)
                if k not in claimed:
                    claimed[k] = ("other", "gc", n)
                    other.append({"shape": list(o.shape), "dtype": str(o.dtype), "bytes": n})
        except Exception:  # objects that look like tensors but have no storage
            continue
    out = {c: 0 for c in CATEGORIES}
    sources = {}
    for cat, source, n in claimed.values():
        out[cat] += n
        sources.setdefault(cat, {}).setdefault(source, 0)
        sources[cat][source] += n
    return {"bytes": out, "sources": sources, "other_tensors": sorted(other, key=lambda x: -x["bytes"])[:8]}


class CommCounter:
    """Counts the collectives torch.distributed carries for DeepSpeed, by op, with
    the bytes of the rank's input and output tensors. Install before deepspeed is
    imported (its torch backend binds some functions at init)."""

    OPS = ("all_reduce", "reduce", "reduce_scatter_tensor", "_reduce_scatter_base", "reduce_scatter",
           "all_gather_into_tensor", "_all_gather_base", "all_gather", "broadcast", "all_reduce_coalesced",
           "all_to_all_single")

    def __init__(self):
        self.calls = []
        self.enabled = False
        import torch.distributed as dist
        for op in self.OPS:
            if hasattr(dist, op):
                setattr(dist, op, self._wrap(op, getattr(dist, op)))

    @staticmethod
    def _nbytes(x):
        return sum(t.numel() * t.element_size() for t in _tensors_in(x) if isinstance(t, torch.Tensor))

    def _wrap(self, op, fn):
        def counted(*args, **kwargs):
            if self.enabled:
                first = args[0] if args else next(iter(kwargs.values()))
                second = args[1] if len(args) > 1 and not isinstance(args[1], (int, str)) else None
                self.calls.append({"op": op, "first_bytes": self._nbytes(first),
                                   "second_bytes": self._nbytes(second) if second is not None else 0})
            return fn(*args, **kwargs)
        return counted

    def take(self):
        calls, self.calls = self.calls, []
        return calls


def zero_convention(calls, world):
    """Bytes per op as zrepro counts them (zero/comm/communicator.cpp): all-reduce
    2x its buffer, reduce-scatter its full input, all-gather its full output,
    broadcast its buffer; a reduce to one rank counts its buffer once."""
    out = {"all_reduce": 0, "reduce_scatter": 0, "all_gather": 0, "broadcast": 0, "reduce": 0}
    for c in calls:
        op = c["op"]
        if op in ("all_reduce", "all_reduce_coalesced"):
            out["all_reduce"] += 2 * c["first_bytes"]
        elif op in ("reduce_scatter_tensor", "_reduce_scatter_base"):
            out["reduce_scatter"] += c["second_bytes"]  # (output, input)
        elif op == "reduce_scatter":
            out["reduce_scatter"] += c["second_bytes"]  # (output, input_list)
        elif op in ("all_gather_into_tensor", "_all_gather_base"):
            out["all_gather"] += c["first_bytes"]  # (output, input)
        elif op == "all_gather":
            out["all_gather"] += c["first_bytes"]  # (tensor_list, tensor)
        elif op == "broadcast":
            out["broadcast"] += c["first_bytes"]
        elif op == "reduce":
            out["reduce"] += c["first_bytes"]
    return out


class OffloadCopyCounter:
    """Bytes DeepSpeed copies between the device and the host under offload_optimizer,
    by direction, at ZeRO stages 1-2. On DS_ACCELERATOR=cpu every tensor is a CPU tensor,
    so a copy's side is told by its storage: the ZeRO optimizer's host-side buffers
    (single_partition_of_fp32_groups and their .grad, the bit16 staging copy,
    accumulated_grads_in_cpu, temp_grad_buffer_for_cpu_offload) are the host, the rest
    the device. A Tensor.copy_ whose two sides differ counts the source's bytes.
    refresh() before each phase: accumulated_grads_in_cpu appears during the first
    accumulation, so the first step under-counts (compare the steps after it)."""

    def __init__(self, zero_optimizer):
        from torch.overrides import TorchFunctionMode

        counter = self

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if func is torch.Tensor.copy_ and counter.enabled:
                    dst, src = args[0], args[1]
                    hd, hs = counter._host(dst), counter._host(src)
                    if hd != hs:
                        counter.bytes["d2h" if hd else "h2d"] += src.numel() * src.element_size()
                return func(*args, **kwargs)

        self.opt = zero_optimizer
        self.mode = Mode()
        self.enabled = True
        self.host = set()
        self.bytes = {"d2h": 0, "h2d": 0}

    def _host(self, t):
        return isinstance(t, torch.Tensor) and t.numel() > 0 and t.untyped_storage().data_ptr() in self.host

    def refresh(self):
        s = set()

        def add(t):
            if isinstance(t, torch.Tensor) and t.numel() > 0:
                s.add(t.untyped_storage().data_ptr())
                if t.grad is not None:
                    add(t.grad)

        for t in self.opt.single_partition_of_fp32_groups:
            add(t)
        for t in getattr(self.opt, "param_buffer_of_bit16_for_cpu_offload_groups", []):
            add(t)
        for t in getattr(self.opt, "accumulated_grads_in_cpu", {}).values():
            add(t)
        add(getattr(self.opt, "temp_grad_buffer_for_cpu_offload", None))
        self.host = s

    def take(self):
        out, self.bytes = self.bytes, {"d2h": 0, "h2d": 0}
        return out
