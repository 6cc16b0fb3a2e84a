// See ds_checkpoint.h.
#include "trainer/checkpoint/ds_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "device/base/errors.h"
#include "device/device_memory.h"
#include "trainer/checkpoint/ds_layout.h"
#include "trainer/checkpoint/host_bytes.h"
#include "trainer/checkpoint/pt_file.h"
#include "trainer/checkpoint/universal.h"
#include "trainer/config/user_file.h"
#include "zero/lr_schedule.h"
#include "zero/schedule/partition.h"

namespace zrepro {

namespace {

using c10::IValue;
using json = nlohmann::json;

// The release whose layout the files follow (docs/lab/DEEPSPEED_CHECKPOINTS.md).
constexpr const char* kLayoutVersion = "0.19.8";

std::string tag_of(int64_t step) { return "global_step" + std::to_string(step); }

std::string optim_states_name(const DsConfig& cfg, int rank) {
  return optim_states_file(rank, cfg.precision == Precision::bf16);
}

IValue json_to_ivalue(const json& j) {
  if (j.is_object()) {
    c10::impl::GenericDict d = str_dict();
    for (auto it = j.begin(); it != j.end(); ++it) d.insert(it.key(), json_to_ivalue(it.value()));
    return d;
  }
  if (j.is_array()) {
    c10::impl::GenericList l(c10::AnyType::get());
    for (const auto& v : j) l.push_back(json_to_ivalue(v));
    return l;
  }
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_integer()) return j.get<int64_t>();
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) return j.get<std::string>();
  return IValue();
}

// DeepSpeed's loss scaler object: LossScaler (static: fp32, bf16, a fixed fp16 scale) or
// DynamicLossScaler with the state its update_scale keeps.
IValue loss_scaler_object(const DsConfig& cfg, const LossScaler::State& s) {
  const bool dynamic = cfg.precision == Precision::fp16 && cfg.fp16.loss_scale == 0;
  if (!dynamic)
    return python_object("deepspeed.runtime.fp16.loss_scaler.LossScaler", {{"cur_scale", s.scale}, {"dynamic", false}});
  return python_object("deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler",
                       {{"cur_scale", s.scale},
                        {"cur_iter", s.cur_iter},
                        {"last_overflow_iter", s.last_overflow_iter},
                        {"scale_factor", 2.0},
                        {"scale_window", cfg.fp16.loss_scale_window},
                        {"min_scale", cfg.fp16.min_loss_scale},
                        {"delayed_shift", static_cast<int64_t>(cfg.fp16.hysteresis)},
                        {"cur_hysteresis", static_cast<int64_t>(s.cur_hysteresis)},
                        {"consecutive_hysteresis", cfg.fp16.consecutive_hysteresis},
                        {"raise_error_at_min_scale", true},
                        {"dynamic", true},
                        {"dtype", IValue()}});
}

// The lr of the step after lr_iteration (the schedule's, or the optimizer's without one).
double scheduled_lr(const DsConfig& cfg, int64_t lr_iteration) {
  return LrSchedule(cfg.scheduler, cfg.optimizer.lr).lr_at(lr_iteration);
}

// The state_dict of the optimizer DeepSpeed builds for the config's Adam / AdamW, for one
// flat "parameter" (the rank's partition): FusedAdam's (DeepSpeedCPUAdam's under
// offload_optimizer, which adds amsgrad). load_checkpoint replaces the live param group
// with this one, so its keys are that class's (read from files DeepSpeed 0.19.8 wrote), and
// its lr is the one the next step runs at: the schedule's, which its step() wrote into the
// group (DeepSpeed's scheduler state holds only where the schedule is, not the lr).
IValue ds_adam_state(const DsConfig& cfg, int64_t steps, int64_t lr_iteration, const torch::Tensor& m,
                     const torch::Tensor& v) {
  c10::impl::GenericDict entry = str_dict();
  entry.insert("step", steps);
  entry.insert("exp_avg", m);
  entry.insert("exp_avg_sq", v);
  c10::impl::GenericDict state(c10::IntType::get(), c10::AnyType::get());
  state.insert(int64_t{0}, entry);
  const OptimizerConfig& o = cfg.optimizer;
  c10::impl::GenericDict group = str_dict();
  group.insert("lr", scheduled_lr(cfg, lr_iteration));
  group.insert("bias_correction", o.bias_correction);
  group.insert("betas", c10::ivalue::Tuple::create({o.beta1, o.beta2}));
  group.insert("eps", o.eps);
  group.insert("weight_decay", o.weight_decay);
  if (cfg.zero.offload_optimizer.device != "none") group.insert("amsgrad", false);
  group.insert("step", int64_t{0});
  group.insert("params", c10::List<int64_t>({0}));
  c10::impl::GenericList groups(c10::AnyType::get());
  groups.push_back(group);
  c10::impl::GenericDict sd = str_dict();
  sd.insert("state", state);
  sd.insert("param_groups", groups);
  return sd;
}

