#!/usr/bin/env bash
# The GPU figures in BENCHMARKS.md, in one go on a CUDA machine (PyTorch and transformers installed there):
#   bash benchmarks/gpu.sh [VOCAB] [STAGE ...]   # VOCAB: bert-base-uncased's vocab.txt (default: ../shared/data's)
#   (BATCHES="128" picks the batch sizes of the step and compile stages; default 64 128 256)
# stages (default: all of them, in this order):
#   check       gpu_check.py: bertkit = transformers on the GPU (fp32, bf16, a pre-training and a fine-tuning step)
#   step        bench_pretrain.py: bert-base pre-training steps at seq 128, bf16, bertkit's step (compiled, its GPU
#               default) vs transformers' as Trainer(bf16, torch_compile) runs it, alternating; `--eager` for bertkit eager
#   compile     the same with --compile (on a GPU the same routes: both compile by default there)
#   cli         `bertkit pretrain` bert-base for 300 steps: batches from a thread, from worker processes (the GPU
#               default), and --compile; then torchrun with one process
#   quickstart  `bertkit quickstart` on the GPU: the main job at its default 2-minute budget
set -euo pipefail
export PYTHONWARNINGS=ignore
cd "$(dirname "$0")/.."
VOCAB=${1:-../shared/data/vocab/bert-base-uncased/vocab.txt}
shift || true
STAGES=${*:-check step compile cli quickstart}
PY=${PYTHON:-python3}
OUTDIR=${OUT:-runs/gpu}
mkdir -p "$OUTDIR"
bertkit() { $PY -c "import sys; from bertkit.cli import main; sys.exit(main())" "$@"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv | tee "$OUTDIR/gpu.txt"
for stage in $STAGES; do case $stage in
check) $PY benchmarks/gpu_check.py --device cuda 2>&1 | grep -v "Loading weights" | tee "$OUTDIR/gpu_check.txt" ;;
step|compile)
  for bs in ${BATCHES:-64 128 256}; do
    $PY benchmarks/bench_pretrain.py --device cuda --model-size bert-base --batch-size $bs --steps 20 --rounds 3 \
        --warmup 5 --vocab "$VOCAB" $([ $stage = compile ] && echo --compile) 2>&1 \
        | grep -v "Loading weights\|^W1" | tee -a "$OUTDIR/bench_$stage.txt"
  done ;;
cli)
  books=$($PY -c "from bertkit.commands.quickstart import bundled_corpus; print(' '.join(map(str, bundled_corpus())))")
  for flag in "--loader-workers 0" "" --compile; do
    bertkit pretrain --corpus $books --vocab "$VOCAB" --output runs/gpu_cli --overwrite --model-size bert-base \
        --batch-size 128 --max-steps 300 --log-every 50 --eval-every 1000 --quiet $flag
    echo "bertkit pretrain bert-base batch 128 ${flag:-eager}: $(tail -n 3 runs/gpu_cli/metrics.jsonl | head -c 600)" \
        | tee -a "$OUTDIR/cli.txt"
  done
  $PY -m torch.distributed.run --nproc_per_node 1 -m bertkit.cli pretrain --corpus $books --vocab "$VOCAB" \
      --output runs/gpu_ddp --overwrite --model-size bert-mini --max-steps 100 --quiet 2>&1 | tail -3
  echo "torchrun, 1 process: $(python3 -c "import json; r=json.load(open('runs/gpu_ddp/run.json')); print('world', r['world_size'], 'steps', r['total_steps'])")" | tee -a "$OUTDIR/cli.txt" ;;
quickstart)
  bertkit quickstart --output runs/gpu_quickstart --overwrite 2>&1 | tail -40 | tee "$OUTDIR/quickstart.txt" ;;
esac; done
