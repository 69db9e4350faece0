#!/usr/bin/env bash
# The runs behind the measured figures of docs/gate.md, docs/ab.md and the README's false-alarm and burst-and-sustained
# tables, on a 4-GPU machine: each wave's runs at once, one per GPU (scripts/on_gpus.py), each on a fresh GPU; each
# wave fits one device call of 10 minutes on an H100 host (LIMIT_S=440).
#
#   bash scripts/validation.sh OUT_DIR 1   # clean reruns x2 against the committed baseline; A/A of decode; the
#                                          # sustained profile with the independent check (scripts/sustained_check.py)
#   bash scripts/validation.sh OUT_DIR 2   # A/A of prefill (HunyuanVideo fwd+bwd, the rest) and of varlen with
#                                          # HunyuanVideo fwd; 2 % injected on HunyuanVideo fwd+bwd
#   bash scripts/validation.sh OUT_DIR 3   # 2 % injected on the rest (decode+varlen, prefill in two parts); the
#                                          # sustained profile again (its run-to-run spread); hbm on request
#   bash scripts/validation.sh OUT_DIR fleet   # the committed selection once per GPU (g1-g4), each run's JSON kept:
#                                              # repeats for the baseline from some GPUs, clean reruns on the others
#   bash scripts/validation.sh OUT_DIR fleet2  # the same again, with 5 % injected on the run named inject5
#   bash scripts/validation.sh OUT_DIR final   # 5 % injected, the README's first GPU command (the smoke profile),
#                                              # and two clean runs, against the baseline now in the checkout
#   FLEET=DIR bash scripts/validation.sh OUT_DIR own   # after a `fleet` wave into DIR: each GPU runs the selection
#       again (its second clean run); then GPUs 1 and 2 add their two runs to a copy of the baseline and run 5 %
#       injected against it (gated on their own repeats), GPU 3 runs 5 % injected against the baseline as it is (a
#       GPU it never saw), GPU 4 the README's first GPU command
#   GROW="RUN.json ..." bash scripts/validation.sh OUT_DIR grown   # the committed baseline of this GPU model with
#       GROW's runs added (cases they timed otherwise start over from them) into OUT_DIR.base.json; c1-c4 run the
#       selection twice against it (clean reruns, or repeats to grow it with), i1-i4 once with 5 % injected
#   bash scripts/validation.sh OUT_DIR fresh   # on a host that recorded none of the committed baseline: c1-c4 run
#       the selection against it (RUNS="c1 c2 c3 c4", FA4 compiling), then s1-s4 its second clean run and 5 %
#       injected (RUNS="s1 s2 s3 s4"): two device calls; i1-i4 run 5 % injected alone
#   bash scripts/validation.sh OUT_DIR retime  # the selection once per GPU, unpinned (--attn-baseline=off): cases
#       the plugin now times otherwise (events with the host's gaps -> kernels) start over from these runs with
#       `pytest-attn baseline add --restart-retimed BASELINE OUT_DIR/g*/run.json`; the others gain repeats
#
# Runs start in the order listed. With fewer GPUs than runs a wave takes longer than one device call: give LIMIT_S
# less, or run the named runs only: RUNS="clean1 aa-decode". Each run is stopped at LIMIT_S seconds (default 540)
# with SIGTERM, and what it measured is kept (marked partial). The kernel libraries must be importable (flash-attn,
# FA4: see docs/install.md); FA4's kernels compile into each copy's .fa4cache on first use unless the checkout's
# .fa4cache is warm. On 2026-11-26 a 4-GPU H100 host ran these waves (then as a session's own script, the same
# commands): wave 1 in 352 s, wave 2 in 237 s, wave 3 in 358 s.
set -uo pipefail
out="${1:?usage: validation.sh OUT_DIR WAVE}"
wave="${2:?usage: validation.sh OUT_DIR WAVE (1, 2 or 3)}"
cd "$(dirname "$0")/.."
# Bytecode kept as a user's install keeps it: the GPU machines set PYTHONDONTWRITEBYTECODE and ship torch without
# any, so each process compiled torch and the libraries from source (10 s or more; docs/several-gpus.md).
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-/tmp/pytest-attn-pycache}"
export SEL="--attn-profile=default --attn-backends=sdpa-cudnn,flash-attn,flash-attn-varlen,fa4,fa4-varlen,fa4-paged --attn-max-time=1"
suites="suites/test_prefill.py suites/test_decode.py suites/test_varlen.py"
pt="python3 -m pytest -p pytest_attn.plugin -p no:cacheprovider"
declare -A run
prefill="$pt suites/test_prefill.py \$SEL --attn-report=\$OUTDIR/report"
sustained="$pt suites/test_prefill.py --attn-profile=sustained --attn-backends=fa4,sdpa-cudnn,flash-attn --attn-max-time=1 --attn-sustained --benchmark-json=\$OUTDIR/run.json --attn-report=\$OUTDIR/report"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null)" in  # the committed baseline of this model
  *H200*) base=baselines/nvidia-h200/baseline.json ;; *) base=baselines/nvidia-h100-80gb-hbm3/baseline.json ;;