// The whole model's flat fp32 values of one optimizer tensor (which: 0 master, 1 exp_avg,
// 2 exp_avg_sq), in host memory: every layer's owned pieces all-gathered (stages 1-2) or
// this rank's own shards back to back (stage 3, which is DeepSpeed's partition already).
torch::Tensor model_flat(ZeroEngine& engine, int which, bool gather) {
  Communicator& comm = engine.comm();
  const int world = comm.world_size();
  std::vector<torch::Tensor> parts;
  for (ParamGroup* g : engine.groups()) {
    const OptimizerTensors t = engine.optimizer_tensors(g->index());
    const torch::Tensor& owned = which == 0 ? t.master : which == 1 ? t.exp_avg : t.exp_avg_sq;
    DeviceMemory::HostScope host;  // the checkpoint's copies live in host memory, as torch.save's
    torch::Tensor mine = owned.to(torch::kCPU, torch::kFloat).contiguous();
    if (!gather) {
      parts.push_back(mine);
      continue;
    }
    torch::Tensor all = torch::empty({world, mine.numel()}, mine.options());
    comm.all_gather_wait(all.view({-1}), mine, "checkpoint " + g->name());
    parts.push_back(natural_from_owned(g->layout(), all));
  }
  DeviceMemory::HostScope host;
  return torch::cat(parts);
}

// The parameters' fragments in this rank's stage 1-2 partition, as DeepSpeed records them
// (param_slice_mappings: name -> fragment_address(numel, start within the partition)), which
// ds_to_universal.py cuts the partition by.
c10::impl::GenericDict slice_mappings(const ModelSpec& spec, const std::vector<int64_t>& numels,
                                      const FlatPartition& whole, int rank) {
  const std::vector<CheckpointParam> params = checkpoint_params(spec);
  c10::impl::GenericDict out(c10::StringType::get(), c10::AnyType::get());
  for (const ParamSegment& seg : partition_segments(numels, whole, rank))
    out.insert(params[seg.param].name, python_object("deepspeed.utils.tensor_fragment.fragment_address",
                                                     {{"numel", seg.numel}, {"start", seg.partition_offset}}));
  return out;
}

c10::impl::GenericDict optim_states(ZeroEngine& engine, const ModelSpec& spec, const DsConfig& cfg) {
  const int stage = static_cast<int>(cfg.zero.stage), world = engine.comm().world_size(), rank = engine.comm().rank();
  const CheckpointLayout layout = checkpoint_layout(stage, world);
  const ZeroEngine::Counters c = engine.counters();
  std::vector<int64_t> numels;
  for (const auto& p : checkpoint_params(spec)) numels.push_back(p.numel);
  c10::impl::GenericDict sd = str_dict();
  sd.insert("loss_scaler", loss_scaler_object(cfg, c.scaler));
  sd.insert("dynamic_loss_scale", cfg.precision == Precision::fp16 && cfg.fp16.loss_scale == 0);
  sd.insert("overflow", false);
  if (layout.partition == DsPartitionForm::parameter_slices) {
    // DeepSpeed's partition is this rank's shards back to back: nothing moves between ranks.
    const torch::Tensor master = model_flat(engine, 0, false), m = model_flat(engine, 1, false),
                        v = model_flat(engine, 2, false);
    sd.insert("zero_stage", int64_t{stage});
    sd.insert("partition_count", int64_t{world});
    sd.insert(layout.torch_optimizer_key, ds_adam_state(cfg, c.adam_steps, c.lr_iteration, m, v));
    sd.insert(layout.fp32_partitions_key, c10::List<torch::Tensor>({master}));
    return sd;
  }
  const torch::Tensor master = model_flat(engine, 0, true), m = model_flat(engine, 1, true),
                      v = model_flat(engine, 2, true);
  DeviceMemory::HostScope host;
  const torch::Tensor mine = ds_partition(master, numels, layout, rank, false);
  const FlatPartition whole = partition_flat(master.numel(), world);
  sd.insert("clip_grad", cfg.gradient_clipping);
  sd.insert(layout.torch_optimizer_key, ds_adam_state(cfg, c.adam_steps, c.lr_iteration, ds_partition(m, numels, layout, rank, true),
                                                         ds_partition(v, numels, layout, rank, true)));
  sd.insert(layout.fp32_partitions_key, c10::List<torch::Tensor>({mine}));
  c10::impl::GenericList mappings(c10::AnyType::get());
  mappings.push_back(slice_mappings(spec, numels, whole, rank));
  sd.insert("param_slice_mappings", mappings);
  sd.insert("zero_stage", int64_t{stage});
  sd.insert("group_paddings", c10::List<int64_t>({whole.partition_numel - mine.numel()}));
  sd.insert("partition_count", c10::List<int64_t>({world}));
  sd.insert("ds_version", std::string(kLayoutVersion));
  return sd;
}

