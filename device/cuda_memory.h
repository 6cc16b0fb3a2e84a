// CUDA device memory as LibTorch's caching allocator sees it: the capacity of a run
// set through the allocator's memory fraction (so an over-capacity allocation fails
// with PyTorch's own OOM), and its allocated / reserved figures and peaks for the
// summary. Needs a CUDA build of LibTorch (ZREPRO_TORCH_CUDA); without it
// cuda_memory_supported() is false and the setters throw ConfigError (messages
// name no flag: the caller adds which option gave the value).
#pragma once
#include <cstdint>

#include <c10/core/Device.h>

#include "device/device_memory.h"

namespace zrepro {

bool cuda_memory_supported();
// CUDA initialised in LibTorch for `device` (-1: the current one): its context and
// caching allocator. Before it, the allocator refuses statistics and a memory fraction
// ("Allocator not initialized for device") and LibTorch reports no host pointer as
// pinned (Tensor::is_pinned is false for cudaHostAlloc memory). No-op without a CUDA
// LibTorch.
void cuda_init(int device);
// Limits device `device` to `bytes` (fraction = bytes / total memory).
void cuda_set_capacity(int device, int64_t bytes);
// allocated / peak / reserved / peak_reserved / capacity; categories are not tracked
// on CUDA (the caller fills the ones the engine knows).
MemorySnapshot cuda_memory_snapshot(int device);

// [Note: phase peaks] on CUDA: the caching allocator keeps one peak since its last
// reset, so at each phase boundary the peak so far is credited to the phase that ends
// and the allocator's peak is reset; the run's overall peak is the maximum of those.
// Only the watched thread's phase changes count (a virtual-rank run has one rank on the
// GPU). cuda_watch_phases: from now on, device `device`, phases of ledger `owner`.
void cuda_watch_phases(int device, int owner);
// Called by DeviceMemory::set_phase on every phase change (a no-op unless watched).
void cuda_phase_changed(Phase from, Phase to, int owner);

// The run's device memory now: the tracking allocator on the CPU-emulated device, the
// caching allocator's statistics on CUDA.
MemorySnapshot device_memory_snapshot(const c10::Device& device);

}  // namespace zrepro
