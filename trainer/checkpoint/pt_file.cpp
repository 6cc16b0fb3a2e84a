// See pt_file.h.
#include "trainer/checkpoint/pt_file.h"

#include <cstring>
#include <filesystem>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/api/compilation_unit.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include "device/base/errors.h"
#include "trainer/config/user_file.h"

namespace zrepro {

namespace {

const std::string kIntList = "ctorch.jit._pickle\nbuild_intlist\n";
const std::string kSize = "ctorch\nSize\n";

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t i = s.find(from); i != std::string::npos; i = s.find(from, i + to.size())) s.replace(i, from.size(), to);
}

// The classes read_pt meets, one compilation unit for all: a Python class becomes an
// empty ClassType whose attributes the object loader adds as it reads them.
std::shared_ptr<torch::jit::CompilationUnit> read_classes() {
  static auto cu = std::make_shared<torch::jit::CompilationUnit>();
  return cu;
}

c10::StrongTypePtr resolve(const c10::QualifiedName& qn) {
  auto cu = read_classes();
  const std::string& name = qn.qualifiedName();
  // Container type tags (Dict[str, Any], List[int]) and builtins are types, not classes.
  if (qn.prefix().empty() || name.find('[') != std::string::npos)
    return c10::StrongTypePtr(cu, torch::jit::Unpickler::defaultTypeParser(name));
  if (auto t = cu->get_class(qn)) return c10::StrongTypePtr(cu, t);
  auto cls = c10::ClassType::create(qn, cu);
  cu->register_type(cls);
  return c10::StrongTypePtr(cu, cls);
}

c10::intrusive_ptr<c10::ivalue::Object> load_object(const c10::StrongTypePtr& t, c10::IValue state) {
  auto cls = t.type_->expect<c10::ClassType>();
  std::vector<std::pair<std::string, c10::IValue>> attrs;
  if (state.isGenericDict()) {
    for (const auto& kv : state.toGenericDict()) attrs.emplace_back(kv.key().toStringRef(), kv.value());
  } else if (state.isTuple() && state.toTupleRef().elements().size() == 1) {
    attrs.emplace_back("value", state.toTupleRef().elements()[0]);  // an Enum: Class(value)
  }
  for (const auto& [name, v] : attrs)
    if (!cls->findAttributeSlot(name)) cls->addAttribute(name, c10::AnyType::get());
  auto obj = c10::ivalue::Object::create(t, cls->numAttributes());
  for (const auto& [name, v] : attrs) obj->setAttr(name, v);
  return obj;
}

}  // namespace

void write_pt(const std::string& path, const c10::IValue& value, bool int_lists_as_size) {
  std::string pickle;
  // No type tags on dicts and lists (restore_type_tag): torch.load's weights_only default
  // (torch >= 2.6, transformers' from_pretrained) refuses that global; plain dicts pass.
  torch::jit::Pickler p([&](const char* b, size_t n) { pickle.append(b, n); }, nullptr, nullptr, nullptr, nullptr,
                        /*tag_aggregates=*/false);
  p.protocol();
  p.pushIValue(value);
  p.stop();
  if (int_lists_as_size) replace_all(pickle, kIntList, kSize);
  std::string bytes;
  caffe2::serialize::PyTorchStreamWriter w([&](const void* b, size_t n) {
    bytes.append(static_cast<const char*>(b), n);
    return n;
  });
  torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), p.tensorData(), w);
  w.writeEndOfFile();
  write_file_atomic(path, bytes);
}

c10::IValue read_pt(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw ConfigError(path + ": no such file (a checkpoint folder holds it: pass the folder it was saved in)");
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    auto rec = reader.getRecord("data.pkl");
    std::string pickle(static_cast<const char*>(std::get<0>(rec).get()), std::get<1>(rec));
    replace_all(pickle, kSize, kIntList);
    size_t pos = 0;
    auto read = [&](char* buf, size_t n) -> size_t {
      n = std::min(n, pickle.size() - pos);
      std::memcpy(buf, pickle.data() + pos, n);
      pos += n;
      return n;
    };
    auto read_record = [&](const std::string& name) { return std::get<0>(reader.getRecord("data/" + name)); };
    torch::jit::Unpickler u(read, resolve, load_object, read_record, c10::Device(torch::kCPU), false);
    u.set_version(reader.version());
    return u.parse_ivalue();
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    const std::string folder = std::filesystem::path(path).parent_path().string();
    throw ConfigError(path + ": not a PyTorch .pt file LibTorch can read (" + what.substr(0, what.find('\n')) +
                      "). A file DeepSpeed itself wrote is one (its Python OrderedDicts are beyond LibTorch's "
                      "unpickler): rewrite the checkpoint first with `zrepro checkpoint from-deepspeed --input-folder " +
                      folder + " --output-folder OUT` and resume from OUT");
  }
}

c10::IValue python_object(const std::string& qualified, const std::vector<std::pair<std::string, c10::IValue>>& attrs) {
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  auto cls = c10::ClassType::create(c10::QualifiedName(qualified), cu);
  for (const auto& [name, v] : attrs) cls->addAttribute(name, v.type());
  cu->register_type(cls);
  auto obj = c10::ivalue::Object::create(c10::StrongTypePtr(cu, cls), attrs.size());
  for (size_t i = 0; i < attrs.size(); ++i) obj->setSlot(i, attrs[i].second);
  return c10::IValue(obj);
}

c10::IValue object_attr(const c10::IValue& object, const std::string& name) {
  if (!object.isObject()) return {};
  const auto& obj = object.toObjectRef();
  return obj.type()->findAttributeSlot(name) ? obj.getAttr(name) : c10::IValue();
}

c10::impl::GenericDict str_dict() { return c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get()); }

c10::IValue dict_at(const c10::impl::GenericDict& d, const std::string& key, const std::string& file) {
  auto it = d.find(key);
  if (it == d.end())
    throw ConfigError(file + ": no key \"" + key + "\" (not a DeepSpeed checkpoint file of this kind, or a release "
                      "that writes it differently)");
  return it->value();
}

}  // namespace zrepro