// What DeepSpeed saves as "lr_scheduler": None without one (or a Trainer schedule the
// Trainer steps itself), its own scheduler's last_batch_iteration, or the state_dict of the
// Trainer's LambdaLR handed to it ([Note: the Trainer's schedule], zero_config.h).
IValue lr_scheduler_state(const DsConfig& cfg, ZeroEngine& engine) {
  const SchedulerConfig& sc = cfg.scheduler;
  if (sc.type.empty() || (sc.trainer && !sc.in_deepspeed_state)) return IValue();
  const int64_t it = engine.counters().lr_iteration;
  c10::impl::GenericDict lr = str_dict();
  if (!sc.trainer) {
    lr.insert("last_batch_iteration", it);
    return lr;
  }
  auto one = [](double v) {
    c10::impl::GenericList l(c10::FloatType::get());
    l.push_back(v);
    return l;
  };
  lr.insert("base_lrs", one(cfg.optimizer.lr));
  lr.insert("last_epoch", it + 1);
  lr.insert("_step_count", it + 2);
  lr.insert("_is_initial", false);
  lr.insert("_get_lr_called_within_step", false);
  lr.insert("_last_lr", one(scheduled_lr(cfg, it)));
  c10::impl::GenericList lambdas(c10::AnyType::get());
  lambdas.push_back(str_dict());  // a functools.partial's __dict__
  lr.insert("lr_lambdas", lambdas);
  return lr;
}

c10::impl::GenericDict model_states(ZeroEngine& engine, const ModelSpec& spec, const DsConfig& cfg,
                                    const CheckpointMeta& meta) {
  const CheckpointLayout layout = checkpoint_layout(static_cast<int>(cfg.zero.stage), engine.comm().world_size());
  const std::vector<CheckpointParam> params = checkpoint_params(spec);
  // module: the 16-bit parameters (stage 3: DeepSpeed's partitioned parameters are [0]).
  c10::impl::GenericDict module(c10::StringType::get(), c10::TensorType::get());
  c10::impl::GenericDict shapes(c10::StringType::get(), c10::ListType::ofInts());
  {
    DeviceMemory::HostScope host;
    std::vector<std::vector<torch::Tensor>> values;
    for (ParamGroup* g : engine.groups()) values.push_back(layout.module_holds_values ? g->params() : std::vector<torch::Tensor>());
    std::vector<size_t> next(values.size(), 0);
    for (const CheckpointParam& p : params) {
      const torch::Tensor v = layout.module_holds_values
                                  ? values[p.group][next[p.group]++].detach().to(torch::kCPU).clone()
                                  : torch::empty({0}, torch::TensorOptions().dtype(engine.groups()[p.group]->owned_params().scalar_type()));
      module.insert(p.name, v);
      shapes.insert(p.name, c10::List<int64_t>(p.shape));
      if (p.name == "model.embed_tokens.weight" && spec.tied) module.insert(tied_head_name(spec), v);
    }
  }
  c10::impl::GenericDict sd = str_dict();
  sd.insert("module", module);
  sd.insert("buffer_names", c10::List<std::string>());
  sd.insert("optimizer", IValue());
  c10::impl::GenericList shape_groups(c10::AnyType::get());
  shape_groups.push_back(shapes);
  sd.insert("param_shapes", shape_groups);
  // Stage 1 saves no frozen-parameter entries (DeepSpeed: only when gradients are partitioned).
  auto empty = [] { return c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get()); };
  sd.insert("frozen_param_shapes", layout.frozen_param_entries ? IValue(empty()) : IValue());
  c10::impl::GenericDict shared(c10::StringType::get(), c10::StringType::get());
  if (spec.tied) shared.insert(tied_head_name(spec), std::string("model.embed_tokens.weight"));
  sd.insert("shared_params", shared);
  sd.insert("frozen_param_fragments", layout.frozen_param_entries ? IValue(empty()) : IValue());
  sd.insert("lr_scheduler", lr_scheduler_state(cfg, engine));
  sd.insert("data_sampler", IValue());
  sd.insert("random_ltd", IValue());
  sd.insert("skipped_steps", meta.skipped_steps);
  sd.insert("global_steps", meta.global_steps);
  sd.insert("global_samples", meta.global_samples);
  sd.insert("dp_world_size", int64_t{engine.comm().world_size()});
  sd.insert("mp_world_size", int64_t{1});
  c10::impl::GenericDict dims = str_dict();
  dims.insert("pp_degree", int64_t{1});
  dims.insert("tp_degree", int64_t{1});
  sd.insert("checkpoint_parallel_dimensions", dims);
  sd.insert("ds_config", json_to_ivalue(cfg.resolved_json()));
  sd.insert("ds_version", std::string(kLayoutVersion));
  return sd;
}

