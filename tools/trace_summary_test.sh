#!/usr/bin/env bash
# trace_summary on hand-written traces (tools/trace_summary_testdata). The expected
# figures follow from Note [Exposed communication] (tools/trace_summary.h) by hand;
# times in the files are whole microseconds, printed in ms with 3 decimals, so every
# figure is exact.
#   bazel test //tools:trace_summary_test
set -uo pipefail
tool="$1"
d=tools/trace_summary_testdata
failures=0

# expect_output FILE EXPECTED: exit 0 and exactly EXPECTED on stdout.
expect_output() {
  local out got
  out=$("$tool" "$d/$1" 2>&1); got=$?
  if [[ "$got" != 0 || "$out" != "$2" ]]; then
    echo "FAIL: trace_summary $1: exit $got; output:"; echo "$out"
    echo "expected:"; echo "$2"
    diff <(echo "$out") <(echo "$2")
    failures=$((failures + 1))
  fi
}
# expect_error FILE PATTERN: exit 2 and PATTERN in the message.
expect_error() {
  local out got
  out=$("$tool" "$d/$1" 2>&1); got=$?
  if [[ "$got" != 2 ]] || ! grep -Fq -- "$2" <<<"$out"; then
    echo "FAIL: trace_summary $1: exit $got (expected 2), output lacks '$2':"; echo "$out"
    failures=$((failures + 1))
  fi
}

# overlaps.json, rank 0 (microseconds):
#   compute: forward <root> [0,500] > forward a [100,400] > wait [100,200];
#            backward a [600,900] > op MatMul [650,700]; forward a [1000,1300]; Adam [1700,1800]
#   busy = compute - wait = [0,100] [200,500] [600,900] [1000,1300] [1700,1800]
#   comm = all-gather a [50,250], reduce-scatter a [850,1100], all-gather a [1200,1400],
#          AllReduce [1500,1600], all-gather a [2100,2200] (after the last step: not counted);
#          the "issued" span [40,260] is not communication
#   exposed = comm - busy = [100,200] [900,1000] [1300,1400] [1500,1600] (+ [2100,2200])
#   step 1 [0,1000]:   compute 100+300+300 = 700, comm 200+150 = 350, exposed 100+100 = 200,
#                      idle = 1000 - |[0,500] [600,1000]| = 100
#   step 2 [1000,2000]: compute 300+100 = 400, comm 100+200+100 = 400, exposed 100+100 = 200,
#                      idle = 1000 - |[1000,1400] [1500,1600] [1700,1800]| = 400
#   units: innermost unit span owns busy time: <root> [0,100] [400,500] = 200;
#          a [200,400] [600,900] [1000,1300] = 800 (Adam is in no unit);
#          a's comm (names ending " a") in the steps = 200+250+200 = 650, exposed 300;
#          AllReduce has no unit: comm 100, exposed 100
# rank 1 (a straggler): step [0,1500], forward a [0,1000] > wait [0,600], all-gather a [500,700]
#   busy [600,1000] = 400, comm 200, exposed [500,600] = 100, idle 1500 - |[500,1000]| = 1000
# exposed_comm_fraction = (400 + 100) / (2000 + 1500) = 1/7 = 0.142857
expect_output overlaps.json "19 complete events, 2 ranks; times in ms (Note [Exposed communication] in tools/trace_summary.h)

rank pid 0 (rank 0)
  step                            start     length    compute       comm    exposed       idle exposed%
  step 1                          0.000      1.000      0.700      0.350      0.200      0.100    20.0%
  step 2                          1.000      1.000      0.400      0.400      0.200      0.400    20.0%
  total (2 steps)                            2.000      1.100      0.750      0.400      0.500    20.0%
  unit                                     compute       comm    exposed
  <root>                                     0.200      0.000      0.000
  a                                          0.800      0.650      0.300
  (no unit)                                  0.000      0.100      0.100

rank pid 1 (rank 1)
  step                            start     length    compute       comm    exposed       idle exposed%
  step 1                          0.000      1.500      0.400      0.200      0.100      1.000     6.7%
  unit                                     compute       comm    exposed
  a                                          0.400      0.200      0.100

exposed_comm_ms 0.500 of 3.500 ms of steps over 2 ranks
exposed_comm_fraction 0.142857"

# generic.json (PyTorch-like: a bare array, string pid, NCCL kernels named so): no step
# span, so the window is the whole trace [0,150]; aten::mm [0,100] is compute, the NCCL
# kernel [50,150] communication: exposed [100,150] = 50 of 150 = 1/3. B and i events are
# not read.
expect_output generic.json "2 complete events, 1 ranks; times in ms (Note [Exposed communication] in tools/trace_summary.h)

rank pid host
  step                            start     length    compute       comm    exposed       idle exposed%
  (whole trace)                   0.000      0.150      0.100      0.100      0.050      0.000    33.3%
  unit                                     compute       comm    exposed
  (no unit)                                  0.000      0.100      0.050

exposed_comm_ms 0.050 of 0.150 ms of steps over 1 ranks
exposed_comm_fraction 0.333333"

# peers.json: the in-process backend's split spans (Note [Communication spans]):
#   busy = forward a [0,400] - wait [200,400] + backward a [500,900] = [0,200] [500,900]: 600
#   comm = [300,400] [950,1000]: 150, none under busy, so all exposed
#   peer wait = peers [200,300] [850,950] - busy - comm = [200,300] [900,950]: 150 (0.15)
#   idle = 1000 - |busy + comm| = 1000 - 750 = 250 (the peer wait is part of it)
expect_output peers.json "8 complete events, 1 ranks; times in ms (Note [Exposed communication] in tools/trace_summary.h)

