#!/usr/bin/env bash
# Set up, then run the assignment's main job: the vanilla model pretrained on wiki.txt, finetuned
# on birth_places_train.tsv, evaluated on the dev and test sets (the handout's part f commands).
#
#   bash scripts/main.sh            on a GPU: the handout's full schedule;
#                                   without one: the short `cpu-quick` preset (a few minutes)
#   bash scripts/main.sh --full     the handout's full schedule whatever the machine
#   bash scripts/main.sh --preset NAME   any preset of src/presets.py
# Outputs (handout file names) go to runs/main/; tensorboard logs to runs/main/expt/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate

preset=""
case "${1:-}" in
  --full) preset=handout ;;
  --preset) preset=${2:?--preset needs a name} ;;
  "") ;;
  *) echo "error: unknown option $1 (use --full or --preset NAME)" >&2; exit 2 ;;
esac
if [ -z "$preset" ]; then
  if python -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    preset=handout
  else
    preset=cpu-quick
    echo "No GPU found: running the short 'cpu-quick' preset (about 5 minutes; not the handout's"
    echo "schedule: it shows the pipeline working, its accuracy is near 0%). Full run: bash scripts/main.sh --full"
  fi
fi

out=runs/main
mkdir -p "$out"
src=$PWD/src
cd "$out"
run() { echo "+ python src/run.py $*"; python "$src/run.py" "$@" --preset "$preset"; }
run pretrain vanilla wiki.txt --writing_params_path vanilla.pretrain.params
run finetune vanilla wiki.txt --reading_params_path vanilla.pretrain.params \
  --writing_params_path vanilla.finetune.params --finetune_corpus_path birth_places_train.tsv
run evaluate vanilla wiki.txt --reading_params_path vanilla.finetune.params \
  --eval_corpus_path birth_test_inputs.tsv --outputs_path vanilla.pretrain.test.predictions
run evaluate vanilla wiki.txt --reading_params_path vanilla.finetune.params \
  --eval_corpus_path birth_dev.tsv --outputs_path vanilla.pretrain.dev.predictions \
  | tee dev_accuracy.txt
echo "dev accuracy ($preset preset): $(grep Correct dev_accuracy.txt)"
echo "predictions and params: $out/"