void barrier(Communicator& comm, const std::string& label) {
  DeviceMemory::HostScope host;
  torch::Tensor t = torch::zeros({1});
  comm.all_reduce_wait(t, label);
}

}  // namespace

void check_checkpointable(const DsConfig& cfg, const std::string& flag, bool stand_in_peers) {
  if (!has_zero_checkpoint(static_cast<int>(cfg.zero.stage)))
    throw ConfigError(flag + ": zero_optimization.stage is 0: zrepro writes and reads DeepSpeed's ZeRO checkpoints "
                      "(stages 1-3); at stage 0 DeepSpeed saves the torch optimizer's own state_dict instead, which "
                      "zrepro does not write yet. Use stage 1 or above for the checkpoint runs");
  if (stand_in_peers)
    throw ConfigError(flag + ": with --peers stand-in the other ranks' optimizer states are not held here; run the "
                      "ranks (--ranks N) or virtual ranks (--world-size N) to save or resume");
}

std::string save_checkpoint(ZeroEngine& engine, const ModelSpec& spec, const DsConfig& cfg, const std::string& dir,
                            const CheckpointMeta& meta) {
  Communicator& comm = engine.comm();
  const int rank = comm.rank();
  const CheckpointLayout layout = checkpoint_layout(static_cast<int>(cfg.zero.stage), comm.world_size());
  const std::string folder = dir + "/" + tag_of(meta.global_steps);
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec) throw IoError("cannot create " + folder + ": " + ec.message());
  const c10::impl::GenericDict optim = optim_states(engine, spec, cfg);
  c10::impl::GenericDict file = str_dict();
  file.insert("optimizer_state_dict", optim);
  file.insert("ds_config", json_to_ivalue(cfg.resolved_json()));
  file.insert("ds_version", std::string(kLayoutVersion));
  {
    DeviceMemory::HostScope host;
    write_pt(folder + "/" + optim_states_name(cfg, rank), file);
    if (layout.writes_model_states(rank))
      write_pt(folder + "/" + layout.model_states_file(rank), model_states(engine, spec, cfg, meta), true);
  }
  // `latest` names the tag only once every rank's files are complete.
  barrier(comm, "checkpoint written");
  if (rank == 0) write_file_atomic(dir + "/latest", tag_of(meta.global_steps));
  barrier(comm, "checkpoint latest");
  return folder;
}

