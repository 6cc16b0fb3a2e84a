// See universal.h.
#include "trainer/checkpoint/universal.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>

#include <unistd.h>

#include "device/base/errors.h"
#include "trainer/checkpoint/pt_file.h"
#include "trainer/config/user_file.h"

namespace zrepro {

namespace fs = std::filesystem;
using c10::IValue;

namespace {

// The files of `folder` whose names match `pattern`, by rank (the first number after
// "rank_", as the script's natural sort puts them).
std::map<int, std::string> rank_files(const std::string& folder, const std::regex& pattern) {
  std::map<int, std::string> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(folder, ec)) {
    const std::string name = e.path().filename().string();
    std::smatch m;
    if (!std::regex_match(name, m, pattern)) continue;
    try {
      found[std::stoi(m[1].str())] = e.path().string();
    } catch (const std::exception&) {  // a rank past int: no rank a checkpoint has
      throw ConfigError(e.path().string() + ": the rank in its name is not a rank; a ZeRO checkpoint's files are "
                        "zero_pp_rank_R_mp_rank_00_*.pt");
    }
  }
  return found;
}

// [Note: every rank's file] A ZeRO checkpoint is whole only with a file of each kind for
// every one of the ranks that saved it (dp_world_size in the model states; each rank's
// optimizer partition, and at stage 3 each rank's model states). A missing one is refused
// naming it: read without it, the partitions left do not cover the model (once an abort,
// exit 134), and DeepSpeed's own resume would fail on it.
std::vector<std::string> every_rank(const std::map<int, std::string>& found, int world, const std::string& expected,
                                    const std::string& in, const std::string& flag) {
  std::vector<std::string> out;
  for (int r = 0; r < world; ++r) {
    const auto it = found.find(r);
    if (it == found.end())
      throw ConfigError(flag + " " + in + ": " + expected + " of rank " + std::to_string(r) + " is missing: the checkpoint "
                        "was saved on " + std::to_string(world) + " ranks and holds " + std::to_string(found.size()) +
                        " such file(s); copy the whole global_stepN folder every rank wrote");
    out.push_back(it->second);
  }
  if (!found.empty() && found.rbegin()->first >= world)
    throw ConfigError(flag + " " + in + ": " + found.rbegin()->second + " is of rank " +
                      std::to_string(found.rbegin()->first) + ", past the " + std::to_string(world) +
                      " ranks the checkpoint was saved on; a tag folder holds one save");
  return out;
}

// What read_pt gives for an Enum, written back as Python would read it: its value.
IValue plain(const IValue& v) {
  if (v.isObject() && object_attr(v, "value").isInt() && v.toObjectRef().type()->numAttributes() == 1)
    return object_attr(v, "value");
  return v;
}

SavedZero find_saved(const std::string& in, const std::string& flag) {
  SavedZero s;
  std::error_code ec;
  if (!fs::is_directory(in, ec))
    throw ConfigError(flag + " " + in + ": no such folder; pass the tag folder of a ZeRO checkpoint "
                      "(DIR/global_stepN, the folder DIR/latest names)");
  const std::map<int, std::string> optim =
      rank_files(in, std::regex(R"((?:bf16_)?zero_pp_rank_(\d+)_mp_rank_00_optim_states\.pt)"));
  if (optim.empty())
    throw ConfigError(flag + " " + in + ": can't find *_optim_states.pt files in directory '" + in +
                      "' (DeepSpeed's words): pass the tag folder of a ZeRO checkpoint (DIR/global_stepN)");
  const std::string& first = optim.begin()->second;
  const c10::impl::GenericDict osd =
      dict_at(read_pt(first).toGenericDict(), "optimizer_state_dict", first).toGenericDict();
  auto zs = osd.find("zero_stage");
  s.stage = zs == osd.end() ? 1 : zero_stage_of(zs->value());
  if (!has_zero_checkpoint(s.stage))
    throw ConfigError(flag + " " + in + ": " + first + " says zero_stage " + std::to_string(s.stage) +
                      "; a ZeRO checkpoint is of stage 1, 2 or 3");
  // The model states of rank 0 say how many ranks saved it; without dp_world_size (an older
  // DeepSpeed), the optimizer files found are the ranks.
  const std::map<int, std::string> model = rank_files(in, std::regex(checkpoint_layout(s.stage, 1).model_states_pattern()));
  if (!model.count(0))
    throw ConfigError(flag + " " + in + ": no model-states file of rank 0 (" + checkpoint_layout(s.stage, 1).model_states_file(0) +
                      ") beside the optimizer files");
  s.model_states = read_pt(model.at(0)).toGenericDict();
  const auto saved = s.model_states.find("dp_world_size");
  s.world = saved != s.model_states.end() && saved->value().isInt() ? static_cast<int>(saved->value().toInt())
                                                                      : static_cast<int>(optim.size());
  if (s.world < 1) throw ConfigError(flag + " " + in + ": " + model.at(0) + " says dp_world_size " + std::to_string(s.world));
  s.layout = checkpoint_layout(s.stage, s.world);
  s.optim_files = every_rank(optim, s.world, "the optimizer-states file", in, flag);
  s.model_files = s.layout.per_rank_model_states ? every_rank(model, s.world, "the model-states file", in, flag)
                                                 : std::vector<std::string>{model.at(0)};
  s.params = saved_params(s.model_states, s.model_files[0]);
  for (const CheckpointParam& p : s.params) s.numels.push_back(p.numel);
  return s;
}

// zero/optimizer_state.pt: the optimizer's global state. Stages 1-2: the file's
// optimizer_state_dict without its partitions, plus the param groups; stage 3: all of it,
// plus the torch optimizer's param groups (the script's _save_optimizer_state[_stage3]).
c10::impl::GenericDict global_state(const c10::impl::GenericDict& optimizer, const CheckpointLayout& layout,
                                    const std::string& file) {
  c10::impl::GenericDict out = str_dict();
  const bool ranges = layout.partition == DsPartitionForm::whole_model_ranges;
  for (const auto& kv : optimizer) {
    const std::string& k = kv.key().toStringRef();
    if (ranges && (k == layout.torch_optimizer_key || k == "param_slice_mappings" || k == layout.fp32_partitions_key))
      continue;
    out.insert(k, plain(kv.value()));
  }
  const IValue torch_sd = dict_at(optimizer, layout.torch_optimizer_key, file);
  out.insert("param_groups", dict_at(torch_sd.toGenericDict(), "param_groups", file));
  return out;
}

}  // namespace