esac
base="${BASELINE:-$PWD/$base}"
whole="$pt $suites \$SEL"
clean="$whole --benchmark-json=\$OUTDIR/run.json --attn-report=\$OUTDIR/report"
inject="$whole --attn-inject-slowdown=5% --benchmark-json=\$OUTDIR/inject.json --attn-report=\$OUTDIR/report-inject"
if [ "$wave" = 1 ]; then
  order="clean1 clean2 aa-decode sustained1"
  run[clean1]="$clean"
  run[clean2]="${run[clean1]}"
  run[aa-decode]="$pt suites/test_decode.py \$SEL --attn-ab=same,same --attn-report=\$OUTDIR/report"
  run[sustained1]="$sustained; python3 scripts/sustained_check.py \$OUTDIR/run.json"
elif [ "$wave" = 2 ]; then
  order="aa-p3 aa-p2 aa-varlen slow2-p2"
  run[aa-p3]="$prefill --attn-ab=same,same -k 'not hunyuan'"
  run[aa-p2]="$prefill --attn-ab=same,same -k 'hunyuan and fwdbwd'"
  run[aa-varlen]="$pt suites/test_varlen.py \$SEL --attn-ab=same,same --attn-report=\$OUTDIR/report; $prefill --attn-ab=same,same -k 'hunyuan and not fwdbwd' --attn-report=\$OUTDIR/report-p1"
  run[slow2-p2]="$prefill --attn-ab=same,same+slowdown=2% -k 'hunyuan and fwdbwd'"
elif [ "$wave" = 3 ]; then
  order="slow2-dv slow2-p3 slow2-p1 sustained2"
  run[slow2-dv]="$pt suites/test_decode.py suites/test_varlen.py \$SEL --attn-ab=same,same+slowdown=2% --attn-report=\$OUTDIR/report"
  run[slow2-p3]="$prefill --attn-ab=same,same+slowdown=2% -k 'not hunyuan'"
  run[slow2-p1]="$prefill --attn-ab=same,same+slowdown=2% -k 'hunyuan and not fwdbwd'"
  run[sustained2]="$sustained; python3 scripts/sustained_check.py \$OUTDIR/run.json"
  run[hbm]="$pt examples/triton_attention --attn-profile=smoke --attn-backends=triton-example,sdpa-cudnn -k prefill --attn-hbm=llama --benchmark-json=\$OUTDIR/run.json --attn-report=\$OUTDIR/report"
elif [ "$wave" = grown ]; then
  grown="${out%/}.base.json"
  mkdir -p "$(dirname "$grown")"
  cp "$base" "$grown" && python3 -m pytest_attn.verdicts baseline add --restart-retimed "$grown" ${GROW:-} || exit 1
  order="c1 c2 c3 c4"
  for i in 1 2 3 4; do
    run[c$i]="$clean --attn-baseline=$grown; $whole --benchmark-json=\$OUTDIR/run2.json --attn-baseline=$grown"
    run[i$i]="$inject --attn-baseline=$grown"
  done
elif [ "$wave" = own ]; then
  fleet="${FLEET:?the own wave needs FLEET=DIR, the OUT_DIR of a fleet wave}"
  order="g1 g2 g3 g4"
  for i in 1 2; do
    run[g$i]="$clean; cp $base \$OUTDIR/base.json && python3 -m pytest_attn.verdicts baseline add \$OUTDIR/base.json $fleet/g$i/run.json \$OUTDIR/run.json && $inject --attn-baseline=\$OUTDIR/base.json"
  done
  run[g3]="$clean; $inject"
  run[g4]="$clean; $pt suites/ --attn-profile=smoke --attn-report=\$OUTDIR/report-smoke"
elif [ "$wave" = fresh ]; then
  order="c1 c2 c3 c4"
  for i in 1 2 3 4; do
    run[c$i]="$clean"
    run[s$i]="$whole --benchmark-json=\$OUTDIR/run2.json --attn-report=\$OUTDIR/report2; $inject"
    run[i$i]="$inject"
  done
elif [ "$wave" = retime ]; then
  order="g1 g2 g3 g4"
  for name in g1 g2 g3 g4; do
    run[$name]="$clean --attn-baseline=off"
  done
elif [ "$wave" = fleet ] || [ "$wave" = fleet2 ] || [ "$wave" = final ]; then
  order="g1 g2 g3 g4"
  [ "$wave" = fleet2 ] && order="inject5 g2 g3 g4"
  [ "$wave" = final ] && order="inject5 smoke g3 g4"
  run[smoke]="$pt suites/ --attn-profile=smoke --benchmark-json=\$OUTDIR/run.json --attn-report=\$OUTDIR/report"
  for name in g1 g2 g3 g4; do run[$name]="$clean"; done
  run[inject5]="$clean --attn-inject-slowdown=5%"
else
  echo "validation.sh: wave $wave is not 1, 2, 3, fleet, fleet2, final, own, grown, fresh or retime" >&2; exit 2
fi
args=()
for name in ${RUNS:-$order}; do
  [ -n "${run[$name]:-}" ] || { echo "validation.sh: no run $name in wave $wave" >&2; exit 2; }
  args+=("$name: ${run[$name]}")
done
exec python3 scripts/on_gpus.py --out "$out" --timeout "${LIMIT_S:-540}" --gpus "${GPUS:-}" "${args[@]}"