int64_t save_16bit_model(ZeroEngine& engine, const ModelSpec& spec, const DsConfig& cfg, const std::string& dir,
                         int64_t host_capacity) {
  if (!gathers_16bit_model_at_save(cfg.zero)) return 0;
  const bool keep = engine.comm().rank() == 0;
  const std::vector<CheckpointParam> params = checkpoint_params(spec);
  c10::impl::GenericDict state(c10::StringType::get(), c10::TensorType::get());
  int64_t bytes = 0;
  size_t next = 0;
  for (ParamGroup* g : engine.groups()) {
    const std::vector<torch::Tensor> values = engine.gather_layer_to_host(g->index(), keep);
    for (const torch::Tensor& v : values) {
      state.insert(params[next++].name, v);
      bytes += v.numel() * v.element_size();
    }
    if (keep && host_capacity > 0 && bytes > host_capacity)
      throw HostMemoryExhausted(
          "save", "Out of memory: Killed process (rank 0) anon-rss:" + std::to_string(bytes / 1024) + "kB: the 16-bit "
          "model gathered for pytorch_model.bin (_zero3_consolidated_16bit_state_dict, "
          "stage3_gather_16bit_weights_on_model_save) reached " + format_bytes(bytes) + " of rank 0's host memory at " +
          g->name() + ", past its " + format_bytes(host_capacity) + " (emulated: --host-memory); torchrun reports "
          "\"exitcode: -9\" and the other ranks wait in the gather");
  }
  if (keep) {
    DeviceMemory::HostScope host;
    if (spec.tied) state.insert(tied_head_name(spec), state.at("model.embed_tokens.weight"));
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw IoError("cannot create " + dir + ": " + ec.message());
    std::cout << "[deepspeed] Saving model weights to " << dir << "/pytorch_model.bin" << std::endl;
    write_pt(dir + "/pytorch_model.bin", state);
  }
  barrier(engine.comm(), "16-bit model written");
  return bytes;
}