int zero_stage_of(const IValue& zero_stage) {
  return static_cast<int>(zero_stage.isInt() ? zero_stage.toInt() : object_attr(zero_stage, "value").toInt());
}

int64_t adam_step_of(const IValue& step) {
  return step.isInt() ? step.toInt() : static_cast<int64_t>(step.toTensor().item<double>());
}

namespace {

// [Note: names from files are data] A parameter's name in a checkpoint becomes a folder
// under zero/ (ds_to_universal's layout), read and written by that name. A name that is not
// one plain path component ('/' or '\\' in it, ".", "..", empty, a NUL byte) would reach
// outside the folder, so it is refused here, where names are read, naming the file.
const std::string& folder_name(const std::string& name, const std::string& file) {
  const bool plain = !name.empty() && name != "." && name != ".." && name.find_first_of(std::string("/\\\0", 3)) == std::string::npos;
  if (!plain)
    throw ConfigError(file + ": the parameter name \"" + name.substr(0, 80) + "\" is not a plain name (ds_to_universal "
                      "makes a folder of each name: this one would lie outside the output folder); the checkpoint is "
                      "damaged or was not written by DeepSpeed");
  return name;
}

}  // namespace

std::vector<CheckpointParam> saved_params(const c10::impl::GenericDict& model_states, const std::string& file) {
  std::vector<CheckpointParam> out;
  for (const IValue& g : dict_at(model_states, "param_shapes", file).toList())
    for (const auto& kv : g.toGenericDict()) {
      CheckpointParam p;
      p.name = folder_name(kv.key().toStringRef(), file);
      p.shape = kv.value().toIntVector();
      p.numel = 1;
      for (int64_t d : p.shape) p.numel *= d;
      p.group = -1;
      out.push_back(p);
    }
  return out;
}

RankStates rank_states(const c10::impl::GenericDict& optimizer, const CheckpointLayout& layout, const std::string& file) {
  const c10::impl::GenericDict torch_sd = dict_at(optimizer, layout.torch_optimizer_key, file).toGenericDict();
  const c10::impl::GenericDict states = dict_at(torch_sd, "state", file).toGenericDict();
  if (states.size() != 1)
    throw ConfigError(file + ": " + std::to_string(states.size()) + " optimizer parameter groups; zrepro reads "
                      "checkpoints of one group (DeepSpeed's default; the Hugging Face Trainer's weight-decay split "
                      "into two is not read yet)");
  const c10::impl::GenericDict st = states.begin()->value().toGenericDict();
  RankStates r;
  r.step = dict_at(st, "step", file);
  r.m = dict_at(st, "exp_avg", file).toTensor();
  r.v = dict_at(st, "exp_avg_sq", file).toTensor();
  r.master = dict_at(optimizer, layout.fp32_partitions_key, file).toList().get(0).toTensor();
  return r;
}

