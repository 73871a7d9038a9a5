#!/usr/bin/env bash
# The GPU study of issue 53: where do turns win on a GPU? GPU-bound jobs (bf16, channels-last), each pair at
# the link rate its profile says makes the all-reduce as long as the compute, run time-sliced, under MPS, in
# crossover, adaptive (turns against none, time-sliced and under MPS, measured while it runs) and as the plan
# picks; then NCCL under MPS with its CTAs bounded. Phases of scripts/gpu_check.sh
# (bound, bound-nccl, bound-vgg, bound-bert; see its --help), in two device calls of 13 minutes together (a
# lent GPU machine has 15 minutes, its start included):
#
#   bash bench/gpu/study.sh 1 [--out DIR]          bound: two ResNet-50s (bf16) over Gloo: a round, the plan's run,
#                                                   a second round if the budget allows (8.3 min budget)
#   bash bench/gpu/study.sh 2 --rate RATE [--out DIR]   bound-nccl (at the rate call 1 printed), then bound-vgg and
#                                                   bound-bert as far as the budget goes (4.5 min budget)
#   bash bench/gpu/study.sh cpu [--out DIR]        every phase's dry run on this CPU, with small recipes
#
# Each call writes DIR/summary.md (default results/gpu-study-N) and DIR/data.tgz.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
part=${1:-}; shift || true
case $part in
  1) exec bash "$ROOT/scripts/gpu_check.sh" --phases bound --budget 500 --policy work-conserving \
       --out "$ROOT/results/gpu-study-1" "$@" ;;
  2) exec bash "$ROOT/scripts/gpu_check.sh" --phases bound-nccl,bound-vgg,bound-bert --budget 270 \
       --policy work-conserving --out "$ROOT/results/gpu-study-2" "$@" ;;
  cpu) exec bash "$ROOT/scripts/gpu_check.sh" --cpu --phases bound,bound-nccl --budget 540 \
       --policy work-conserving --out "$ROOT/results/gpu-study-cpu" "$@" ;;
  *) sed -n '2,14p' "$0"; [ "$part" = -h ] || [ "$part" = --help ] && exit 0; exit 2 ;;
esac