namespace {

// What a resume reads: the tag's model-states file (checked against this run) and each
// optimizer file it needs.
struct ReadCheckpoint {
  Resumed r;
  std::vector<int64_t> numels;             // the parameters' sizes, flat order
  std::vector<torch::Tensor> master, m, v;  // per rank (stage 3: only this rank's is read)
  torch::Tensor all_master, all_m, all_v;   // the whole model's (stages 1-2); else undefined
  std::vector<CheckpointParam> params;       // universal: read layer by layer from r.folder's zero/
  int64_t adam_steps = 0;
  IValue scaler, lr_scheduler;
};

// The tag DIR/latest names (DIR/latest_universal under checkpoint.load_universal).
void read_tag(const std::string& dir, bool universal, Resumed& r) {
  const std::optional<std::string> tag = latest_tag(dir, universal);
  if (!tag && universal)
    throw ConfigError("--resume " + dir + ": checkpoint.load_universal is true and DeepSpeed stops: \"Invalid for "
                      "universal checkpoint: " + dir + "/latest_universal does not exist\". Convert the checkpoint "
                      "first: `zrepro checkpoint to-universal --input-folder " + dir + "/global_stepN --output-folder " +
                      dir + "/global_stepN_universal --inject-missing-state` (or DeepSpeed's ds_to_universal.py)");
  if (!tag)
    throw ConfigError("--resume " + dir + ": no " + dir + "/latest (the file DeepSpeed's save_checkpoint writes "
                      "naming the newest tag); pass the folder given to --save-dir or to save_checkpoint");
  r.tag = *tag;
  r.folder = dir + "/" + r.tag;
}

// DIR/latest, the model-states file: the world size (DeepSpeed's refusal, unless the
// checkpoint is universal: then every rank reads rank 0's file), the counters and the
// parameters, which must be this run's model's.
void read_model_states(const ModelSpec& spec, const CheckpointLayout& layout, int rank, const std::string& dir,
                       bool universal, ReadCheckpoint& out) {
  Resumed& r = out.r;
  read_tag(dir, universal, r);
  const int world = layout.world;
  const std::string mfile = r.folder + "/" + layout.model_states_file(universal ? 0 : rank);
  const std::string one_file = checkpoint_layout(1, world).model_states_file(0);  // stages 1-2's
  if (layout.per_rank_model_states && !std::filesystem::exists(mfile) && std::filesystem::exists(r.folder + "/" + one_file))
    throw ConfigError("--resume " + dir + ": " + r.tag + " was saved at ZeRO stage 1 or 2 (one " + one_file +
                      "), this run is stage 3: resume at the stage it was saved with");
  const c10::impl::GenericDict ms = read_pt(mfile).toGenericDict();
  const int64_t saved_world = dict_at(ms, "dp_world_size", mfile).toInt();
  if (saved_world != world && !universal)
    throw ConfigError("--resume " + dir + ": DeepSpeed refuses this: \"The checkpoint being loaded used a DP world "
                      "size of " + std::to_string(saved_world) + " but the current world size is " +
                      std::to_string(world) + ". Automatic adjustment of ZeRO's optimizer state partitioning with a "
                      "new world size is not currently supported.\" Resume on " + std::to_string(saved_world) +
                      " ranks, or convert the checkpoint to a universal one (`zrepro checkpoint to-universal "
                      "--input-folder " + r.folder + " --output-folder " + r.folder + "_universal "
                      "--inject-missing-state`, or DeepSpeed's ds_to_universal.py) and resume with \"checkpoint\": "
                      "{\"load_universal\": true} in the config");
  r.meta.global_steps = dict_at(ms, "global_steps", mfile).toInt();
  r.meta.skipped_steps = dict_at(ms, "skipped_steps", mfile).toInt();
  auto gs = ms.find("global_samples");
  r.meta.global_samples = gs != ms.end() && gs->value().isInt() ? gs->value().toInt() : 0;
  auto lr = ms.find("lr_scheduler");
  if (lr != ms.end() && lr->value().isGenericDict()) {
    const c10::impl::GenericDict d = lr->value().toGenericDict();
    out.lr_scheduler = d.contains("last_epoch") ? IValue(dict_at(d, "last_epoch", mfile).toInt() - 1)  // a LambdaLR
                                                : dict_at(d, "last_batch_iteration", mfile);
  }
  const std::vector<CheckpointParam> params = checkpoint_params(spec), saved = saved_params(ms, mfile);
  for (size_t i = 0; i < std::max(saved.size(), params.size()); ++i) {
    const bool same = i < saved.size() && i < params.size() && saved[i].name == params[i].name &&
                      saved[i].shape == params[i].shape;
    if (!same)
      throw ConfigError("--resume " + dir + ": the checkpoint's parameter " + std::to_string(i) + " is " +
                        (i < saved.size() ? saved[i].name : std::string("(none)")) + ", this run's model has " +
                        (i < params.size() ? params[i].name : std::string("(none)")) + " (" + spec.name +
                        "): resume with the model it was saved with");
    out.numels.push_back(params[i].numel);
  }
}

// The optimizer states: this rank's file (stage 3), every rank's (stages 1-2: the ranges
// zrepro's per-layer partitions need lie in several).
void read_optimizer_states(const DsConfig& cfg, const CheckpointLayout& layout, int rank, const std::string& dir,
                           ReadCheckpoint& out) {
  const int stage = layout.stage;
  for (int q = 0; q < layout.world; ++q) {
    if (!layout.reads_optimizer_file(q, rank)) {
      out.master.emplace_back(), out.m.emplace_back(), out.v.emplace_back();
      continue;
    }
    const std::string ofile = out.r.folder + "/" + optim_states_name(cfg, q);
    if (!std::filesystem::exists(ofile))
      throw ConfigError("--resume " + dir + ": no " + ofile + " (DeepSpeed names the optimizer files with a bf16_ "
                        "prefix exactly when bf16 is enabled: resume with the precision the checkpoint was saved with)");
    const c10::impl::GenericDict osd = dict_at(read_pt(ofile).toGenericDict(), "optimizer_state_dict", ofile).toGenericDict();
    const int saved_stage = zero_stage_of(dict_at(osd, "zero_stage", ofile));
    if (saved_stage != stage)
      throw ConfigError("--resume " + dir + ": the checkpoint was saved at ZeRO stage " + std::to_string(saved_stage) +
                        ", this run is stage " + std::to_string(stage) + ": resume at the stage it was saved with");
    const RankStates rs = rank_states(osd, layout, ofile);
    out.adam_steps = adam_step_of(rs.step);
    out.master.push_back(rs.master), out.m.push_back(rs.m), out.v.push_back(rs.v);
    if (q == rank) out.scaler = dict_at(osd, "loss_scaler", ofile);
  }
}

// Into the engine, layer by layer: the owned states, then the parameters from the master;
// then the counters.
void load_into_engine(ZeroEngine& engine, const ReadCheckpoint& in) {
  const int world = engine.comm().world_size(), rank = engine.comm().rank();
  const bool whole = in.all_master.defined(), universal = in.r.universal;
  int64_t offset = 0, shard_offset = 0;
  for (ParamGroup* g : engine.groups()) {
    const LayerLayout& l = g->layout();
    const OptimizerTensors t = engine.optimizer_tensors(g->index());
    torch::Tensor nat_master;
    if (universal) {  // this layer's parameters, whole, from zero/NAME/
      std::vector<CheckpointParam> mine;
      for (const CheckpointParam& p : in.params)
        if (p.group == g->index()) mine.push_back(p);
      const std::array<torch::Tensor, 3> s = read_universal_params(in.r.folder, mine, "--resume");
      nat_master = s[0];
      t.master.copy_(owned_from_natural(l, rank, s[0]));
      t.exp_avg.copy_(owned_from_natural(l, rank, s[1]));
      t.exp_avg_sq.copy_(owned_from_natural(l, rank, s[2]));
    } else if (!whole) {  // stage 3 from its own files: this rank's DeepSpeed partition is its shards
      const int64_t n = l.owned_numel();
      t.master.copy_(in.master[rank].narrow(0, shard_offset, n));
      t.exp_avg.copy_(in.m[rank].narrow(0, shard_offset, n));
      t.exp_avg_sq.copy_(in.v[rank].narrow(0, shard_offset, n));
      shard_offset += n;
      // The layer's own shard, expanded to its full values for load_layer (this rank's slices).
      torch::Tensor gathered = torch::zeros({world, n});
      gathered[rank].copy_(t.master.to(torch::kCPU, torch::kFloat));
      nat_master = natural_from_owned(l, gathered);
    } else {
      nat_master = in.all_master.narrow(0, offset, l.numel);
      t.master.copy_(owned_from_natural(l, rank, nat_master));
      t.exp_avg.copy_(owned_from_natural(l, rank, in.all_m.narrow(0, offset, l.numel)));
      t.exp_avg_sq.copy_(owned_from_natural(l, rank, in.all_v.narrow(0, offset, l.numel)));
    }
    engine.load_layer(g->index(), nat_master);
    offset += l.numel;
  }
  ZeroEngine::Counters c = engine.counters();
  c.adam_steps = in.adam_steps;
  const IValue scale = object_attr(in.scaler, "cur_scale");
  c.scaler.scale = scale.isDouble() ? scale.toDouble() : 1.0;
  if (object_attr(in.scaler, "cur_iter").isInt()) {
    c.scaler.cur_iter = object_attr(in.scaler, "cur_iter").toInt();
    c.scaler.last_overflow_iter = object_attr(in.scaler, "last_overflow_iter").toInt();
    c.scaler.cur_hysteresis = static_cast<int>(object_attr(in.scaler, "cur_hysteresis").toInt());
  }
  c.lr_iteration = in.lr_scheduler.isInt() ? in.lr_scheduler.toInt() : in.r.meta.global_steps - 1;
  engine.restore(c);
}

}  // namespace

