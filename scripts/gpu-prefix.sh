# Sourced by scripts/gpu-check.sh: unpacks .gpu-bundle/debs (scripts/gpu-bundle.sh)
# into a private prefix, never into /, and exports what the build and the runs need to
# find it there: CMAKE_PREFIX_PATH (cxxopts, nlohmann-json, GoogleTest, MPI's wrapper),
# PATH (mpicxx, mpirun), LD_LIBRARY_PATH (OpenMPI and what it loads) and OpenMPI's and
# PMIx's relocation variables (they were built for /usr).
# A bundled library whose soname the machine already has is dropped: the machine's
# own copy serves (it was built for that system), the bundle only fills gaps.
# Does nothing when the machine has OpenMPI's mpicxx and cxxopts already (a Debian
# machine after scripts/setup.sh) unless ZREPRO_GPU_PREFIX_FORCE=1.
# Env: ZREPRO_BUNDLE_DIR (default .gpu-bundle), ZREPRO_GPU_PREFIX (default /tmp/zrepro-prefix).
gpu_prefix_setup() {
  local bundle=${ZREPRO_BUNDLE_DIR:-.gpu-bundle} pfx=${ZREPRO_GPU_PREFIX:-/tmp/zrepro-prefix}
  if [ -z "${ZREPRO_GPU_PREFIX_FORCE:-}" ] && command -v mpicxx >/dev/null && [ -f /usr/include/cxxopts.hpp ]; then
    echo "[gpu-prefix] the machine has OpenMPI and cxxopts: no prefix"
    return 0
  fi
  if ! ls "$bundle"/debs/*.deb >/dev/null 2>&1; then
    echo "[gpu-prefix] error: no $bundle/debs/*.deb: run scripts/gpu-bundle.sh on a Debian machine and carry $bundle" >&2
    return 2
  fi
  rm -rf "$pfx" && mkdir -p "$pfx"
  local f
  for f in "$bundle"/debs/*.deb; do dpkg-deb -x "$f" "$pfx" || { echo "[gpu-prefix] error: cannot unpack $f" >&2; return 2; }; done
  local arch=x86_64-linux-gnu usr=$pfx/usr
  local lib=$usr/lib/$arch
  # Debian's alternatives would make these links; there is no dpkg state in a prefix.
  ln -sf orterun "$usr/bin/mpirun"; ln -sf orterun "$usr/bin/mpiexec"
  ln -sf opal_wrapper "$usr/bin/mpicxx"; ln -sf opal_wrapper "$usr/bin/mpic++"; ln -sf opal_wrapper "$usr/bin/mpicc"
  ldconfig -n "$usr/lib/libpsm1" 2>/dev/null || true
  # The machine's own copy wins: drop ours where its loader cache has the soname.
  local have dropped=()
  have=$(ldconfig -p 2>/dev/null | awk '{print $1}')
  for f in "$lib"/*.so.* "$pfx/lib/$arch"/*.so.*; do
    [ -e "$f" ] || continue
    local name=${f##*/}
    case "$name" in libmpi*|libopen-*|libmca_*|libompitrace*|liboshmem*) continue ;; esac  # ours, always
    if grep -qx "$name" <<< "$have"; then rm -f "$f"; dropped+=("$name"); fi
  done
  [ ${#dropped[@]} -gt 0 ] && echo "[gpu-prefix] the machine's own: ${dropped[*]}"
  export CMAKE_PREFIX_PATH="$usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export PATH="$usr/bin:$PATH"
  export LD_LIBRARY_PATH="$lib:$pfx/lib/$arch:$lib/openmpi/lib:$usr/lib/libpsm1${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export OPAL_PREFIX=$usr OPAL_LIBDIR=$lib/openmpi/lib OPAL_PKGDATADIR=$usr/share/openmpi
  export OPAL_SYSCONFDIR=$pfx/etc/openmpi OPAL_INCLUDEDIR=$lib/openmpi/include
  # FindMPI reads mpi.h's folder off the wrapper's output, which a warning on stderr can spoil
  # (opal_wrapper's "unable to find network interfaces" on a machine without one): name it.
  export ZREPRO_CMAKE_ARGS="-DMPI_CXX_HEADER_DIR=$lib/openmpi/include${ZREPRO_CMAKE_ARGS:+ $ZREPRO_CMAKE_ARGS}"
  export PMIX_PREFIX=$lib/pmix2 PMIX_MCA_pcompress_base_silence_warning=1
  # One node: shared memory between ranks; no UCX or libfabric probing for networks.
  export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_mtl=^psm,ofi
  echo "[gpu-prefix] $pfx: OpenMPI $(ompi_info --version 2>/dev/null | head -1 | awk '{print $NF}'), cxxopts, nlohmann-json, GoogleTest"
}
