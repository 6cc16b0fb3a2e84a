# Which LibTorch, CUDA runtime and NCCL zrepro links, decided in one place.
#
# [Note: one LibTorch per binary] Debian's libtorch-dev (CPU 1.13) lives in the
# system library directory, which find_library searches before the PATHS hint of
# TorchConfig.cmake: a pip LibTorch named with -DCMAKE_PREFIX_PATH or -DTorch_DIR
# would get its headers from pip and libtorch.so from Debian (two versions in one
# binary). Torch_ROOT, searched first by every find_library inside
# find_package(Torch), pins the libraries to the LibTorch whose TorchConfig.cmake
# was chosen; after the search every LibTorch library must lie under that prefix.
#
# A CUDA LibTorch brings its own CUDA runtime and NCCL (pip: site-packages/nvidia/,
# found through libtorch_cuda's RPATH). zrepro's pinned memory, copy stream and NCCL
# backend link those same files, so one process loads one libcudart and one libnccl;
# the toolkit's are used only with a CPU LibTorch (the NCCL backend must still build
# there). A CUDA runtime of another major version than LibTorch's is refused.
#
# [Note: the pip LibTorch's CMake warnings] A pip wheel's TorchConfig.cmake warns about two
# things that are not so for zrepro: "library kineto not found" (the profiler library is
# linked into the wheel's libtorch_cpu, there is no libkineto beside it: kineto_LIBRARY
# points TorchConfig at libtorch_cpu, linked anyway) and, when a CUDA toolkit is installed,
# "pytorch is not compatible with CMAKE_CUDA_ARCHITECTURES" (zrepro compiles no CUDA code;
# LibTorch's own kernels are in its libraries: said once, below). And the wheel ships its own
# libgomp.so.1, which CMake says may hide the compiler's: zrepro links the wheel's
# (ZREPRO_OPENMP_TARGET), the one LibTorch's libraries load at run time anyway.
#
# Sets: ZREPRO_TORCH_CUDA (bool), ZREPRO_CUDART_TARGET (a target or ""),
#       ZREPRO_NCCL_INCLUDE_DIR / ZREPRO_NCCL_LIBRARY (or empty), ZREPRO_OPENMP_TARGET.

# --- the LibTorch
unset(ZREPRO_TORCH_CONFIG_DIR CACHE)  # searched afresh: the prefix path may have changed since the cache was made
find_path(ZREPRO_TORCH_CONFIG_DIR TorchConfig.cmake
          PATHS ${CMAKE_PREFIX_PATH} PATH_SUFFIXES Torch cmake/Torch share/cmake/Torch NO_DEFAULT_PATH)
if(ZREPRO_TORCH_CONFIG_DIR)
  get_filename_component(zrepro_asked "${ZREPRO_TORCH_CONFIG_DIR}" REALPATH)
  if(Torch_DIR)
    get_filename_component(zrepro_cached "${Torch_DIR}" REALPATH)
    if(NOT zrepro_cached STREQUAL zrepro_asked)
      message(FATAL_ERROR "zrepro: LibTorch mix: CMAKE_PREFIX_PATH names the LibTorch at ${zrepro_asked} but this "
                          "build folder is configured for ${zrepro_cached} (Torch_DIR in its CMakeCache.txt). "
                          "Use a new build folder (scripts/cuda-build.sh builds into build-cuda/) or pass "
                          "-DTorch_DIR=${zrepro_asked}.")
    endif()
  endif()
  set(Torch_DIR ${ZREPRO_TORCH_CONFIG_DIR})
endif()
if(Torch_DIR)
  get_filename_component(Torch_ROOT "${Torch_DIR}/../../.." ABSOLUTE)
  file(GLOB zrepro_kineto "${Torch_ROOT}/lib/libkineto*")
  if(NOT zrepro_kineto AND EXISTS "${Torch_ROOT}/lib/libtorch_cpu.so")
    set(kineto_LIBRARY "${Torch_ROOT}/lib/libtorch_cpu.so" CACHE FILEPATH
        "kineto is inside libtorch_cpu ([Note: the pip LibTorch's CMake warnings])" FORCE)
  endif()
endif()
find_package(Torch REQUIRED)
if(DEFINED CMAKE_CUDA_ARCHITECTURES)
  message(STATUS "zrepro: the CMAKE_CUDA_ARCHITECTURES warning above is LibTorch's own CMake speaking; zrepro "
                 "compiles no CUDA code and LibTorch's kernels come built, so it changes nothing")
