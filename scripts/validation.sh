#!/usr/bin/env bash
# The runs behind the measured figures of docs/gate.md, docs/ab.md and the README's burst-and-sustained table, on
# one GPU machine: each wave's runs at once, one per GPU (scripts/on_gpus.py), each on a fresh GPU.
#
#   bash scripts/validation.sh OUT_DIR 1     # clean reruns x2 against the committed baseline; A/A of prefill, decode
#   bash scripts/validation.sh OUT_DIR 2     # the sustained profile x2 (+ the independent check), slowdown=2% in
#                                            # two parts, A/A of varlen, --attn-hbm on the example's conftest back end
#
# Runs start in the order listed (wave 2 has six: the last two wait for the first GPUs to come free, behind the
# short varlen A/A). With fewer GPUs than runs a wave takes longer than one device call: give LIMIT_S less, or
# run the named runs only: RUNS="clean1 aa-decode". Each run is stopped at LIMIT_S seconds (default
# 540) with SIGTERM, and what it measured is kept (marked partial). The kernel libraries must be importable
# (flash-attn, FA4: see docs/install.md); FA4's kernels compile into each copy's .fa4cache on first use unless the
# checkout's .fa4cache is warm.
set -uo pipefail
out="${1:?usage: validation.sh OUT_DIR WAVE}"
wave="${2:?usage: validation.sh OUT_DIR WAVE (1 or 2)}"
cd "$(dirname "$0")/.."
export SEL="--attn-profile=default --attn-backends=sdpa-cudnn,flash-attn,flash-attn-varlen,fa4,fa4-varlen,fa4-paged --attn-max-time=1"
suites="suites/test_prefill.py suites/test_decode.py suites/test_varlen.py"
pt="python3 -m pytest -p pytest_attn.plugin -p no:cacheprovider"
declare -A run
if [ "$wave" = 1 ]; then
  order="clean1 clean2 aa-prefill aa-decode"
  run[clean1]="$pt $suites \$SEL --benchmark-json=\$OUTDIR/run.json"
  run[clean2]="$pt $suites \$SEL --benchmark-json=\$OUTDIR/run.json"
  run[aa-prefill]="$pt suites/test_prefill.py \$SEL --attn-ab=same,same --attn-report=\$OUTDIR/report"
  run[aa-decode]="$pt suites/test_decode.py \$SEL --attn-ab=same,same --attn-report=\$OUTDIR/report"
elif [ "$wave" = 2 ]; then
  order="sustained1 slow2-prefill slow2-dv aa-varlen sustained2 hbm"
  for n in 1 2; do
    run[sustained$n]="$pt suites/test_prefill.py --attn-profile=sustained --attn-backends=fa4,sdpa-cudnn,flash-attn --attn-max-time=1 --attn-sustained --benchmark-json=\$OUTDIR/run.json --attn-report=\$OUTDIR/report"
  done
  run[sustained1]+="; python3 scripts/sustained_check.py \$OUTDIR/run.json"
  run[slow2-prefill]="$pt suites/test_prefill.py \$SEL --attn-ab=same,same+slowdown=2% --attn-report=\$OUTDIR/report"
  run[slow2-dv]="$pt suites/test_decode.py suites/test_varlen.py \$SEL --attn-ab=same,same+slowdown=2% --attn-report=\$OUTDIR/report"
  run[aa-varlen]="$pt suites/test_varlen.py \$SEL --attn-ab=same,same --attn-report=\$OUTDIR/report"
  run[hbm]="$pt examples/triton_attention --attn-profile=smoke --attn-backends=triton-example,sdpa-cudnn -k prefill --attn-hbm=llama --benchmark-json=\$OUTDIR/run.json --attn-report=\$OUTDIR/report"
else
  echo "validation.sh: wave $wave is not 1 or 2" >&2; exit 2
fi
args=()
for name in ${RUNS:-$order}; do
  [ -n "${run[$name]:-}" ] || { echo "validation.sh: no run $name in wave $wave" >&2; exit 2; }
  args+=("$name: ${run[$name]}")
done
exec python3 scripts/on_gpus.py --out "$out" --timeout "${LIMIT_S:-540}" --gpus "${GPUS:-}" "${args[@]}"
