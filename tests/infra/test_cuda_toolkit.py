"""Verify the CUDA toolchain (role cuda_toolkit) on a serving host, no GPU needed.

Run against your own hosts:

    pytest tests/infra/test_cuda_toolkit.py --hosts=ansible://sglang_servers \
        --ansible-inventory=inventory/example

The expected CUDA release comes from, in order: the environment variable
``SGLANG_LXC_CUDA_VERSION``, the host's inventory variable ``cuda_toolkit_version``, the role
default. The EnvironmentFile is ``SGLANG_LXC_CUDA_ENV_FILE``, else the inventory's
``sglang_lxc_cuda_env_file``, else ``/etc/sglang/cuda.env``; the profile file
``SGLANG_LXC_CUDA_PROFILE_FILE``, else ``/etc/profile.d/sglang-cuda.sh``. ``SGLANG_LXC_CUDA_SOURCE``
(``wheels`` or ``system``) overrides ``cuda_toolkit_source``.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.milestone("cuda_toolkit")

ROLE = Path(__file__).resolve().parents[2] / "roles" / "cuda_toolkit"
CCCL_HEADERS = ("cub", "thrust", "cuda", "nv")

HOST_CPP = r"""
#include <cuda/std/type_traits>
#include <cub/version.cuh>
#include <cub/util_type.cuh>
#include <thrust/device_vector.h>
static_assert(cuda::std::is_same<int, int>::value, "cuda::std");
static_assert(CUB_VERSION > 0, "cub");
int main() { thrust::device_vector<int>* v = nullptr; return v != nullptr; }
"""

# cub.cuh as a whole is device code (threadIdx, __syncthreads): a host compiler can only
# preprocess it, which proves every header it pulls in resolves with -I$CUDA_HOME/include alone.
HOST_ALL_HEADERS = """
#include <cuda/std/type_traits>
#include <cub/cub.cuh>
#include <thrust/device_vector.h>
"""

MAIN_C = r"""
#include <cuda_runtime_api.h>
int main(void) { int v = 0; cudaRuntimeGetVersion(&v); return 0; }
"""

KERNEL_CU = r"""
#include <cub/cub.cuh>
#include <cuda/std/type_traits>
#include <cstdio>
template <typename T>
__global__ void block_sum(const T* in, T* out) {
  static_assert(cuda::std::is_arithmetic<T>::value, "arithmetic");
  using BlockReduce = cub::BlockReduce<T, 128>;
  __shared__ typename BlockReduce::TempStorage tmp;
  T v = BlockReduce(tmp).Sum(in[threadIdx.x]);
  if (threadIdx.x == 0) *out = v;
}
int main() {
  float *in = nullptr, *out = nullptr;
  block_sum<float><<<1, 128>>>(in, out);
  std::printf("launch status %d\n", static_cast<int>(cudaGetLastError()));
  return 0;
}
"""


def _role_defaults() -> dict[str, Any]:
    return yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


def _inventory_vars(host) -> dict[str, Any]:
    try:
        return host.ansible.get_variables()
    except Exception:  # not the ansible backend: no inventory to read
        return {}


@pytest.fixture(scope="module")
def expected(host) -> dict[str, Any]:
    defaults = _role_defaults()
    inv = _inventory_vars(host)
    version = str(
        os.environ.get("SGLANG_LXC_CUDA_VERSION")
        or inv.get("cuda_toolkit_version")
        or defaults["cuda_toolkit_version"]
    )
    source = os.environ.get("SGLANG_LXC_CUDA_SOURCE") or inv.get("cuda_toolkit_source") or "wheels"
    releases = inv.get("cuda_toolkit_releases") or defaults["cuda_toolkit_releases"]
    overrides = inv.get("cuda_toolkit_wheel_overrides") or {}
    pins = {**releases.get(version, {}), **overrides} if source == "wheels" else {}
    readers = inv.get("cuda_toolkit_cuobjdump_versions") or defaults[
        "cuda_toolkit_cuobjdump_versions"
    ]
    if source == "wheels" and readers.get(version):
        pins["nvidia-cuda-cuobjdump"] = readers[version]
    env_file = (
        os.environ.get("SGLANG_LXC_CUDA_ENV_FILE")
        or inv.get("sglang_lxc_cuda_env_file")
        or defaults["cuda_toolkit_env_file"]
    )
    return {
        "version": version,
        "source": source,
        "pins": pins,
        "env_file": env_file,
        "profile_file": os.environ.get("SGLANG_LXC_CUDA_PROFILE_FILE")
        or defaults["cuda_toolkit_profile_file"],
        "python": inv.get("cuda_toolkit_python") or defaults["cuda_toolkit_python"],
    }


@pytest.fixture(scope="module")
def cuda_env(host, expected) -> dict[str, str]:
    env_file = host.file(expected["env_file"])
    assert env_file.exists, f"{expected['env_file']} is missing"
    values = {}
    for line in env_file.content_string.splitlines():
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


@pytest.fixture(scope="module")
def cuda_home(cuda_env) -> str:
    return cuda_env["CUDA_HOME"]


@pytest.fixture(scope="module")
def workdir(host):
    path = host.check_output("mktemp -d /tmp/cuda-toolkit-test.XXXXXX")
    yield path
    host.run(f"rm -rf {shlex.quote(path)}")


def _write(host, path: str, content: str) -> None:
    host.check_output(f"cat > {shlex.quote(path)} <<'SGLANG_LXC_EOF'\n{content}\nSGLANG_LXC_EOF")


def _with_env(expected, command: str) -> str:
    """Run ``command`` with the service environment (the EnvironmentFile), as a unit would."""
    env = shlex.quote(expected["env_file"])
    return f"bash -c {shlex.quote(f'set -a; . {env}; set +a; {command}')}"


def test_env_file_sets_cuda_home_path_and_library_path(host, cuda_env):
    assert set(cuda_env) >= {"CUDA_HOME", "PATH", "LD_LIBRARY_PATH"}
    home = cuda_env["CUDA_HOME"]
    assert host.file(home).is_directory
    assert cuda_env["PATH"].split(":")[0] == f"{home}/bin"
    assert f"{home}/lib" in cuda_env["LD_LIBRARY_PATH"].split(":")


def test_login_shell_sees_the_same_toolkit(host, cuda_home, expected):
    profile = expected["profile_file"]
    probe = "echo $CUDA_HOME; command -v nvcc"
    if profile.startswith("/etc/profile.d/"):  # what a login shell reads
        command = f"bash -lc {shlex.quote(probe)}"
    else:
        command = f"bash -c {shlex.quote(f'. {shlex.quote(profile)}; {probe}')}"
    out = host.check_output(command).splitlines()
    assert out[0] == cuda_home
    assert out[1] == f"{cuda_home}/bin/nvcc"


@pytest.mark.parametrize("name", CCCL_HEADERS)
def test_cccl_folder_visible_under_include(host, cuda_home, name):
    assert host.file(f"{cuda_home}/include/{name}").is_directory
    real = host.check_output(f"readlink -f {cuda_home}/include/{name}")
    cccl = host.check_output(f"readlink -f {cuda_home}/include/cccl/{name}")
    if real != cccl:  # a folder the wheel ships itself must hold the same files
        host.check_output(f"diff -r {cuda_home}/include/{name} {cuda_home}/include/cccl/{name}")


def test_unversioned_libraries_and_lib64(host, cuda_home):
    libcudart = host.file(f"{cuda_home}/lib64/libcudart.so")
    assert libcudart.exists
    assert re.search(r"libcudart\.so\.13", host.check_output(f"readlink -f {libcudart.path}"))
    lib_dir = host.check_output(f"readlink -f {cuda_home}/lib64")
    for versioned in host.check_output(f"ls {lib_dir}").split():
        match = re.match(r"^(lib.+\.so)\.[0-9.]+$", versioned)
        if match:
            assert host.file(f"{lib_dir}/{match.group(1)}").exists, f"{match.group(1)} missing"


def test_no_dangling_links(host, cuda_home, expected):
    # wheels: <prefix>/current/nvidia/cu13, so the whole prefix; system: the toolkit root
    root = str(Path(cuda_home).parents[2]) if expected["source"] == "wheels" else cuda_home
    dangling = host.check_output(f"find {shlex.quote(root)} -xtype l")
    assert dangling == "", f"dangling links under {root}: {dangling}"


def test_one_release_behind_current(host, cuda_home, expected):
    if expected["source"] != "wheels":
        pytest.skip("system toolkit")
    current = host.file(str(Path(cuda_home).parents[1]))
    assert current.is_symlink
    entries = host.check_output(f"ls -1A {shlex.quote(str(Path(current.path).parent))}").split()
    assert sorted(entries) == sorted(["current", Path(current.linked_to).name])


def test_installed_wheels_are_the_pins(host, cuda_home, expected):
    if expected["source"] != "wheels":
        pytest.skip("system toolkit")
    release = host.check_output(f"readlink -f {cuda_home}/../..")
    for name, version in expected["pins"].items():
        dist = f"{release}/{name.replace('-', '_')}-{version}.dist-info"
        assert host.file(dist).is_directory, f"{name}=={version} is not installed in {release}"


def test_host_compiler_finds_cccl_with_only_the_include_dir(host, cuda_home, workdir):
    _write(host, f"{workdir}/host.cpp", HOST_CPP)
    _write(host, f"{workdir}/all_headers.cpp", HOST_ALL_HEADERS)
    inc = f"-I{cuda_home}/include"
    host.check_output(f"c++ -std=c++17 {inc} -c {workdir}/host.cpp -o {workdir}/host.o")
    host.check_output(f"c++ -std=c++17 {inc} -E {workdir}/all_headers.cpp -o /dev/null")


def test_cc_links_against_cudart_from_lib64(host, expected, workdir):
    _write(host, f"{workdir}/main.c", MAIN_C)
    host.check_output(
        _with_env(
            expected,
            f'cc {workdir}/main.c -I"$CUDA_HOME/include" -L"$CUDA_HOME/lib64" -lcudart '
            f"-o {workdir}/main && ldd {workdir}/main | grep -q 'libcudart.so.13 => /'",
        )
    )


NVCC_ARCHS = ("sm_120", "sm_120a")


@pytest.fixture(scope="module", autouse=True)
def nvcc_builds(host, expected, workdir):
    """Start the nvcc build at the module's start, in the background: it takes most of this
    module's time, and the other checks run meanwhile. One nvcc run builds device code for every
    arch (the host side, cub's headers included, is compiled once); --keep leaves one cubin per
    arch, which shows that ptxas produced code for each."""
    _write(host, f"{workdir}/kernel.cu", KERNEL_CU)
    gencode = " ".join(f"-gencode arch=compute_{a[3:]},code={a}" for a in NVCC_ARCHS)
    build = _with_env(expected, f"mkdir -p {workdir}/keep && nvcc {gencode} --keep "
                                f"--keep-dir {workdir}/keep {workdir}/kernel.cu "
                                f"-o {workdir}/kernel")
    script = f"{build} > {workdir}/nvcc.log 2>&1; echo $? > {workdir}/nvcc.rc"
    host.check_output(f"nohup sh -c {shlex.quote(script)} > /dev/null 2>&1 &")
    return workdir


def test_nvcc_compiles_and_links_a_cub_kernel(host, expected, nvcc_builds):
    workdir = nvcc_builds
    rc = host.run(f"timeout 600 sh -c 'while [ ! -s {workdir}/nvcc.rc ]; do sleep 0.2; "
                  f"done'; cat {workdir}/nvcc.rc {workdir}/nvcc.log")
    assert rc.stdout.startswith("0\n"), rc.stdout + rc.stderr
    cubins = host.check_output(f"cd {workdir}/keep && ls *.cubin").split()
    for arch in NVCC_ARCHS:
        assert f"kernel.compute_{arch[3:]}.cubin" in cubins, cubins  # nvcc names it so
    # Without a GPU the launch fails at run time, but the program loads and runs.
    assert "launch status" in host.check_output(_with_env(expected, f"{workdir}/kernel"))


def test_cuobjdump_lists_the_cubins_nvcc_built(host, expected, nvcc_builds):
    """The reader role sglang's kernel check uses (nvidia-cuda-cuobjdump's wheel)."""
    if "nvidia-cuda-cuobjdump" not in expected["pins"]:
        pytest.skip("no cuobjdump wheel for this release")
    workdir = nvcc_builds
    host.run(f"timeout 600 sh -c 'while [ ! -s {workdir}/nvcc.rc ]; do sleep 0.2; done'")
    out = host.check_output(_with_env(expected, f"cuobjdump --list-elf {workdir}/kernel"))
    assert {line.rsplit(".", 2)[-2] for line in out.splitlines() if "cubin" in line} == set(
        NVCC_ARCHS
    ), out


def test_nvcc_reports_the_pinned_version(host, expected):
    out = host.check_output(_with_env(expected, "nvcc --version"))
    assert f"release {expected['version']}," in out
    if expected["pins"]:
        assert f"V{expected['pins']['nvidia-cuda-nvcc']}" in out


def test_python_headers_of_the_serving_interpreter(host, expected):
    """torch cpp_extension, Triton's launcher and sgl-kernel's CMake compile against Python.h."""
    python = expected["python"]
    path = host.check_output(
        f"{python} -c \"import sysconfig; print(sysconfig.get_paths()['include'])\""
    )
    assert host.file(f"{path}/Python.h").is_file, f"{path}/Python.h missing (python3-dev)"


def test_libcuda_links_from_the_stubs_folder(host, expected, cuda_home, workdir):
    """-L$CUDA_HOME/lib64/stubs -lcuda (flashinfer's link line) records libcuda.so.1."""
    stub = f"{cuda_home}/lib64/stubs/libcuda.so"
    assert host.file(stub).exists, f"{stub} missing"
    soname = host.check_output(f"readelf -d $(readlink -f {stub}) | grep SONAME")
    assert "[libcuda.so.1]" in soname
    driver = host.run("ldconfig -p | grep -F 'libcuda.so.1 ' | sed 's/.*=> //' | head -1").stdout
    if driver.strip():  # a GPU node: the link is the driver's own library
        assert host.check_output(f"readlink {stub}") == driver.strip()
    uses_driver = "int cuInit(unsigned);\nint f(void) { return cuInit(0); }"
    _write(host, f"{workdir}/uses_driver.c", uses_driver)
    host.check_output(
        _with_env(
            expected,
            f"cc -shared -fPIC {workdir}/uses_driver.c -L$CUDA_HOME/lib64/stubs -lcuda "
            f"-o {workdir}/uses_driver.so",
        )
    )
    needed = host.check_output(f"readelf -d {workdir}/uses_driver.so")
    assert "Shared library: [libcuda.so.1]" in needed
