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
// Limits device `device` to `bytes` (fraction = bytes / total memory).
void cuda_set_capacity(int device, int64_t bytes);
// allocated / peak / reserved / peak_reserved / capacity; categories are not tracked
// on CUDA (the caller fills the ones the engine knows).
MemorySnapshot cuda_memory_snapshot(int device);

// The run's device memory now: the tracking allocator on the CPU-emulated device, the
// caching allocator's statistics on CUDA.
MemorySnapshot device_memory_snapshot(const c10::Device& device);

}  // namespace zrepro