rank pid 0 (rank 0)
  step                            start     length    compute       comm    exposed       idle exposed%
  step 0                          0.000      1.000      0.600      0.150      0.150      0.250    15.0%
  unit                                     compute       comm    exposed
  a                                          0.600      0.150      0.150

exposed_comm_ms 0.150 of 1.000 ms of steps over 1 ranks
exposed_comm_fraction 0.150000
peer_wait_ms 0.150 (collectives waiting for late peers: skew, not transfer)
peer_wait_fraction 0.150000"

# gpu_rows.json: rank 0 has GPU rows (categories "gpu ..."), so it is measured on them
# alone; its host spans (compute [0,300], the NCCL launches [42,50] [275,280]) give
# only the step window [0,1000]. Rank 1 has none: host rows, as above.
#   rank 0 GPU: compute forward <root> [100,700] > forward a [150,600] > gpu wait [150,300];
#               gpu op MatMul [620,680]; gpu comm all-gather a [120,320], reduce-scatter a [650,900]
#   busy = [100,700] - [150,300] = [100,150] [300,700] = 450; comm = 200 + 250 = 450
#   exposed = comm - busy = [150,300] [700,900] = 350; idle = 1000 - |[100,900]| = 200
#   units: <root> owns [100,150] and [600,700] = 150, a owns [300,600] = 300;
#          a's comm 450, exposed 350
#   (on its host rows it would read compute 300 - 5, comm 13, exposed 0)
# rank 1: busy [0,400], comm [300,500] = 200, exposed [400,500] = 100, idle 0
# exposed_comm_fraction = (350 + 100) / (1000 + 500) = 0.3
expect_output gpu_rows.json "17 complete events, 2 ranks; times in ms (Note [Exposed communication] in tools/trace_summary.h)

rank pid 0 (rank 0) on its GPU rows
  step                            start     length    compute       comm    exposed       idle exposed%
  step 1                          0.000      1.000      0.450      0.450      0.350      0.200    35.0%
  unit                                     compute       comm    exposed
  <root>                                     0.150      0.000      0.000
  a                                          0.300      0.450      0.350

rank pid 1 (rank 1)
  step                            start     length    compute       comm    exposed       idle exposed%
  step 1                          0.000      0.500      0.400      0.200      0.100      0.000    20.0%
  unit                                     compute       comm    exposed
  a                                          0.400      0.200      0.100

exposed_comm_ms 0.450 of 1.500 ms of steps over 2 ranks
exposed_comm_fraction 0.300000"

# ops.json with --ops (Note [Per-op breakdown]): one step [0,1000]; op spans Linear
# [0,100] and [500,600], LayerNorm [100,150], Gelu [150,170], GeluMlp [300,360] (GEMMs
# with GELU in their epilogues), CrossEntropy [700,780], and a Gelu [1100,1200] after
# the step (left out); AdamW is compute, not an op.
#   busy = [0,170] [300,360] [500,600] [700,780] [900,950] = 460; idle 540
#   ops: Linear 2 x 100 = 200 (20%, GEMM), CrossEntropy 80 (8%), GeluMlp 60 (6%, GEMM),
#   LayerNorm 50 (5%), Gelu 20 (2%)
#   largest non-GEMM op: CrossEntropy, 0.08 of the step
out=$("$tool" --ops "$d/ops.json" 2>&1); got=$?
want="9 complete events, 1 ranks; times in ms (Note [Exposed communication] in tools/trace_summary.h)

rank pid 0
  step                            start     length    compute       comm    exposed       idle exposed%
  step 1                          0.000      1.000      0.460      0.000      0.000      0.540     0.0%
  op (forward + backward)                    count      total of steps
  Linear                                         2      0.200    20.0%  GEMM
  CrossEntropy                                   1      0.080     8.0%
  GeluMlp                                        1      0.060     6.0%  GEMM
  LayerNorm                                      1      0.050     5.0%
  Gelu                                           1      0.020     2.0%
  largest_non_gemm_op CrossEntropy 0.080000

exposed_comm_ms 0.000 of 1.000 ms of steps over 1 ranks
exposed_comm_fraction 0.000000"
if [[ "$got" != 0 || "$out" != "$want" ]]; then
  echo "FAIL: trace_summary --ops ops.json: exit $got"; diff <(echo "$out") <(echo "$want")
  failures=$((failures + 1))
fi
# Without --ops the same trace prints no op table.
if "$tool" "$d/ops.json" | grep -q "largest_non_gemm_op"; then
  echo "FAIL: the op table without --ops"; failures=$((failures + 1))
fi
if "$tool" --bogus "$d/ops.json" >/dev/null 2>&1; then
  echo "FAIL: an unknown flag should exit 2"; failures=$((failures + 1))
fi

expect_error no_dur.json 'event 0: a complete ("X") event needs numbers ts and dur >= 0, found'
expect_error truncated.json "expected JSON (a Chrome trace), found text that does not parse"
expect_error missing.json 'cannot open'

if [[ "$failures" != 0 ]]; then echo "$failures failure(s)"; exit 1; fi
echo "PASS"