endif()
get_filename_component(zrepro_torch_prefix "${TORCH_INSTALL_PREFIX}" REALPATH)
foreach(lib ${TORCH_LIBRARY} ${C10_LIBRARY} ${C10_CUDA_LIBRARY})
  get_filename_component(real "${lib}" REALPATH)
  string(FIND "${real}" "${zrepro_torch_prefix}/" at)
  if(NOT at EQUAL 0)
    message(FATAL_ERROR "zrepro: LibTorch mix: TorchConfig.cmake is ${Torch_DIR} (prefix ${zrepro_torch_prefix}) "
                        "but ${lib} lies outside it. Remove the stale CMake cache (rm -rf the build folder) and "
                        "configure again with -DTorch_DIR=<that LibTorch>/share/cmake/Torch.")
  endif()
endforeach()
set(ZREPRO_TORCH_CUDA OFF)
if(C10_CUDA_LIBRARY)
  set(ZREPRO_TORCH_CUDA ON)
endif()

# --- the CUDA runtime and NCCL
set(ZREPRO_CUDART_TARGET "")
set(ZREPRO_NCCL_INCLUDE_DIR "")
set(ZREPRO_NCCL_LIBRARY "")
set(zrepro_cuda_where "none")
find_package(CUDAToolkit QUIET)
if(ZREPRO_TORCH_CUDA)
  # pip: torch/ sits beside nvidia/<cuXX>/ and nvidia/nccl/.
  get_filename_component(zrepro_site "${zrepro_torch_prefix}/.." ABSOLUTE)
  file(GLOB zrepro_cudart_candidates "${zrepro_site}/nvidia/cu*/lib/libcudart.so.*"
       "${zrepro_site}/nvidia/cuda_runtime/lib/libcudart.so.*")
  list(FILTER zrepro_cudart_candidates EXCLUDE REGEX "\\.a$")
  if(zrepro_cudart_candidates)
    list(GET zrepro_cudart_candidates 0 zrepro_cudart)
    get_filename_component(zrepro_cudart_dir "${zrepro_cudart}" DIRECTORY)
    get_filename_component(zrepro_cudart_inc "${zrepro_cudart_dir}/../include" ABSOLUTE)
    # The pip runtime's headers can be partial (the GPU machine's nvidia/cu13/include has
    # cuda_runtime_api.h without crt/host_defines.h): then the toolkit's, whose major
    # version is checked against the runtime's below.
    if(NOT EXISTS "${zrepro_cudart_inc}/cuda_runtime_api.h" OR NOT EXISTS "${zrepro_cudart_inc}/crt/host_defines.h")
      set(zrepro_cudart_inc ${CUDAToolkit_INCLUDE_DIRS})
    endif()
    add_library(zrepro_cudart SHARED IMPORTED)
    set_target_properties(zrepro_cudart PROPERTIES IMPORTED_LOCATION "${zrepro_cudart}"
                          INTERFACE_INCLUDE_DIRECTORIES "${zrepro_cudart_inc}")
    set(ZREPRO_CUDART_TARGET zrepro_cudart)
    set(zrepro_cuda_where "${zrepro_cudart} (LibTorch's)")
    # TorchConfig points its own interface at the toolkit's runtime and nvrtc (Caffe2's
    # public/cuda.cmake); point it at the runtime LibTorch loads, and leave nvrtc to
    # libtorch_cuda's own RPATH (zrepro does not call it).
    if(TARGET torch::cudart)
      set_property(TARGET torch::cudart PROPERTY INTERFACE_LINK_LIBRARIES zrepro_cudart)
    endif()
    if(CUDA_NVRTC_LIB)
      list(REMOVE_ITEM TORCH_LIBRARIES ${CUDA_NVRTC_LIB})
    endif()
  elseif(CUDAToolkit_FOUND)
    # A LibTorch built against a system CUDA (no pip runtime beside it).
    set(ZREPRO_CUDART_TARGET CUDA::cudart)
    set(zrepro_cuda_where "${CUDAToolkit_LIBRARY_DIR} (toolkit ${CUDAToolkit_VERSION})")
  endif()
  find_path(ZREPRO_TORCH_NCCL_INCLUDE nccl.h PATHS "${zrepro_site}/nvidia/nccl/include" NO_DEFAULT_PATH)
  find_library(ZREPRO_TORCH_NCCL_LIBRARY NAMES nccl libnccl.so.2 PATHS "${zrepro_site}/nvidia/nccl/lib" NO_DEFAULT_PATH)
  if(ZREPRO_TORCH_NCCL_INCLUDE AND ZREPRO_TORCH_NCCL_LIBRARY)
    set(ZREPRO_NCCL_INCLUDE_DIR ${ZREPRO_TORCH_NCCL_INCLUDE})
    set(ZREPRO_NCCL_LIBRARY ${ZREPRO_TORCH_NCCL_LIBRARY})
  endif()
  # Refuse two CUDA major versions in one process: the header zrepro compiles against
  # must be the runtime's major version.
  if(ZREPRO_CUDART_TARGET)
    get_target_property(zrepro_inc ${ZREPRO_CUDART_TARGET} INTERFACE_INCLUDE_DIRECTORIES)
    list(GET zrepro_inc 0 zrepro_inc0)
    file(STRINGS "${zrepro_inc0}/cuda_runtime_api.h" zrepro_cv REGEX "#define CUDART_VERSION +[0-9]+")
    string(REGEX MATCH "[0-9]+" zrepro_cv "${zrepro_cv}")
    math(EXPR zrepro_cv_major "${zrepro_cv} / 1000")
    if(zrepro_cudart MATCHES "libcudart\\.so\\.([0-9]+)" AND NOT CMAKE_MATCH_1 EQUAL zrepro_cv_major)
      message(FATAL_ERROR "zrepro: CUDA mix: LibTorch's runtime ${zrepro_cudart} is CUDA ${CMAKE_MATCH_1} but "
                          "${zrepro_inc0}/cuda_runtime_api.h is CUDA ${zrepro_cv}; install the toolkit headers "
                          "of CUDA ${CMAKE_MATCH_1} or use a LibTorch built for CUDA ${zrepro_cv_major}.")
    endif()
  endif()