SavedZero read_saved_zero(const std::string& folder, const std::string& flag, bool moments) {
  SavedZero s = find_saved(folder, flag);
  std::vector<torch::Tensor> master, m, v;
  for (int r = 0; r < s.world; ++r) {
    const std::string& file = s.optim_files[r];
    const c10::impl::GenericDict optimizer =
        dict_at(read_pt(file).toGenericDict(), "optimizer_state_dict", file).toGenericDict();
    const RankStates rs = rank_states(optimizer, s.layout, file);
    s.master_partition_bytes += rs.master.numel() * rs.master.element_size();
    master.push_back(rs.master), m.push_back(rs.m), v.push_back(rs.v);
    if (r == 0) s.step = rs.step, s.first_optimizer = optimizer;
  }
  s.master = natural_from_ds_partitions(master, s.numels, s.layout);
  if (moments) {
    s.exp_avg = natural_from_ds_partitions(m, s.numels, s.layout);
    s.exp_avg_sq = natural_from_ds_partitions(v, s.numels, s.layout);
  }
  return s;
}

namespace universal_out {

// [Note: a conversion writes a new folder] to-universal writes its output whole under a
// temporary name beside --output-folder and renames it into place once every file is
// written: a reader (a resume with load_universal) sees the old folder or the new one. An
// existing --output-folder is replaced only when it holds nothing but an earlier
// conversion (zero/ and model-states files); anything else in it is the user's, and the
// conversion is refused naming it ([Note: an output never replaces an input]). A stale
// earlier conversion is never mixed with the new one (a parameter it held would be kept).
void check_output_folder(const std::string& out) {
  std::error_code ec;
  if (!fs::exists(out, ec)) return;
  if (!fs::is_directory(out, ec))
    throw ConfigError("--output-folder " + out + ": a file, not a folder; give a new folder for the universal checkpoint");
  static const std::regex model_states(R"(.*model_states\.pt)");
  for (const auto& e : fs::directory_iterator(out, ec)) {
    const std::string name = e.path().filename().string();
    const bool ours = (name == "zero" && e.is_directory()) || (e.is_regular_file() && std::regex_match(name, model_states));
    if (!ours)
      throw ConfigError("--output-folder " + out + ": holds \"" + name + "\", which no conversion writes; give a new "
                        "folder (nothing a conversion did not write is replaced)");
  }
}

// Every parameter's fp32 value and moments (and step) under zero/NAME/, the module entries
// no optimizer state covers, and the optimizer's global state; the values written.
int64_t write_states(const SavedZero& s, const std::string& zero) {
  const torch::Tensor all[3] = {s.master, s.exp_avg, s.exp_avg_sq};
  const char* state_names[3] = {"fp32", "exp_avg", "exp_avg_sq"};
  int64_t offset = 0;
  for (const CheckpointParam& p : s.params) {
    const std::string dir = zero + "/" + p.name;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw IoError("cannot create " + dir + ": " + ec.message());
    for (int k = 0; k < 3; ++k) {
      torch::Tensor t = all[k].narrow(0, offset, p.numel).clone();
      if (!s.layout.universal_wraps_params) {
        write_pt(dir + "/" + state_names[k] + ".pt", t);
        continue;
      }
      c10::impl::GenericDict d = str_dict();
      d.insert("param", t.view(p.shape));
      d.insert("cat_dim", int64_t{0});
      write_pt(dir + "/" + state_names[k] + ".pt", d);
    }
    if (s.layout.universal_wraps_params) write_pt(dir + "/step.pt", s.step);
    offset += p.numel;
  }
  if (s.layout.module_holds_values) {
    // Module entries no optimizer state covers (a tied head): their 16-bit values as fp32.
    for (const auto& kv : dict_at(s.model_states, "module", s.model_files[0]).toGenericDict()) {
      const std::string dir = zero + "/" + folder_name(kv.key().toStringRef(), s.model_files[0]);
      if (fs::exists(dir + "/fp32.pt")) continue;
      fs::create_directories(dir);
      c10::impl::GenericDict d = str_dict();
      d.insert("param", kv.value().toTensor().to(torch::kFloat));
      write_pt(dir + "/fp32.pt", d);
    }
  }
  write_pt(zero + "/optimizer_state.pt", global_state(s.first_optimizer, s.layout, s.optim_files[0]));
  return offset;
}

// The temporary folder, removed unless it was renamed into place.
struct Staging {
  std::string dir;
  bool placed = false;
  ~Staging() {
    std::error_code ec;
    if (!placed) fs::remove_all(dir, ec);
  }
};

}  // namespace universal_out

