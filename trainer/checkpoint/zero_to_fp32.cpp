// See zero_to_fp32.h.
#include "trainer/checkpoint/zero_to_fp32.h"

#include <algorithm>
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "device/base/errors.h"
#include "device/device_memory.h"
#include "trainer/checkpoint/ds_checkpoint.h"
#include "trainer/checkpoint/host_bytes.h"
#include "trainer/checkpoint/pt_file.h"
#include "trainer/checkpoint/universal.h"
#include "trainer/config/user_file.h"

namespace zrepro {

namespace {

std::string shard_name(size_t i, size_t n) {
  if (n == 1) return "pytorch_model.bin";
  char buf[64];
  std::snprintf(buf, sizeof buf, "pytorch_model-%05zu-of-%05zu.bin", i + 1, n);
  return buf;
}

// The kernel's OOM killer, emulated: the anonymous bytes past the host's capacity.
void charge(int64_t anon, int64_t capacity, const Fp32Export& e, const std::string& what) {
  if (capacity <= 0 || anon <= capacity) return;
  throw HostMemoryExhausted(
      "consolidate",
      "Out of memory: Killed process (zero_to_fp32) anon-rss:" + std::to_string(anon / 1024) + "kB: " +
          (e.api ? "get_fp32_state_dict_from_zero_checkpoint" : "zero_to_fp32.py") + " held " + format_bytes(anon) +
          " of anonymous host memory " + what + ", past the host's " + format_bytes(capacity) +
          " (emulated: --host-memory); the shell prints \"Killed\" and nothing is written");
}

// The files an earlier consolidation wrote into out_dir (its manifest's list; empty without one).
std::vector<std::string> earlier_files(const std::string& out_dir) {
  const std::string manifest = out_dir + "/" + kFp32Manifest;
  if (!std::filesystem::exists(manifest)) return {};
  const nlohmann::json j = parse_user_json(manifest, read_user_file("--zero-to-fp32", manifest, "zrepro's list of the files it wrote"));
  if (!j.is_object() || !j.value("files", nlohmann::json()).is_array())
    throw ConfigError("--zero-to-fp32 " + out_dir + ": " + manifest + " is not the list zrepro writes; give a new folder");
  std::vector<std::string> files;
  for (const auto& f : j["files"]) {
    const std::string name = f.is_string() ? f.get<std::string>() : "";
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
      throw ConfigError("--zero-to-fp32 " + out_dir + ": " + manifest + " lists \"" + f.dump() + "\", not a file name");
    files.push_back(name);
  }
  return files;
}

}  // namespace

std::vector<std::string> check_fp32_folder(const std::string& out_dir) {
  std::error_code ec;
  if (!std::filesystem::exists(out_dir, ec)) return {};
  if (!std::filesystem::is_directory(out_dir, ec))
    throw ConfigError("--zero-to-fp32 " + out_dir + ": a file, not a folder; give the folder the weights go into");
  const std::vector<std::string> ours = earlier_files(out_dir);
  for (const auto& e : std::filesystem::directory_iterator(out_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name != kFp32Manifest && std::find(ours.begin(), ours.end(), name) == ours.end())
      throw ConfigError("--zero-to-fp32 " + out_dir + ": holds \"" + name + "\", which no consolidation by zrepro wrote "
                        "there; give a new folder (a file zrepro did not write is never replaced)");
  }
  return ours;
}

Fp32Export zero_to_fp32(const std::string& save_dir, const std::string& out_dir, bool api, int64_t max_shard_bytes,
                        int64_t host_capacity) {
  Fp32Export e;
  e.api = api;
  e.max_shard_bytes = api ? 0 : max_shard_bytes;
  const std::optional<std::string> tag = latest_tag(save_dir);
  if (!tag || tag->empty())
    throw ConfigError("--zero-to-fp32: no " + save_dir + "/latest naming a checkpoint; it consolidates the newest "
                      "checkpoint of --save-dir");
  e.tag = *tag;
  std::cout << "Processing zero checkpoint '" << save_dir << "/" << e.tag << "'" << std::endl;
  const SavedZero s = read_saved_zero(save_dir + "/" + e.tag, "--zero-to-fp32", false);
  std::cout << "Detected checkpoint of type zero stage " << s.stage << ", world_size: " << s.world << std::endl;
  e.mapped_bytes = s.master_partition_bytes;
  e.parameters = static_cast<int64_t>(s.params.size());
  // The state dict's entries: every parameter, then the shared ones (a tied head) as aliases.
  std::vector<std::string> names;
  std::vector<torch::Tensor> tensors;
  std::vector<int64_t> bytes;
  int64_t offset = 0;
  for (const CheckpointParam& p : s.params) {
    names.push_back(p.name);
    tensors.push_back(s.master.narrow(0, offset, p.numel).view(p.shape));
    bytes.push_back(p.numel * 4);
    offset += p.numel;
  }
  e.numel = offset;
  c10::impl::GenericDict shared(c10::StringType::get(), c10::StringType::get());
  auto sp = s.model_states.find("shared_params");
  if (sp != s.model_states.end() && sp->value().isGenericDict()) shared = sp->value().toGenericDict();
  std::error_code ec;
  for (const std::string& f : check_fp32_folder(out_dir)) std::filesystem::remove(out_dir + "/" + f, ec);
  std::filesystem::create_directories(out_dir, ec);
  if (ec) throw IoError("cannot create " + out_dir + ": " + ec.message());
  // [Note: zero_to_fp32's host memory]: the API merges everything at once; the script one
  // shard at a time.
  const std::vector<Fp32Shard> shards = split_fp32_shards(bytes, api ? 0 : max_shard_bytes);
  // The manifest first, listing every file about to be written: a consolidation cut short
  // leaves files the next one knows as its own.
  std::vector<std::string> planned;
  for (size_t i = 0; i < shards.size(); ++i) planned.push_back(shard_name(i, shards.size()));
  if (shards.size() > 1) planned.push_back("pytorch_model.bin.index.json");
  write_file_atomic(out_dir + "/" + kFp32Manifest, nlohmann::json({{"written_by", "zrepro run --zero-to-fp32"},
                                                                   {"tag", e.tag}, {"files", planned}}).dump(2) + "\n");
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    // Stages 1-2: the whole flat, concatenated first, whatever the mode ([Note: zero_to_fp32's
    // host memory]); stage 3: the API's whole state dict, or the script's shard.
    const int64_t anon = zero_to_fp32_anon_bytes(s.stage, api, s.master_partition_bytes, e.numel * 4, shards[i].bytes);
    e.peak_anon_bytes = std::max(e.peak_anon_bytes, anon);
    charge(anon, host_capacity, e,
           api || s.layout.partition == DsPartitionForm::whole_model_ranges ? "merging the whole model" : "merging shard " + std::to_string(i + 1) + " of " + std::to_string(shards.size()));
    c10::impl::GenericDict sd(c10::StringType::get(), c10::TensorType::get());
    for (size_t t : shards[i].tensors) {
      sd.insert(names[t], tensors[t].clone());
      weight_map[names[t]] = shard_name(i, shards.size());
    }
    for (const auto& kv : shared)
      if (sd.contains(kv.value().toStringRef())) {
        sd.insert(kv.key().toStringRef(), sd.at(kv.value().toStringRef()));
        weight_map[kv.key().toStringRef()] = shard_name(i, shards.size());
      }
    write_pt(out_dir + "/" + shard_name(i, shards.size()), sd);
    e.files.push_back(shard_name(i, shards.size()));
  }
  if (shards.size() > 1) {
    const nlohmann::json index = {{"metadata", {{"total_size", e.numel * 4}}}, {"weight_map", weight_map}};
    write_file_atomic(out_dir + "/pytorch_model.bin.index.json", index.dump(2) + "\n");
    e.files.push_back("pytorch_model.bin.index.json");
  }
  return e;
}

}  // namespace zrepro
