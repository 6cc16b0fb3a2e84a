"""Rewrites the .pt files of a checkpoint DeepSpeed wrote into ones LibTorch reads
(`zrepro checkpoint from-deepspeed` runs it with the user's Python torch; trainer/checkpoint/
from_deepspeed.h says why).

    python from_deepspeed.py IN_TAG_FOLDER OUT_TAG_FOLDER

Every *.pt file of IN_TAG_FOLDER (DeepSpeed's global_step<N>/) is loaded with torch.load and
written under the same name in OUT_TAG_FOLDER with torch.save, changed only where LibTorch's
unpickler cannot follow Python:
  - an OrderedDict (a state_dict, param_shapes, param_slice_mappings) becomes a dict with the
    same items in the same order; a state_dict's `_metadata` attribute (module versions for
    load_state_dict) is dropped;
  - a set becomes a list (sorted by repr: the same file gives the same bytes);
  - a torch.Size is pickled as torch.Size(list): zrepro's own files' form, which LibTorch reads
    as an int list (Python's own is torch.Size(tuple)).
Tensors, numbers, strings and DeepSpeed's objects (LossScaler, ZeroStageEnum,
fragment_address) are written as they were read. DeepSpeed need not be importable: its
classes are stood in for by empty classes of the same module and name, which pickle writes
back under those names with their attributes.
Each file is written to NAME.tmp and renamed once written. Prints a line per file; exit 2
(its reason on stderr) for a file torch.load cannot read.
"""
import os
import pickle
import sys
import types

import torch


def _init(self, *args):
    """Class(value): how pickle rebuilds an Enum (ZeroStageEnum); the value kept as .value."""
    self.value = args[0] if args else None
    type(self).called_with_value = True


def _reduce_ex(self, protocol):
    """Pickled back as it was read: an Enum as Class(value), any other object as its
    attributes (NEWOBJ + BUILD), so that Python with DeepSpeed rebuilds the real class."""
    if getattr(type(self), "called_with_value", False):
        return type(self), (self.value,)
    return object.__reduce_ex__(self, protocol)


def stand_in(module, name):
    """An empty class named module.name, importable by pickle (a module in sys.modules)."""
    parts = module.split(".")
    for i in range(1, len(parts) + 1):
        sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    mod = sys.modules[module]
    if not hasattr(mod, name):
        setattr(mod, name, type(name, (), {"__module__": module, "__qualname__": name, "__init__": _init,
                                           "__reduce_ex__": _reduce_ex}))
    return getattr(mod, name)


class Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if module.split(".")[0] == "deepspeed":
            return stand_in(module, name)
        try:
            return super().find_class(module, name)
        except (ImportError, AttributeError):
            return stand_in(module, name)


class Pickler(pickle.Pickler):
    def reducer_override(self, obj):
        if type(obj) is torch.Size:
            return torch.Size, (list(obj),)
        return NotImplemented


# torch.load / torch.save take a pickle module: this one, with the classes above.
pickle_module = types.SimpleNamespace(Unpickler=Unpickler, Pickler=Pickler, load=pickle.load, dump=pickle.dump,
                                      __name__="zrepro_from_deepspeed")


def plain(x):
    if torch.is_tensor(x):
        return x
    if isinstance(x, dict):  # OrderedDict too
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, torch.Size):
        return x
    if isinstance(x, list):
        return [plain(v) for v in x]
    if isinstance(x, tuple):
        return tuple(plain(v) for v in x)
    if isinstance(x, (set, frozenset)):
        return sorted((plain(v) for v in x), key=repr)
    if hasattr(x, "__dict__") and not isinstance(x, type):
        x.__dict__ = plain(vars(x))
    return x


def main():
    if len(sys.argv) != 3:
        print("usage: from_deepspeed.py IN_TAG_FOLDER OUT_TAG_FOLDER", file=sys.stderr)
        return 2
    src, dst = sys.argv[1], sys.argv[2]
    names = sorted(n for n in os.listdir(src) if n.endswith(".pt"))
    if not names:
        print(f"{src}: no .pt files (a DeepSpeed checkpoint's global_step<N> folder holds them)", file=sys.stderr)
        return 2
    os.makedirs(dst, exist_ok=True)
    for n in names:
        path = os.path.join(src, n)
        try:
            value = torch.load(path, map_location="cpu", weights_only=False, pickle_module=pickle_module)
        except Exception as e:  # noqa: BLE001 (any reason a file does not load is the same bad input)
            print(f"{path}: torch.load cannot read it ({type(e).__name__}: {e})", file=sys.stderr)
            return 2
        tmp = os.path.join(dst, n + ".tmp")
        torch.save(plain(value), tmp, pickle_module=pickle_module)
        os.replace(tmp, os.path.join(dst, n))
        print(f"ZREPRO_FILE {n} {os.path.getsize(os.path.join(dst, n))}", flush=True)
    print(f"ZREPRO_TORCH {torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
