#!/bin/bash
# Managed by Ansible (role sglang): builds a wheel aside, never touches the venv.
# Inputs (environment): SGLK_PYTHON, SGLK_SRC, SGLK_WORK, optional SGLK_CUDA_ENV and SGLK_CONFIG_ID,
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
