"""Build-time checks of the compilers the GPU libraries call at first use (run by `images/install.sh code`).

    python toolchain_check.py [--sglang]

Every image: Python.h at the include path Triton computes from sysconfig, Triton's own C compiler lookup,
and Triton's own builder compiling an extension against Python.h, which is then imported.
--sglang (the RL image): `nvcc --version` at CUDA_HOME, SGLang's toolchain discovery resolving nvcc and the
host `c++`, and a CUDA kernel compiled by exactly that nvcc and host compiler and linked with SGLang's own
flags (tvm-ffi, -L$CUDA_HOME/lib64 -lcudart); the -lcuda stub link must point at the driver's libcuda.so.1.
No GPU is needed: the target architecture is named (sm_90) instead of detected.
A failure exits 1 with one line naming what is missing, so the build stops instead of the first pod.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

EXT_C = """#include <Python.h>
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "paravt_cc_check", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_paravt_cc_check(void) { return PyModule_Create(&def); }
"""

KERNEL_CU = """#include <cuda_runtime.h>
__global__ void add_one(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}
extern "C" int launch_add_one(float *x, int n) {
  add_one<<<(n + 255) / 256, 256>>>(x, n);
  return (int)cudaGetLastError();
}
"""


def fail(message: str) -> None:
    print(f"toolchain_check: {message}", file=sys.stderr)
    sys.exit(1)


def check_triton(work: Path) -> None:
    from triton.runtime import build

    # Triton's own rule (triton/runtime/build.py, _build): Debian's posix_local scheme read as posix_prefix.
    scheme = sysconfig.get_default_scheme()
    include = sysconfig.get_paths(scheme="posix_prefix" if scheme == "posix_local" else scheme)["include"]
    if not (Path(include) / "Python.h").is_file():
        fail(f"no Python.h in {include} (python3.11-dev)")
    try:
        cc = build._find_compiler("c")
    except RuntimeError as err:  # Triton's own message: "Failed to find C compiler. ..."
        fail(f"Triton's compiler lookup: {err}")
    src = work / "paravt_cc_check.c"
    src.write_text(EXT_C)
    try:
        so = build._build("paravt_cc_check", str(src), str(work), [], [], [], [])
    except Exception as err:  # the compiler's exit status, with its command line
        fail(f"Triton's builder could not compile an extension with {cc}: {err}")
    spec = importlib.util.spec_from_file_location("paravt_cc_check", so)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    print(f"toolchain_check: Triton builds with {cc} against {include}/Python.h")


def run(cmd: list[str]) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        fail(f"{' '.join(cmd)} failed: {(proc.stderr or proc.stdout).strip()[-400:]}")
    return proc.stdout


def check_sglang(work: Path) -> None:
    from sglang.kernels.jit.utils.compile import toolchain

    cuda_home = os.environ.get("CUDA_HOME", "")
    host, nvcc = toolchain.compilers()
    if nvcc != os.path.join(cuda_home, "bin", "nvcc") or not os.access(nvcc, os.X_OK):
        fail(f"SGLang resolves nvcc to {nvcc}, not an executable under CUDA_HOME={cuda_home!r}")
    if shutil.which(host) is None:
        fail(f"SGLang's host compiler {host!r} is not on PATH (g++)")
    version = next((line for line in run([nvcc, "--version"]).splitlines() if "release" in line), "")
    if "release 13.0" not in version:
        fail(f"nvcc --version says {version!r}, not release 13.0 (torch's cuda-toolkit)")
    stub = Path(toolchain.cuda_stubs_dir()) / "libcuda.so"
    if not stub.is_symlink() or not os.readlink(stub).endswith("/libcuda.so.1"):
        fail(f"{stub} is not a link to the driver's libcuda.so.1 (-lcuda)")
    src, obj, lib = work / "add_one.cu", work / "add_one.o", work / "add_one.so"
    src.write_text(KERNEL_CU)
    arch = ["-gencode=arch=compute_90,code=sm_90"]
    run(
        [
            nvcc,
            "-ccbin",
            host,
            *toolchain.base_cuda_flags(),
            *arch,
            "-std=c++17",
            "-c",
            str(src),
            "-o",
            str(obj),
        ]
    )
    run([host, str(obj), *toolchain.base_link_flags(with_device=True), "-o", str(lib)])
    print(f"toolchain_check: SGLang's toolchain ({nvcc}, {shutil.which(host)}) built a kernel; {version}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sglang", action="store_true", help="also nvcc and SGLang's JIT toolchain (RL image)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        check_triton(Path(tmp))
        if args.sglang:
            check_sglang(Path(tmp))


if __name__ == "__main__":
    main()