UniversalConversion convert_to_universal(const std::string& input_folder, const std::string& output_folder,
                                         bool inject_missing_state) {
  using namespace universal_out;
  const SavedZero s = read_saved_zero(input_folder, "--input-folder");
  if (s.layout.universal_asks_checkpoint_info && !inject_missing_state) {
    const c10::impl::GenericDict& ms = s.model_states;
    auto info = ms.find("universal_checkpoint_info");
    if (info == ms.end() || info->value().isNone())
      throw ConfigError("--input-folder " + input_folder + ": ds_to_universal.py stops here: \"Required "
                        "universal_checkpoint_info state is missing in checkpoint. Verify that client creates this "
                        "state.\" Only Megatron-DeepSpeed's models record it; for any other model pass "
                        "--inject-missing-state (the script's --inject_missing_state)");
  }
  const fs::path out = fs::path(output_folder).lexically_normal();
  const std::string target = (out.has_filename() ? out : out.parent_path()).string();
  check_output_folder(target);
  Staging staging{target + ".tmp." + std::to_string(::getpid())};
  fs::remove_all(staging.dir);
  const int64_t numel = write_states(s, staging.dir + "/zero");
  for (const std::string& f : s.model_files)
    write_file_atomic(staging.dir + "/" + fs::path(f).filename().string(),
                      read_user_file("--input-folder", f, "a DeepSpeed model-states file"));
  std::error_code ec;
  fs::remove_all(target, ec);  // an earlier conversion only (check_output_folder)
  fs::rename(staging.dir, target, ec);
  if (ec) throw IoError("cannot rename " + staging.dir + " to " + target + ": " + ec.message());
  staging.placed = true;
  const fs::path root = fs::path(target).parent_path();
  write_file_atomic((root.empty() ? fs::path(".") : root).string() + "/latest_universal",
                    fs::path(target).filename().string());
  UniversalConversion c;
  c.output_folder = output_folder;
  c.stage = s.stage;
  c.world = s.world;
  c.parameters = static_cast<int64_t>(s.params.size());
  c.numel = numel;
  return c;
}

namespace {

torch::Tensor read_state(const std::string& file, const CheckpointParam& p, const std::string& flag) {
  if (!fs::exists(file))
    throw ConfigError(flag + ": no " + file + " (a universal checkpoint holds zero/NAME/fp32.pt, exp_avg.pt and "
                      "exp_avg_sq.pt for every parameter of the model): convert the checkpoint of this model with "
                      "ds_to_universal.py or `zrepro checkpoint to-universal`");
  const IValue v = read_pt(file);
  const torch::Tensor t = v.isTensor() ? v.toTensor() : dict_at(v.toGenericDict(), "param", file).toTensor();
  if (t.numel() != p.numel)
    throw ConfigError(flag + ": " + file + " holds " + std::to_string(t.numel()) + " values, this run's " + p.name +
                      " has " + std::to_string(p.numel) + ": resume with the model the checkpoint was saved with");
  return t.reshape({-1}).to(torch::kFloat);
}

}  // namespace

UniversalStates read_universal_global(const std::string& folder, const std::string& first, const std::string& flag) {
  const std::string zero = folder + "/zero", opt_file = zero + "/optimizer_state.pt";
  if (!fs::exists(opt_file))
    throw ConfigError(flag + ": " + opt_file + " containing optimizer global state is missing! Cannot proceed. "
                      "(DeepSpeed's words): the folder latest_universal names is not a converted checkpoint");
  const c10::impl::GenericDict opt = read_pt(opt_file).toGenericDict();
  UniversalStates u;
  u.loss_scaler = dict_at(opt, "loss_scaler", opt_file);
  auto torch_sd = opt.find("optimizer_state_dict");
  if (torch_sd != opt.end()) {  // stage 3's form: the step in the torch optimizer's state
    const c10::impl::GenericDict st = dict_at(torch_sd->value().toGenericDict(), "state", opt_file).toGenericDict();
    u.adam_steps = adam_step_of(dict_at(st.begin()->value().toGenericDict(), "step", opt_file));
  } else {
    const std::string step_file = zero + "/" + first + "/step.pt";
    if (!fs::exists(step_file)) throw ConfigError(flag + ": no " + step_file + " (the Adam step at stages 1-2)");
    u.adam_steps = adam_step_of(read_pt(step_file));
  }
  return u;
}

std::array<torch::Tensor, 3> read_universal_params(const std::string& folder,
                                                   const std::vector<CheckpointParam>& params,
                                                   const std::string& flag) {
  std::vector<torch::Tensor> parts[3];
  const char* names[3] = {"fp32", "exp_avg", "exp_avg_sq"};
  for (const CheckpointParam& p : params)
    for (int k = 0; k < 3; ++k)
      parts[k].push_back(read_state(folder + "/zero/" + p.name + "/" + names[k] + ".pt", p, flag));
  return {torch::cat(parts[0]), torch::cat(parts[1]), torch::cat(parts[2])};
}

}  // namespace zrepro
