#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (Ubuntu): Python,
# bubblewrap (the dataset check's sandbox) and a CPU build of torch, the grader's only needs.
set -euo pipefail
apt-get update
apt-get install -y --no-install-recommends python3 python3-pip bubblewrap
# the CPU wheel: the CUDA one is gigabytes the grader never uses
pip3 install --index-url https://download.pytorch.org/whl/cpu torch
pip3 install tqdm numpy
