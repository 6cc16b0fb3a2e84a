// PyTorch's .pt files from LibTorch: torch.save's zip container around a pickle, as
// DeepSpeed's checkpoints hold them, written and read with LibTorch's own Pickler and
// Unpickler (no hand-written pickle).
//
// [Note: torch.Size in a pickle] zero_to_fp32.py calls .numel() on every shape of a
// model-states file's param_shapes, so they must load as torch.Size; LibTorch writes an
// int list as GLOBAL torch.jit._pickle.build_intlist + REDUCE, and has no torch.Size.
// write_pt(..., int_lists_as_size) renames that global to torch.Size in the pickle bytes
// (protocol 2 has no frames and globals are memoised by index, so the length change is
// safe; tensor bytes are separate records), and read_pt renames it back. Only for files
// whose int lists are all shapes (the model states): an optimizer file's partition_count
// must stay a list. Python objects (DeepSpeed's LossScaler) are written as LibTorch
// Objects of a class with the Python qualified name, which pickle writes as Python
// writes a plain object; read_pt reads any such class back as an Object whose attributes
// are the pickled __dict__ (an Enum's value is its attribute "value").
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>

namespace zrepro {

// Writes value to path as torch.save would (the zip container), atomically
// (write_file_atomic: IoError on a failed write, nothing half-written under the name).
void write_pt(const std::string& path, const c10::IValue& value, bool int_lists_as_size = false);
// Reads a .pt file written by write_pt or by Python's torch.save. Throws ConfigError (bad
// input, exit 2) naming the file when it is missing or not a .pt file LibTorch can read
// (one DeepSpeed wrote: the message names `zrepro checkpoint from-deepspeed`, [Note: a
// checkpoint DeepSpeed wrote] in trainer/app/checkpoint.cpp).
c10::IValue read_pt(const std::string& path);

// A Python object of class `qualified` ("deepspeed.runtime.fp16.loss_scaler.LossScaler")
// whose __dict__ is attrs.
c10::IValue python_object(const std::string& qualified, const std::vector<std::pair<std::string, c10::IValue>>& attrs);
// An attribute of an object read_pt returned; IValue() when it has none.
c10::IValue object_attr(const c10::IValue& object, const std::string& name);

// A dict with string keys and any values (Python's dict of a state_dict-like file).
c10::impl::GenericDict str_dict();
// d[key], or a ConfigError naming the file and the key when it is absent.
c10::IValue dict_at(const c10::impl::GenericDict& d, const std::string& key, const std::string& file);

}  // namespace zrepro