elseif(CUDAToolkit_FOUND)
  # A CPU LibTorch: the toolkit's runtime (pinned memory, the copy stream) and NCCL
  # (the backend must build without a GPU).
  set(ZREPRO_CUDART_TARGET CUDA::cudart)
  set(zrepro_cuda_where "${CUDAToolkit_LIBRARY_DIR} (toolkit ${CUDAToolkit_VERSION})")
  find_path(ZREPRO_SYS_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(ZREPRO_SYS_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
  if(ZREPRO_SYS_NCCL_INCLUDE AND ZREPRO_SYS_NCCL_LIBRARY)
    set(ZREPRO_NCCL_INCLUDE_DIR ${ZREPRO_SYS_NCCL_INCLUDE})
    set(ZREPRO_NCCL_LIBRARY ${ZREPRO_SYS_NCCL_LIBRARY})
  endif()
endif()
if(ZREPRO_NCCL_INCLUDE_DIR)
  file(STRINGS "${ZREPRO_NCCL_INCLUDE_DIR}/nccl.h" zrepro_nv REGEX "#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
  string(REGEX MATCHALL "[0-9]+" zrepro_nv "${zrepro_nv}")
  string(REPLACE ";" "." zrepro_nv "${zrepro_nv}")
  set(zrepro_nccl_where "${ZREPRO_NCCL_LIBRARY} (${zrepro_nv})")
else()
  set(zrepro_nccl_where "none")
endif()
# --- OpenMP: the wheel's libgomp where it ships one ([Note: the pip LibTorch's CMake warnings]).
find_package(OpenMP REQUIRED)
set(ZREPRO_OPENMP_TARGET OpenMP::OpenMP_CXX)
if(EXISTS "${zrepro_torch_prefix}/lib/libgomp.so.1")
  add_library(zrepro_openmp INTERFACE)
  target_compile_options(zrepro_openmp INTERFACE ${OpenMP_CXX_FLAGS})
  target_link_libraries(zrepro_openmp INTERFACE "${zrepro_torch_prefix}/lib/libgomp.so.1")
  set(ZREPRO_OPENMP_TARGET zrepro_openmp)
endif()

message(STATUS "zrepro: LibTorch ${Torch_VERSION} at ${zrepro_torch_prefix} (${TORCH_LIBRARY}), "
               "CUDA: ${ZREPRO_TORCH_CUDA}")
message(STATUS "zrepro: CUDA runtime: ${zrepro_cuda_where}")
message(STATUS "zrepro: NCCL: ${zrepro_nccl_where}")
