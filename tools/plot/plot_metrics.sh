#!/usr/bin/env bash
# Renders a run's metrics.csv (written by examples/train_gpt) as two PNGs
# beside it: loss.png (training loss per step, validation loss where measured)
# and memory.png (each rank's peak bytes per step). Uses gnuplot (Debian's
# gnuplot-nox; `make plot` installs it when missing).
#
#   tools/plot/plot_metrics.sh [RUN_DIR | METRICS_CSV]   # default: the newest run under work_dirs/
set -euo pipefail

target="${1:-}"
if [[ -z "$target" ]]; then
  target="$(ls -t work_dirs/*/*/metrics.csv 2>/dev/null | head -1 || true)"
  if [[ -z "$target" ]]; then
    echo "plot: no work_dirs/*/*/metrics.csv found; run 'make train' first or pass a run folder" >&2
    exit 1
  fi
fi
[[ -d "$target" ]] && target="$target/metrics.csv"
if [[ ! -f "$target" ]]; then
  echo "plot: expected a run folder or a metrics.csv, found no file at $target" >&2
  exit 1
fi
header="$(head -1 "$target")"
if [[ "$header" != step,loss,lr,* ]]; then
  echo "plot: $target does not start with the metrics header 'step,loss,lr,...' (found '$header')" >&2
  exit 1
fi
if [[ "$(wc -l < "$target")" -lt 2 ]]; then
  echo "plot: $target holds no step yet" >&2
  exit 1
fi
dir="$(dirname "$target")"
# Columns: step,loss,lr,tokens_per_s,ms_per_step,val_loss,peak_bytes_rank0..N-1
ranks="$(echo "$header" | tr ',' '\n' | grep -c '^peak_bytes_rank' || true)"
title="$(basename "$(dirname "$dir")")/$(basename "$dir")"

gnuplot <<GP
set datafile separator ","
set datafile missing ""
set terminal pngcairo size 960,540 font "sans,11" noenhanced
set key top right
set grid

set output "$dir/loss.png"
set title "$title: loss"
set xlabel "step"
set ylabel "cross-entropy (nats)"
plot "$target" using 1:2 skip 1 with lines lw 1.5 title "train (mean over ranks)", \
     "$target" using 1:(strlen(strcol(6)) > 0 ? column(6) : NaN) skip 1 with linespoints pt 7 ps 1.2 lw 2 title "validation"

set output "$dir/memory.png"
set title "$title: peak memory per rank per step"
set ylabel "MiB"
set yrange [0:*]
plot for [r=0:$((ranks - 1))] "$target" using 1:(column(7 + r) / 1048576.0) skip 1 with lines lw 1.5 title sprintf("rank %d", r)
GP
echo "plot: wrote $dir/loss.png and $dir/memory.png"