std::optional<std::string> latest_tag(const std::string& dir, bool universal) {
  std::ifstream latest(dir + "/" + (universal ? "latest_universal" : "latest"));
  if (!latest) return std::nullopt;
  std::string tag;
  std::getline(latest, tag);
  while (!tag.empty() && std::isspace(static_cast<unsigned char>(tag.back()))) tag.pop_back();
  return tag;
}

Resumed load_checkpoint(ZeroEngine& engine, const ModelSpec& spec, const DsConfig& cfg, const std::string& dir) {
  Communicator& comm = engine.comm();
  const int rank = comm.rank();
  const CheckpointLayout layout = checkpoint_layout(static_cast<int>(cfg.zero.stage), comm.world_size());
  DeviceMemory::HostScope host;  // what is read sits in host memory until it is loaded
  ReadCheckpoint in;
  read_model_states(spec, layout, rank, dir, cfg.load_universal, in);
  if (cfg.load_universal) {
    in.params = checkpoint_params(spec);
    const UniversalStates u = read_universal_global(in.r.folder, in.params.front().name, "--resume " + dir);
    in.adam_steps = u.adam_steps;
    in.scaler = u.loss_scaler;
    in.r.universal = true;
  } else {
    read_optimizer_states(cfg, layout, rank, dir, in);
    if (layout.partition == DsPartitionForm::whole_model_ranges) {
      in.all_master = natural_from_ds_partitions(in.master, in.numels, layout);
      in.all_m = natural_from_ds_partitions(in.m, in.numels, layout);
      in.all_v = natural_from_ds_partitions(in.v, in.numels, layout);
    }
  }
  load_into_engine(engine, in);
  barrier(comm, "checkpoint loaded");
  return in.r;
}

}  // namespace zrepro
