// `zrepro run`'s set-up (run_state.h): ranks, the --out folder, virtual ranks, the
// options, the config and the model (or a toy scaled down from the target), the device
// and its host-memory preflight, the modelled host link and interconnect; the header.
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>

#include "device/base/errors.h"
#include "device/cuda_memory.h"
#include "offload/host_memory.h"
#include "trainer/checkpoint/ds_checkpoint.h"
#include "trainer/checkpoint/zero_to_fp32.h"
#include "trainer/app/cli.h"
#include "trainer/app/env.h"
#include "trainer/app/run_state.h"
#include "trainer/config/leaf_modules.h"
#include "trainer/config/rank_configs.h"
#include "trainer/config/user_file.h"
#include "trainer/model/data.h"
#include "trainer/model/gpt.h"
#include "trainer/planner/link_profile.h"
#include "trainer/report/gpu_fidelity.h"
#include "trainer/runtime/out_dir.h"
#include "zero/comm/mpi_communicator.h"

namespace zrepro {

using json = nlohmann::json;

// --out for this run; when it cannot be made it is forgotten (no summary can go there).
static void make_run_out_dir(RunState& s) {
  if (s.spec.out_dir.empty()) return;
  try {
    make_out_dir(s.spec.out_dir);
    if (s.speaks() && !s.out_claimed) {
      const std::vector<std::string> moved = claim_out_dir(s.spec.out_dir);
      s.out_claimed = true;
      if (!moved.empty())
        std::cout << "[zrepro] --out " << s.spec.out_dir << ": an earlier run's files (" << moved.size()
                  << ") moved to " << s.spec.out_dir << "/previous/\n";
    }
  } catch (const ConfigError&) {
    s.spec.out_dir.clear();
    throw;
  }
}

// A flag error found before set-up still leaves its summary in --out, if it can be made.
void make_out_dir_quietly(RunState& s) {
  try {
    make_run_out_dir(s);
  } catch (const ConfigError&) {
  }
}

static ConfigFlags flags_for(const RunSpec& spec, const ModelSpec& m, int world) {
  ConfigFlags f = spec.flags;
  f.hidden_size = m.hidden;
  f.world_size = world;
  f.total_steps = spec.train.steps;
  return f;
}

// The config and the model: as given, or a toy scaled down from the target.
static void resolve_config(RunState& s) {
  const RunSpec& spec = s.spec;
  if (spec.target_model) {
    const int target_world = spec.target_world_size.value_or(s.world);
    if (target_world != s.world)
      throw ConfigError("--target-world-size " + std::to_string(target_world) + ": this run has " +
                        std::to_string(s.world) + " rank(s); ZeRO's per-rank partitions depend on the world size, so "
                        "run the toy as that many ranks: --world-size " + std::to_string(target_world) +
                        " (one process) or --ranks " + std::to_string(target_world));
    ScaleRequest sr;
    sr.target.model = resolve_model(*spec.target_model, spec.model_overrides);
    sr.target.cfg = load_job_config(spec.config_path, flags_for(spec, sr.target.model, s.world));
    sr.target.world_size = s.world;
    sr.target.device_capacity = *spec.target_device_memory;
    sr.target.activation_checkpointing = spec.job.activation_checkpointing;
    sr.target.saves_checkpoints = spec.job.saves_checkpoints;
    if (spec.scale) sr.scale = *spec.scale;
    s.scaled = std::make_unique<ScaleDown>(scale_down(sr));
    s.scaled->limits = limits_at_target(*s.scaled, s.scaled->toy_cfg.zero.stage,
                                        {spec.train.host_memory, spec.memlock_limit, spec.train.save_every > 0,
                                         !spec.zero_to_fp32_dir.empty(), spec.zero_to_fp32_api, spec.zero_to_fp32_shard});
    if (const auto& band = gpu_band()) s.scaled->target_band = band_call(*band, band_inputs(s.scaled->target_plan)).to_json();
    s.job.model = s.scaled->toy;
    s.job.cfg = s.scaled->toy_cfg;
  } else {
    s.job.model = resolve_model(spec.model, spec.model_overrides);
    if (s.job.model.recorded)  // [Note: a recorded architecture]
      throw ConfigError("--model " + spec.model + ": a recorded architecture (" + s.job.model.model_type +
                        ") is planned, not trained: zrepro has no model of it (zrepro plan --model " + spec.model +
                        "; to reproduce a failure, run the closest family zrepro trains, e.g. a llama config.json "
                        "of the same sizes)");
    s.job.cfg = load_job_config(spec.config_path, flags_for(spec, s.job.model, s.world));
  }
  s.have_model = s.have_cfg = true;
  s.job.world_size = s.world;
  s.job.rank = s.rank;  // ranks differ at stage 2 (DeepSpeed's whole-parameter gradient partition)
  s.job.device_capacity = s.capacity();
  // The conformance networks (conformance/ds_model.py): zrepro's GPT-2 toy with an untied
  // head, Hugging Face's LlamaForCausalLM (tied or not) and a Mixtral in transformers 4.x's
  // per-expert layout (MixtralForCausalLM4x), all with eager attention.
  const ModelSpec& em = s.job.model;
  const bool exportable =
      em.attention == Attention::eager &&
      ((em.family == Family::gpt2 && !em.tied) ||
       (em.family == Family::llama && (em.model_type == "llama" || em.model_type == "mixtral")));
  if (spec.export_inputs && !exportable)
    throw ConfigError("--export-inputs: the conformance networks (conformance/ds_model.py) are the GPT-2 family with an "
                      "untied LM head, Hugging Face's LlamaForCausalLM and a 4.x-layout Mixtral, with eager attention; got " +
                      std::string(family_name(em.family)) + " (" + em.model_type + ")" + (em.tied ? ", tied" : "") + ", " +
                      attention_name(em.attention) + " (use --model tiny, small, tiny-llama or tiny-mixtral)");
  check_job(s.job);  // [Note: plan and run refuse alike]
  if (spec.train.dynamic_seq_min > s.job.model.seq)
    throw ConfigError("--dynamic-seq: got " + std::to_string(spec.train.dynamic_seq_min) + ", expected 1.." +
                      std::to_string(s.job.model.seq) + " (the model's sequence length)");
  s.topt.seq_len_dist = parse_seq_len_dist(spec.seq_len_dist, s.job.model.seq);
}

// The limits the run was given, applied once: as given, or under scale-down the toy's
// share of each ([Note: a limit the user gives is the target's], scale_down.h).
static void apply_limits(RunState& s) {
  const RunSpec& spec = s.spec;
  auto toy = [&](const char* flag, int64_t given) {
    const TargetLimit* l = s.scaled ? s.scaled->limit(flag) : nullptr;
    return l ? l->toy_limit : given;
  };
  s.topt.host_memory = toy("--host-memory", spec.train.host_memory);
  s.zero_to_fp32_shard = toy("--zero-to-fp32-shard", spec.zero_to_fp32_shard);
  if (!spec.memlock_limit) return;
  const int64_t memlock = toy("--memlock-limit", *spec.memlock_limit);
  const int64_t set = for_flag("--memlock-limit", [&] { return restrict_memlock(memlock); });
  if (!s.speaks()) return;
  std::cout << "[zrepro] memlock: ulimit -l " << set / 1024 << " KiB without CAP_IPC_LOCK (--memlock-limit"
            << (memlock != *spec.memlock_limit ? " " + format_bytes(*spec.memlock_limit) + " at target scale" : "")
            << "), as a container's non-root user\n";
  if (set < memlock)
    std::cout << "[zrepro] warning: --memlock-limit: this machine's hard limit (ulimit -Hl) is " << set / 1024
              << " KiB, below the " << memlock / 1024 << " KiB asked; the run is limited to it\n";
}

JobSpec plan_request(const RunState& s) {
  JobSpec job = s.job;
  job.emulated_caching_allocator = s.job.binds_on_reserved();  // a CUDA run's allocator is PyTorch's caching one
  job.cpu_device = true;
  return job;
}

// [Note: the emulated device lives in host memory] On the CPU-emulated device every rank's
// device bytes are this machine's RAM: a run whose planned peak (and offload buffers) for
// the ranks on this host exceeds what the host has available would be killed by the
// kernel's OOM killer part-way, with no summary (exit 137). It is refused before the
// first allocation instead: a host OOM, exit 3, with the figures.
static void preflight_host_memory(const RunState& s, int64_t cap) {
  if (!s.dev.device.is_cpu() || !s.planned) return;
  const int64_t available = meminfo_bytes("MemAvailable:");
  if (available <= 0) return;  // not Linux, or not readable: nothing to compare with
  const MemoryPlan& p = *s.planned;
  const int64_t device = cap > 0 ? std::min(p.peak_bytes, cap) : p.peak_bytes;  // a capacity stops the run there
  const int64_t per_rank = device + p.host_bytes + p.host_pinned_bytes + p.host_pageable_bytes;
  const bool stand_in = s.vranks && s.vranks->stand_in();
  const int ranks_here = stand_in ? 1 : s.vranks ? s.world : mpi_local_size();
  // Stood-in peers: their model's rows, per parameter (zero/peer_shadow.h), beside the one rank.
  const int64_t peer_model = !stand_in ? 0
                             : s.job.model.param_count() * (s.spec.peer_values == PeerValuesMode::model ? 16 : 2);
  const double need = static_cast<double>(per_rank) * ranks_here + static_cast<double>(peer_model);
  if (need <= static_cast<double>(available)) return;
  throw HostShortfall("the run would need " + format_bytes(static_cast<int64_t>(need)) + " of this host's memory (" +
                      std::to_string(ranks_here) + " rank(s) here x " + format_bytes(per_rank) +
                      ": the planned device peak" + (cap > 0 ? " up to the capacity" : "") +
                      " plus offload buffers" +
                      (peer_model ? ", and " + format_bytes(peer_model) + " for the stood-in peers' model" : "") +
                      "), and it has " + format_bytes(available) + " available (MemAvailable)");
}

// The device: the emulated one (tracking / caching allocator, capacity, memory log,
// the planner's figures for this run) or CUDA (the caching allocator's memory fraction).
static void install_device(RunState& s) {
  const RunSpec& spec = s.spec;
  s.dev = for_flag("--device " + spec.device, [&] { return select_device(spec.device, mpi_local_rank()); });
  s.topt.device = s.dev.device;
  s.job.cpu_device = s.dev.device.is_cpu();
  s.job.emulated_caching_allocator = s.job.cpu_device && spec.allocator == "caching";
  const int64_t cap = s.capacity();
  if (!s.dev.device.is_cpu()) {
    if (cap > 0) {
      for_flag("--device-memory", [&] { cuda_set_capacity(s.dev.device.index(), cap); });
      s.dev.description += ", capacity " + format_bytes(cap) + " (memory fraction)";
    }
    if (s.vranks && !s.vranks->stand_in()) {  // the other virtual ranks compute on the CPU: their bytes measured, uncapped
      DeviceMemory::instance().install(0);
      s.dev.description += "; the other " + std::to_string(s.world - 1) + " virtual ranks on the CPU (measured, no capacity)";
    }
    return;
  }
  DeviceMemory& mem = DeviceMemory::instance();
  // The caching emulation honours PyTorch's own switch for expandable segments.
  const char* conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
  const bool expandable = spec.allocator == "caching" && conf && std::strstr(conf, "expandable_segments:True");
  if (spec.allocator != "plain") mem.install(cap, spec.allocator == "caching", expandable);
  if (spec.memory_log) {
    const std::string path = *spec.memory_log + (s.world > 1 ? ".rank" + std::to_string(s.rank) : "");
    // [Note: an output never replaces an input]: a memory log zrepro wrote starts "A ", "F " or "M ".
    check_output_target("--memory-log", path, {spec.config_path.value_or(""), spec.model},
                        [](const std::string& t) { return t.size() >= 2 && t[0] != 0 && std::strchr("AFM", t[0]) && t[1] == ' '; });
    try {
      mem.log_to(path, s.vranks && !s.vranks->stand_in() ? s.rank : 0);
    } catch (const std::exception& e) {
      throw ConfigError("--memory-log: " + std::string(e.what()));
    }
  }
  s.dev.description += ", " + spec.allocator + " allocator" + (expandable ? " (expandable segments)" : "") +
                       (cap > 0 ? ", capacity " + format_bytes(cap) : "");
  s.planned = plan_memory(plan_request(s));
  preflight_host_memory(s, cap);
}

// --host-link-profile: the modelled link from a target GPU and this CPU's speed.
// [Note: the link of a scaled-down toy] The profile keeps the target's copy time per FLOP
// of compute. A scale-down toy copies s times more bytes per FLOP than its target (its
// parameters shrink by s^2, a step's tokens by s: sequence length), so its link is s times
// faster, or the toy's offload looks s times more link-bound than the target's. A
// --host-link-gbps given with --target-model models the toy's own link, as given: said so.
static void derive_host_link(RunState& s) {
  if (!s.spec.host_link_profile) {
    if (s.scaled && s.job.host_link_gbps > 0 && s.speaks())
      std::cout << "[zrepro] --host-link-gbps " << fmt(s.job.host_link_gbps) << " is the toy's modelled link, as "
                << "given: its copy-to-compute ratio is not the target's (--host-link-profile GPU derives the "
                   "target's, for the toy's scale)\n";
    return;
  }
  if (!s.dev.device.is_cpu()) throw ConfigError("--host-link-profile: only the CPU-emulated device models the link");
  const DerivedLink d = derive_link(*s.spec.host_link_profile, compute_dtype(s.job.cfg.precision, s.dev.device),
                                    s.job.cfg.micro_batch * s.job.model.seq, s.job.model.hidden, s.job.model.intermediate);
  const double per_flop = s.scaled ? s.scaled->linear : 1.0;  // [Note: the link of a scaled-down toy]
  // Every rank must model the same link: rank 0's measurement decides.
  torch::Tensor v = torch::tensor({d.link_gbps * per_flop}, torch::kDouble);
  if (!s.vranks) s.comm().broadcast_wait(v, 0, "host link profile");  // virtual: one measurement already
  s.job.host_link_gbps = v.item<double>();
  if (s.speaks())
    std::cout << "[zrepro] host link " << d.profile.name << ": target " << fmt(d.profile.link_gbps) << " GB/s for "
              << fmt(d.profile.achieved_tflops) << " achieved TFLOPS; this CPU " << fmt(d.cpu_gflops)
              << " GFLOPS -> modelled link " << fmt(s.job.host_link_gbps) << " GB/s"
              << (s.scaled ? " (x " + fmt(per_flop) + ", the scale-down's linear factor: the toy copies that many "
                             "times more bytes per FLOP than the target)" : std::string())
              << "\n";
}

// Each --inject names a rank of this world and a step of this run.
static void check_injections(const RunSpec& spec, int world) {
  for (size_t i = 0; i < spec.train.inject.size(); ++i) {
    const Injection& inj = spec.train.inject[i];
    if (inj.rank >= world)
      throw ConfigError("--inject \"" + spec.inject_specs[i] + "\": rank " + std::to_string(inj.rank) +
                        " does not exist in a world of " + std::to_string(world));
    if (inj.from >= spec.train.steps)
      throw ConfigError("--inject \"" + spec.inject_specs[i] + "\": step " + std::to_string(inj.from) +
                        " is past the run's --steps " + std::to_string(spec.train.steps) +
                        " (injection steps count from 0: the last is " + std::to_string(spec.train.steps - 1) +
                        "); it would have no effect");
  }
}

// --ranks N: the config, the model and the injections are checked once here, before
// mpirun starts N processes that would each refuse them.
void precheck_before_launch(const RunSpec& spec, int world) {
  check_ranks_fit_slots(world, spec.oversubscribe, cpu_slots());
  const ModelSpec m = resolve_model(spec.target_model.value_or(spec.model), spec.model_overrides);
  load_job_config(spec.config_path, flags_for(spec, m, world));
  check_injections(spec, world);
}

// --world-size N, or a scale-down to an N-rank target with one process: the N ranks
// run in this process (trainer/loop/virtual_ranks.h).
static void start_virtual_ranks(RunState& s) {
  const RunSpec& spec = s.spec;
  int n = spec.world_size.value_or(1);
  if (!spec.world_size && spec.target_model && s.world == 1) n = spec.target_world_size.value_or(1);
  if (n == 1 && !spec.world_size) return;
  if (s.world > 1)
    throw ConfigError("--world-size: runs every rank in one process; this one is rank " + std::to_string(s.rank) +
                      " of " + std::to_string(s.world) + " under an MPI launcher: drop --ranks (or mpirun)");
  if (spec.world_size && spec.target_world_size && *spec.target_world_size != n)
    throw ConfigError("--target-world-size " + std::to_string(*spec.target_world_size) + " and --world-size " +
                      std::to_string(n) + ": the toy runs as the target's ranks; give one");
  int subject = spec.as_rank;
  if (spec.as_rank_most) {  // the job as the planner sees it, before set-up resolves it for the run
    JobSpec j;
    j.model = resolve_model(spec.model, spec.model_overrides);
    j.cfg = load_job_config(spec.config_path, flags_for(spec, j.model, n));
    j.world_size = n;
    subject = rank_holding_most(j);
    std::cout << "[zrepro] --as-rank most: rank " << subject << " of " << n
              << " (the planner's rank holding the most: DeepSpeed's whole-parameter gradient partition)\n";
  }
  s.vranks = std::make_unique<VirtualRanks>(n, subject, spec.comm_timeout, spec.peers, spec.peer_values);
  s.rank = subject;
  s.world = n;
  if (!s.vranks->stand_in()) s.owner.emplace(s.rank);  // stood-in peers: this process's one ledger
}

// Every rank's effective config against the others': ranks that disagree (a per-rank
// config file, an edited copy on one node) issue different collectives and hang, so the
// differing keys are said at start-up and kept for the summary and the hang report.
static void compare_rank_configs(RunState& s) {
  if (s.world == 1 || s.vranks || !s.ranks->mpi) return;
  std::vector<json> per_rank;
  for (const std::string& t :
       mpi_all_gather_text(s.job.cfg.resolved_json().dump(-1, ' ', false, json::error_handler_t::replace)))
    per_rank.push_back(json::parse(t, nullptr, false));
  s.config_mismatch = config_mismatch(per_rank);
  if (s.rank == 0)
    for (const std::string& line : s.config_mismatch)
      std::cerr << "[zrepro] warning: the ranks' effective configs differ: " << line << std::endl;
}

void set_up(RunState& s, int* argc, char*** argv) {
  const RunSpec& spec = s.spec;
  s.ranks = std::make_unique<Ranks>(argc, argv, spec.device == "cuda");
  s.rank = s.comm().rank();
  s.world = s.comm().world_size();
  make_run_out_dir(s);
  start_virtual_ranks(s);
  s.topt = spec.train;  // [Note: flags parse into what the run is made of] (run_spec.h)
  s.topt.comm = &s.comm();
  s.job = spec.job;  // [Note: flags parse into what the run is made of] (run_spec.h)
  set_compute_threads(spec.threads);
  check_injections(spec, s.world);
  resolve_config(s);
  apply_limits(s);
  if (spec.train.save_every > 0) check_checkpointable(s.job.cfg, "--save-every", spec.peers == Peers::stand_in);
  if (!spec.zero_to_fp32_dir.empty()) check_fp32_folder(spec.zero_to_fp32_dir);  // [Note: the consolidation's folder]
  if (!spec.train.resume_dir.empty()) check_checkpointable(s.job.cfg, "--resume", spec.peers == Peers::stand_in);
  compare_rank_configs(s);
  if (s.world > 1 && !s.vranks && s.ranks->mpi) s.peers = gather_peers();
  install_device(s);
  derive_host_link(s);
  if (spec.interconnect_gbps > 0) {
    if (!s.dev.device.is_cpu())
      throw ConfigError("--interconnect-gbps: models the interconnect of the CPU-emulated device; a GPU run uses its own");
    if (s.vranks) s.vranks->model_busbw(spec.interconnect_gbps);
    else s.comm().model_busbw(spec.interconnect_gbps);
    if (s.speaks())
      std::cout << "[zrepro] interconnect: collectives modelled at " << fmt(spec.interconnect_gbps)
                << " GB/s bus bandwidth (--interconnect-gbps)\n";
  }
}

// How this process stands for the job's ranks: stood-in peers, virtual ranks, oversubscribed.
static void print_ranks_line(const RunState& s) {
  if (s.vranks && s.vranks->stand_in())
    std::cout << "[zrepro] stood-in peers: rank " << s.rank << " of " << s.world << " runs alone; what its "
              << s.world - 1 << " peers would send comes from the same-data rule (their gradients are its own) and "
              << "a model of their partitions, checked against its own at every gather and step "
              << "(--peers stand-in); its memory is the N-rank job's, its step time is one rank's\n";
  else if (s.vranks)
    std::cout << "[zrepro] virtual ranks: this process stands in for all " << s.world << " ranks (one thread, engine "
              << "and device-memory ledger each; collectives in-process); reporting as rank " << s.rank
              << ", data rule " << (s.spec.train.same_data ? "same" : "distinct")
              << "; memory and numerics are the N-rank job's, step times are not\n";
  if (!s.vranks && s.world > 1 && s.ranks->mpi && mpi_local_size() > cpu_slots())
    std::cout << "[zrepro] oversubscribed: " << mpi_local_size() << " ranks on " << cpu_slots()
              << " core(s) of this node share them ([Note: oversubscribed ranks]): memory and losses are exact, step "
              << "times measure the sharing\n";
}

// A scaled-down run: the target, the toy, what was scaled and the target's plan.
static void print_scale_down(const RunState& s) {
  const ModelSpec& model = s.job.model;
  if (!s.scaled) return;
  const ScaleDown& sd = *s.scaled;
  const MemoryPlan& tp = sd.target_plan;
  std::cout << "[zrepro] scale-down: target " << sd.target.name << " (" << sd.target.param_count() << " params) on "
            << s.world << " rank(s) with " << format_bytes(tp.capacity) << " -> toy " << model.param_count()
            << " params (factor " << fmt(sd.factor, 5) << ", hidden " << model.hidden << ", seq " << model.seq
            << ", vocab " << model.vocab << ") with " << format_bytes(sd.toy_capacity) << "\n[zrepro] scaled:";
  for (const auto& k : sd.scaled_keys) std::cout << " " << k << ";";
  std::cout << "\n[zrepro] planner, target: "
            << (tp.fits ? std::string("fits") : "OOM in phase " + std::string(phase_name(tp.oom_phase)))
            << " (peak " << format_bytes(tp.peak_bytes) << " per rank); fidelity (planned, at the peak):\n"
            << sd.table();
  for (const auto& l : sd.limits) std::cout << "[zrepro] " << l.line() << "\n";
  for (const auto& w : sd.warnings) std::cout << "[zrepro] warning: " << w << "\n";
  if (!sd.target_band.is_null()) std::cout << "[zrepro] planner, target: " << BandCall::from_json(sd.target_band).text() << "\n";
}

// A MoE model's experts, how ZeRO-3 fetches them and the router's aux loss.
static void print_experts(const ModelSpec& model, const DsConfig& cfg) {
  if (!model.moe()) return;
  const ExpertFetch f = expert_fetch(model, cfg.zero);
  std::cout << "[zrepro] experts: " << model.experts << " per block, " << model.experts_per_tok << " per token ("
            << model.active_param_count() << " of the params active per token); fetched " << f.why << "\n"
            << "[zrepro] router aux loss: "
            << (model.router_aux_loss ? "on, router_aux_loss_coef " + fmt(model.router_aux_loss_coef, 4) +
                                            " x the load-balancing loss of every layer's router (output_router_logits)"
                                      : std::string("off (output_router_logits false; --output-router-logits turns it "
                                                    "on, as LLaMA-Factory and axolotl do for MoE training)"))
            << "\n";
  for (const auto& u : f.unmatched)
    std::cout << "[zrepro] warning: zero_optimization.leaf_module " << u << " matches no module that holds the "
              << "experts (" << moe_block_class(model) << " at " << moe_block_module(model, 0) << ", its decoder "
              << "layer or the model); DeepSpeed warns likewise and ignores it\n";
}

// What the batches are and how they arrive: accumulation, launcher, samples, offload, loader.
static void print_inputs(const RunState& s) {
  const DsConfig& cfg = s.job.cfg;
  std::cout << "[zrepro] batch: micro " << cfg.micro_batch << " x gas " << cfg.grad_accum << " x world " << s.world
            << " = " << cfg.train_batch_size << " samples/step; data: Markov chain, a perfect model reaches "
            << fmt(MarkovData::entropy_floor(), 3) << " nats\n";
  if (const auto& acc = s.spec.flags.accelerate) {
    int autos = 0;
    for (const auto& e : cfg.entries) autos += e.source == Source::auto_;
    std::cout << "[zrepro] launcher accelerate"
              << (acc->file.empty() ? std::string(" (no --accelerate-config: its defaults)") : " (" + acc->file + ")")
              << ": " << autos << " \"auto\" value(s) filled as Accelerate's DeepSpeed plugin and prepare() do; "
              << "--print-config shows each with its source\n";
  }
  if (!s.topt.seq_len_dist.fixed() || s.topt.loss_normalization != LossNormalization::mean)
    std::cout << "[zrepro] samples: " << s.topt.seq_len_dist.spec() << " scored tokens (padded with -100); loss "
              << "normalisation " << loss_normalization_row(s.topt.loss_normalization).name << " ("
              << loss_normalization_row(s.topt.loss_normalization).transformers << ")"
              << (s.spec.loss_normalization_from.empty() ? "" : "; from " + s.spec.loss_normalization_from) << "\n";
  for (const auto& [name, o] : {std::pair<const char*, const OffloadConfig&>{"offload_optimizer", cfg.zero.offload_optimizer},
                                {"offload_param", cfg.zero.offload_param}})
    if (o.enabled())  // the form diagnose reads: DeepSpeed prints the same keys in its config dump
      std::cout << "[zrepro] " << name << "=" << o.device << " (pin_memory=" << (o.pin_memory ? "true" : "false")
                << ", buffer_count=" << o.buffer_count << ")\n";
  const LoaderOptions& l = s.topt.loader;
  if (l.workers > 0 || l.sample_ms > 0 || l.pin_memory)
    std::cout << "[zrepro] data loader: " << l.workers << " worker(s) x prefetch " << l.prefetch_factor << ", "
              << fmt(l.sample_ms) << " ms/sample preparation (emulated), pin_memory "
              << (l.pin_memory ? "true" : "false") << " (input batches only; the offload buffers follow the config)\n";
}

void print_header(RunState& s) {
  if (!s.speaks()) return;
  print_ranks_line(s);
  const DsConfig& cfg = s.job.cfg;
  const ModelSpec& model = s.job.model;
  for (const auto& w : cfg.warnings) std::cout << "[zrepro] warning: " << w << "\n";
  if (s.spec.print_config) std::cout << format_config_dump(cfg);
  print_scale_down(s);
  std::cout << "[zrepro] world_size=" << s.world << " zero_stage=" << cfg.zero.stage
            << " precision=" << precision_name(cfg.precision) << " deepspeed=" << cfg.deepspeed_version
            << " device=" << s.dev.description
            << " comm=" << s.comm().backend() << "\n"
            << "[zrepro] model " << model.name << ": " << model.param_count() << " params, " << model.layers
            << " layers, hidden " << model.hidden << ", heads " << model.heads << ", seq " << model.seq << ", vocab "
            << model.vocab << "\n"
            << "[zrepro] assumed: " << model.assumptions() << "\n";
  for (const std::string& a : cfg.assumed) std::cout << "[zrepro] assumed: " << a << "\n";
  print_experts(model, cfg);
  print_inputs(s);
  std::cout << std::flush;
}

}  // namespace zrepro
