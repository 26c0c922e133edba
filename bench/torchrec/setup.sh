#!/usr/bin/env bash
# Make the virtual environment torchrec_plan.py, dlrm_speed.py and
# ../dlrm_ref/dlrm_ref_speed.py run in: TorchRec (its planner and its DLRM) and the
# DLRM reference's imports, on a CPU-only machine. Idempotent: does nothing when the pinned versions import.
#
#   bash bench/torchrec/setup.sh            # venv at ${TORCHREC_VENV:-/tmp/torchrec-venv}
#   TORCHREC_VENV=/somewhere bash bench/torchrec/setup.sh
#
# Versions (checked together on Python 3.11, x86_64, no GPU; see README.md):
#   torch 2.14.1          the PyPI wheel is the CUDA 13 build: it pulls ~4.5 GB of
#                         nvidia-*/cuda-* wheels and cannot be imported without them;
#                         PyPI has no CPU-only torch for Linux x86_64
#   fbgemm-gpu-cpu 1.9.0  FBGEMM's CPU build; its ops are compiled against torch 2.14
#   torchrec 1.9.2        installed with --no-deps: it requires the CUDA package
#                         "fbgemm-gpu", which fbgemm-gpu-cpu replaces (same module);
#                         its other requirements are installed pinned below
set -euo pipefail

TORCH_VERSION=2.14.1
FBGEMM_VERSION=1.9.0
TORCHREC_VERSION=1.9.2
# torchrec 1.9.2's other requirements (its metadata pins torchmetrics only)
TORCHREC_DEPS=(tensordict==0.15.3 torchmetrics==1.0.3 tqdm==4.70.1 pyre-extensions==0.0.32)
# What the DLRM reference (bench/dlrm_ref/dlrm_ref_speed.py) imports besides torch
DLRM_REF_DEPS=(scikit-learn==1.9.1 tensorboard==2.21.0)

VENV="${TORCHREC_VENV:-/tmp/torchrec-venv}"
PYTHON="${PYTHON:-python3}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

say() { echo "setup.sh: $*" >&2; }

mkdir -p "$(dirname "$VENV")"
venv_abs="$(cd "$(dirname "$VENV")" && pwd)/$(basename "$VENV")"
case "$venv_abs/" in
  "$repo/"*) say "error: $venv_abs is inside the repository ($repo); set TORCHREC_VENV elsewhere"; exit 1 ;;
esac

check() {
  "$venv_abs/bin/python" - "$TORCH_VERSION" "$FBGEMM_VERSION" "$TORCHREC_VERSION" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version
want_torch, want_fbgemm, want_torchrec = sys.argv[1:4]
import torch, fbgemm_gpu, torchrec, sklearn, torch.utils.tensorboard  # noqa: F401  (fbgemm ops must load against this torch)
from torchrec.distributed.planner import EmbeddingShardingPlanner  # noqa: F401
got = (torch.__version__.split("+")[0], version("fbgemm-gpu-cpu"), version("torchrec"))
if got != (want_torch, want_fbgemm, want_torchrec):
    sys.exit(f"found torch {got[0]}, fbgemm-gpu-cpu {got[1]}, torchrec {got[2]}")
torch.ops.fbgemm.asynchronous_complete_cumsum(torch.tensor([1, 2, 3]))
EOF
}

report() {
  echo "venv: $venv_abs"
  "$venv_abs/bin/python" - <<'EOF'
from importlib.metadata import version
import sys
print("python", sys.version.split()[0])
for d in ("torch", "fbgemm-gpu-cpu", "torchrec", "tensordict", "torchmetrics", "numpy", "scikit-learn", "tensorboard"):
    print(f"{d} {version(d)}")
EOF
  echo "size: $(du -sh "$venv_abs" 2>/dev/null | cut -f1)"
}

if [ -x "$venv_abs/bin/python" ] && check; then
  say "already installed, nothing to do"
  report
  exit 0
fi

start=$(date +%s)
if [ ! -x "$venv_abs/bin/python" ]; then
  say "creating virtual environment $venv_abs"
  "$PYTHON" -m venv "$venv_abs"
fi
pip=("$venv_abs/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install --quiet --upgrade pip
say "installing torch==$TORCH_VERSION fbgemm-gpu-cpu==$FBGEMM_VERSION (a few GB: the CUDA runtime wheels come with torch)"
"${pip[@]}" install "torch==$TORCH_VERSION" "fbgemm-gpu-cpu==$FBGEMM_VERSION" "${TORCHREC_DEPS[@]}" "${DLRM_REF_DEPS[@]}"
say "installing torchrec==$TORCHREC_VERSION (--no-deps: fbgemm-gpu-cpu stands in for fbgemm-gpu)"
"${pip[@]}" install --no-deps "torchrec==$TORCHREC_VERSION"

if ! check; then
  say "error: the installed set does not import; output of the check:"
  check || true
  "$venv_abs/bin/python" -c "import torch, fbgemm_gpu, torchrec" || true
  exit 1
fi
say "installed in $(( $(date +%s) - start )) s"
report
