"""Installs PyTorch from PyPI for CPU use only (scripts/setup.sh): the python/tests interop and
transformers tests run on it. PyPI's Linux wheel is the CUDA build; its libraries link the CUDA
runtime libraries (cudart, cuBLAS, cuDNN, NCCL, ...) so `import torch` needs those, at the
versions torch pins, even on a machine without a GPU. Left out as unused on the CPU: triton (the
GPU compiler, ~150 MB), cuda-bindings, the CUDA headers (cccl), NVTX and cuSOLVER (loaded lazily).

Usage: python install_torch.py [REQUIREMENT]   (default "torch"; e.g. "torch==2.13.0"), into the
interpreter running it."""
import json
import subprocess
import sys
import tempfile

SKIP = {"triton", "cuda-bindings", "cuda-pathfinder", "cuda-toolkit", "nvidia-cuda-cccl", "nvidia-nvtx",
        "nvidia-cusolver", "setuptools"}


def main() -> None:
    requirement = sys.argv[1] if len(sys.argv) > 1 else "torch"
    pip = [sys.executable, "-m", "pip"]
    with tempfile.NamedTemporaryFile(suffix=".json") as report:
        # What pip would install for torch here, with exact versions; nothing is installed yet.
        subprocess.run(pip + ["install", "-q", "--dry-run", "--ignore-installed", "--report", report.name, requirement],
                       check=True)
        plan = json.load(open(report.name))["install"]
    wanted = [f"{p['metadata']['name']}=={p['metadata']['version']}" for p in plan
              if p["metadata"]["name"].lower() not in SKIP]
    print("[setup] pip install --no-deps " + " ".join(wanted), flush=True)
    subprocess.run(pip + ["install", "-q", "--no-deps"] + wanted, check=True)
    subprocess.run([sys.executable, "-c", "import torch; torch.zeros(1) @ torch.zeros(1)"], check=True)


if __name__ == "__main__":
    main()
