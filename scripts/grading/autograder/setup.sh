#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (Ubuntu): Python,
# bubblewrap (the dataset check's sandbox) and a CPU build of torch, the grader's only needs;
# and the unprivileged user the dataset check runs as where bubblewrap cannot create namespaces
# (Gradescope's Docker container refuses them: scripts/grading/user_sandbox.py).
set -euo pipefail
apt-get update
apt-get install -y --no-install-recommends python3 python3-pip bubblewrap
# the CPU wheel: the CUDA one is gigabytes the grader never uses
pip3 install --index-url https://download.pytorch.org/whl/cpu torch
pip3 install tqdm numpy
id a5probe >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin a5probe
