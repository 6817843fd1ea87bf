#!/usr/bin/env bash
# Managed by Ansible (role sglang): builds a wheel aside, never touches the venv.
# Inputs (environment): SGLK_PYTHON, SGLK_SRC, SGLK_WORK, optional SGLK_CUDA_ENV, SGLK_CONFIG_ID,
# SGLK_CUDA_LIBS (the venv's nvidia/cu13 folder), SGLK_CHECK and SGLK_CHECK_ARGS (the check of
# the configured build),
# and the build knobs the role passes (MAX_JOBS, CMAKE_BUILD_PARALLEL_LEVEL, CMAKE_ARGS,
# TORCH_CUDA_ARCH_LIST, ...).
# Output: exactly one wheel in $SGLK_WORK/dist, replaced only when the build succeeds.
set -euo pipefail

: "${SGLK_PYTHON:?}" "${SGLK_SRC:?}" "${SGLK_WORK:?}"

if [ -n "${SGLK_CUDA_ENV:-}" ] && [ -r "${SGLK_CUDA_ENV}" ]; then
    # The toolchain's CUDA_HOME, PATH and LD_LIBRARY_PATH (cuda_toolkit's EnvironmentFile).
    set -a
    # shellcheck disable=SC1090
    . "${SGLK_CUDA_ENV}"
    set +a
    export PATH="${CUDA_HOME:+${CUDA_HOME}/bin:}${PATH}"
fi

# The CUDA libraries torch was built with (the venv's nvidia/cu13: cuBLAS, cuSPARSE, cuSOLVER,
# nvrtc, ...): their headers for torch's ATen/cuda headers, and unversioned link names
# (libcublas.so -> libcublas.so.13) for sgl-kernel's bare "cublas", "cublasLt", "nvrtc".
if [ -z "${SGLK_CUDA_LIBS:-}" ]; then
    SGLK_CUDA_LIBS="$("${SGLK_PYTHON}" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/nvidia/cu13"
fi
if [ -d "${SGLK_CUDA_LIBS}" ]; then
    overlay="${SGLK_WORK}/overlay/lib"
    rm -rf "${overlay}"
    mkdir -p "${overlay}"
    for lib in "${SGLK_CUDA_LIBS}"/lib/lib*.so.*; do
        [ -e "${lib}" ] || continue
        base=$(basename "${lib}")
        ln -sfn "${lib}" "${overlay}/${base%%.so.*}.so"
    done
    export CPATH="${SGLK_CUDA_LIBS}/include${CPATH:+:${CPATH}}"
    export LIBRARY_PATH="${overlay}${LIBRARY_PATH:+:${LIBRARY_PATH}}"
    # torch's CMake package looks for nvrtc only in the toolkit, which has none
    if [ -e "${overlay}/libnvrtc.so" ]; then
        export CMAKE_ARGS="${CMAKE_ARGS:-} -DCUDA_nvrtc_LIBRARY=${overlay}/libnvrtc.so"
    fi
fi
# -lcuda links against the driver stub (cuda_toolkit's lib64/stubs): there is no driver here.
if [ -n "${CUDA_HOME:-}" ] && [ -d "${CUDA_HOME}/lib64/stubs" ]; then
    export LIBRARY_PATH="${LIBRARY_PATH:+${LIBRARY_PATH}:}${CUDA_HOME}/lib64/stubs"
fi

# The configured build is checked before anything compiles: CMake hands the build to ninja, and
# this wrapper runs the check (the role's sgl_kernel_configured.py) on the generated build.ninja
# first. A command for an architecture that was not asked for stops the build there.
if [ -n "${SGLK_CHECK:-}" ]; then
    real_ninja=$(command -v ninja || command -v ninja-build || true)
    if [ -z "${real_ninja}" ] && [ -x "$(dirname "${SGLK_PYTHON}")/ninja" ]; then
        real_ninja="$(dirname "${SGLK_PYTHON}")/ninja"
    fi
    : "${real_ninja:?sgl-kernel build: ninja is not installed}"
    mkdir -p "${SGLK_WORK}/bin"
    cat > "${SGLK_WORK}/bin/ninja" <<GUARD
#!/bin/bash
# Written by build-wheel.sh: checks the configured sgl-kernel build once, then runs ninja.
if [ "\$PWD" = "${SGLK_WORK}/build" ] && [ -f build.ninja ] \
    && { [ ! -e .sglang-lxc-checked ] || [ build.ninja -nt .sglang-lxc-checked ]; }; then
    "${SGLK_PYTHON}" "${SGLK_CHECK}" --build-dir "${SGLK_WORK}/build" --record "${SGLK_WORK}/configured.json" ${SGLK_CHECK_ARGS:-} || exit 1
    touch .sglang-lxc-checked
fi
exec "${real_ninja}" "\$@"
GUARD
    chmod 0755 "${SGLK_WORK}/bin/ninja"
    export CMAKE_ARGS="${CMAKE_ARGS:-} -DCMAKE_MAKE_PROGRAM=${SGLK_WORK}/bin/ninja"
fi

echo "sgl-kernel build: MAX_JOBS=${MAX_JOBS:-?} CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-?}"
echo "sgl-kernel build: CMAKE_ARGS=${CMAKE_ARGS:-}"
echo "sgl-kernel build: nvcc: $(command -v nvcc || echo none)"

# The build tree is reused while the configuration (flags, env, toolchain) is unchanged, so a
# source change rebuilds incrementally; a configuration change starts from an empty tree, since a
# CMake cache keeps values a later configure no longer passes.
build="${SGLK_WORK}/build"
if [ "$(cat "${build}/.sglang-lxc-config" 2>/dev/null)" != "${SGLK_CONFIG_ID:-none}" ]; then
    echo "sgl-kernel build: configuration changed, starting from an empty build tree"
    rm -rf "${build}"
fi
mkdir -p "${build}"
echo "${SGLK_CONFIG_ID:-none}" > "${build}/.sglang-lxc-config"

partial="${SGLK_WORK}/dist.partial"
rm -rf "${partial}"
mkdir -p "${partial}"

"${SGLK_PYTHON}" -m pip wheel --no-deps --no-build-isolation --no-index \
    --disable-pip-version-check --no-input --progress-bar off -v \
    --config-settings=build-dir="${build}" \
    --wheel-dir "${partial}" "${SGLK_SRC}"

count=$(find "${partial}" -maxdepth 1 -name '*.whl' | wc -l)
if [ "${count}" -ne 1 ]; then
    echo "sgl-kernel build: expected one wheel in ${partial}, found ${count}" >&2
    exit 3
fi
rm -rf "${SGLK_WORK}/dist"
mv "${partial}" "${SGLK_WORK}/dist"
echo "sgl-kernel build: done: $(basename "$(find "${SGLK_WORK}/dist" -name '*.whl')")"
