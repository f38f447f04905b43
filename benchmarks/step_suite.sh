#!/usr/bin/env bash
# The GPU checks of "a training step that never waits on the host", on one H100 with 16 cores.
# Each Python process there spends 14-18 s importing, and data_path.py starts one per case: the
# default parts (sync, ratio) took 45 s and 356 s on an H100 (2026-11-28); "loader graph wall"
# take about 5 minutes more, so run them in a second call.
#
#   1. sync:     the CUDA read-back test (tests/launch/test_no_host_sync.py, its CUDA cases: every
#                listed method, three guarded steps each; the CPU stand-in runs in CPU CI)
#   2. ratio:    benchmarks/data_path.py, ResNet-18 at 32 px, batch 256, bf16-mixed, the 7 methods:
#                the GPU path (`gpu`) against the same step outside Lightning (`bare`)
#   3. loader:   the same for diet and simclr with solo-learn's loader (`image_folder`) and the
#                Lightning step on pre-made batches (`ceiling`)
#   4. graph:    benchmarks/step_ceiling.py for diet and simclr (eager loop against one CUDA graph)
#   5. wall:     benchmarks/pretrain_wall.py, 100 epochs of diet and simclr (5 000 images,
#                cp_resnet8 width 128), start-up included
#
# The caller sets PYTHONPATH so that solo_diet and solo-learn (`solo`) import. Each part prints its
# table to stdout and, when $OUT is set, to $OUT/<part>.txt; a part that fails or runs past its
# time limit is named at the end and the others still run. Choose parts with STEP_SUITE_PARTS
# (default "sync ratio"), e.g.
#
#   bash benchmarks/step_suite.sh                                       # ~7 minutes
#   STEP_SUITE_PARTS="loader graph wall" bash benchmarks/step_suite.sh  # ~5 minutes
set -u
cd "$(dirname "$0")/.."
parts="${STEP_SUITE_PARTS:-sync ratio}"
failed=()

run_part() {  # name, time limit in seconds, command...
    local name="$1" limit="$2"
    shift 2
    echo "=== ${name}: $* ($(date -u +%H:%M:%S) UTC)"
    local log="/dev/null"
    if [ -n "${OUT:-}" ]; then
        mkdir -p "$OUT"
        log="$OUT/${name}.txt"
    fi
    local start=$SECONDS
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]}
    echo "=== ${name}: exit ${rc} after $((SECONDS - start)) s"
    [ "$rc" -eq 0 ] || failed+=("${name} (exit ${rc})")
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python -c "import torch, lightning; print('torch', torch.__version__, 'lightning', lightning.__version__)"
for part in $parts; do
    case "$part" in
    sync) run_part sync 170 python -m pytest tests/launch/test_no_host_sync.py -q --runslow \
        -p no:cacheprovider -k never_read_back -rfE ;;
    ratio) run_part ratio 420 python benchmarks/data_path.py --backbones resnet18 \
        --sources gpu bare --seconds 2 --case-timeout 60 ;;
    loader) run_part loader 130 python benchmarks/data_path.py --backbones resnet18 \
        --methods diet simclr --sources image_folder ceiling --seconds 2 --case-timeout 40 ;;
    graph) run_part graph 60 python benchmarks/step_ceiling.py --methods diet simclr \
        --backbone resnet18 --repeats 3 ;;
    wall) run_part wall 140 python benchmarks/pretrain_wall.py --methods diet simclr --epochs 100 ;;
    *) echo "unknown part '${part}' (sync, ratio, loader, graph, wall)"; failed+=("${part}") ;;
    esac
done
if [ "${#failed[@]}" -gt 0 ]; then
    echo "step_suite: failed: ${failed[*]}"
    exit 1
fi
echo "step_suite: all parts passed"
