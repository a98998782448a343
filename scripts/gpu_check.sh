#!/usr/bin/env bash
# One call on the GPU machine: build (all cores, this GPU's arch), GPU parity
# (ctest: the shared harness + tests/gpu), compute-sanitizer memcheck,
# racecheck and synccheck on small shapes, then attnkit's fa3 and fa2 against
# FlashAttention-3 (the fa3-fwd wheel, when carried in .whl/) and PyTorch SDPA
# (flash, cuDNN) on the dense grid of design §6. Logs and JSON go under $OUT;
# a short table is last.
#
#   OUT=/some/dir scripts/gpu_check.sh            # everything (more than one 600 s device call: on 2026-12-02
#                                                  # build 95 s, parity 70, sanitizer ~220 (three tools at once since 2026-12-02: expect ~100), cudnn ~100, python ~200,
#                                                  # bench 30-200 by seqlens; so split it, e.g.
#                                                  # GPU_CHECK_SKIP=python,bench,variants,wheel then
#                                                  # GPU_CHECK_SKIP=parity,sanitizer,cudnn,dist,variants,wheel)
#   GPU_CHECK_SKIP=bench scripts/gpu_check.sh     # skip steps: build,parity,sanitizer,cudnn,dist,python,wheel,run,variants,bench
#   GPU_CHECK_SEQLENS=4096,16384 ...               # bench a subset of the grid's seqlens (quick A/B runs)
#   GPU_CHECK_PARITY_REGEX=fa3 ...                 # the parity step on the ctest names matching this (not for a landing)
#   GPU_CHECK_VARIANT_SEQLENS=512,1024 ...         # the variants step's seqlens (default 1024,4096,16384)
#   GPU_CHECK_VARIANTS='f3_d128|f3_d64_m192_n128$'  # only the variants whose name matches this regex from its
#                                                  # start (the build compiles only those)
#   GPU_CHECK_VARIANT_TILE_COUNTER=both ...        # fa3 variants' causal points also without the tile counter
#                                                  # (one CTA per tile; default on, as the backend plans them)
#   GPU_CHECK_VARIANT_WALK_GROUPS=0,1,100 ...       # fa3 variants' causal points per walk group (heads a group; 0: the launch's rule)
#   GPU_CHECK_SKIP_SOFTMAX=1 ...                   # also bench fa3's request skip-softmax against its dense kernel
#   GPU_CHECK_SANITIZE_KERNELS_ONLY='Gpu/CudaKernels.MatchesReference/fa3_dynamic_*' ...  # the sanitizer step on
#                                                  # only these test_cuda_kernels cases (a short call; not for a landing)
#   GPU_CHECK_SANITIZE_ALL=1 ...                   # also the whole GPU parity suite under memcheck / racecheck / synccheck
#     (GPU_CHECK_SANITIZE_TOOLS="memcheck": only these tools, and GPU_CHECK_SANITIZE_BINS="parity cuda_kernels
#     sparse_gpu": only these test binaries, to split the whole-suite run over device calls;
#     GPU_CHECK_SANITIZE_KERNELS_FILTER: a gtest filter for test_cuda_kernels (racecheck's default leaves out
#     cuda_sdpa's copies of the persistent / dynamic / long-key cases: see whole_suite_shard). Under racecheck on 2026-12-02
#     the parity binary took 156 s, the graph-capture test of the three backends 459 s (now one case per backend,
#     Backends/CudaBackendsCapture.RunIsGraphCapturable/*), and the 68 fa2 / fa3 / backend tests before the first
#     long cuda_sdpa case ~130 s; GPU_CHECK_SANITIZE_SHARDS=8: each (tool, binary) as 8 gtest shards, all run at
#     once, each with its own log and GPU_CHECK_SANITIZE_TIMEOUT seconds (default 900; a test is never split;
#     the default, 1 shard, still runs every (tool, binary) at once; shards do not buy time on one GPU: on
#     2026-12-03, 3 shards of 6 pairs at once, each third of the parity binary's racecheck took ~300 s))
#   GPU_CHECK_TORCH_ARGS="--flex --backends flash,cudnn,efficient"   # more peers (FlexAttention: +~60 s, a compile per shape)
#   AK_BENCH_FLUSH=memset ...                      # the Python benchmarks' L2 flush before each call: read (default),
#                                                  # memset (the flush of grids before 2026-12-07) or none (timing.py)
#   GPU_CHECK_BACKENDS=fa3,fa2                     # the attnkit backends benchmarked (the first is the table's primary)
#   .whl/fa3_fwd-*.whl (carried)                   # FlashAttention-3's forward as a peer (pip download fa3-fwd==0.0.3)
#   GPU_CHECK_AB=ab-baseline.tar ...               # A/B: also build `git archive <rev> -o ab-baseline.tar` (put in the
#                                                  # tree, untracked, so it travels) and alternate bench_fa2 of both builds
#                                                  # (GPU_CHECK_AB_ROUNDS=2, GPU_CHECK_AB_DIMS=64,128,256, seqlens from
#                                                  # GPU_CHECK_SEQLENS or 512,2048,16384, GPU_CHECK_AB_BACKEND=fa2)
#   GPU_CHECK_PROFILE=1 ...                        # also profile fa2 and PyTorch FLASH with ncu
#     (GPU_CHECK_PROFILE_BACKEND=fa3: fa3 against FlashAttention-3's kernel instead;
#     GPU_CHECK_PROFILE_CAUSAL=1: the causal launch of the grid point instead of the full one;
#     GPU_CHECK_PROFILE_PEER=cudnn|fa3_fwd|flash: the peer kernel profiled beside it)
#     (GPU_CHECK_PROFILE_DIM / _SEQLEN: the grid point, default d128 s4096; GPU_CHECK_PROFILE_VARIANT=<name>:
#     a variant of fa2_variants.def instead of the shipped kernel, at its own head dim)
#   GPU_CHECK_PEER_KERNELS=128:512:32:16:causal,... # the kernels torch cuDNN, FA3 and attnkit fa3 launch for these
#                                                  # d:seqlen:batch:heads:mask calls (cudnn_kernels.py --impls)
#   GPU_CHECK_PROFILE_SPARSE=sta_wan ...           # ncu of bench_sparse.py cases (--no-flex): per case its first two fa3
#                                                  # launches, attnkit's block-sparse kernel and its dense fa3 at the same shape
#                                                  # (density: its 10% case; GPU_CHECK_PROFILE_SPARSE_LAUNCHES overrides)
#
# $OUT receives at most 8 files (the device tool's limit): summary.{json,md},
# bench_{attnkit,torch,variants,ab,sparse}.json and logs.tgz (every log, every
# backend's bench_fa2 JSON); the caller's own tee of stdout makes the eighth.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/out/gpu}"
BUILD="${BUILD:-/tmp/attnkit-gpu-build}"
JOBS="$(nproc)"
SKIP="${GPU_CHECK_SKIP:-}"
LOGS="$BUILD-logs"
rm -rf "$LOGS"
mkdir -p "$OUT" "$LOGS"
trap 'tar -C "$LOGS" -czf "$OUT/logs.tgz" . 2>/dev/null' EXIT
status=0
step() { echo; echo "=== $* ($(date +%T))"; }
skip() { [[ ",$SKIP," == *",$1,"* ]]; }
# FlashAttention-3's forward (the carried fa3-fwd wheel) into /tmp/akpeers, for PYTHONPATH.
install_fa3_fwd() {
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/akpeers "$ROOT"/.whl/fa3_fwd-*.whl \
    > "$LOGS/peers_install.log" 2>&1
}

step "environment"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv | tee "$LOGS/env.txt"
nvcc --version | tail -1 | tee -a "$LOGS/env.txt"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' \
  | tee -a "$LOGS/env.txt"

# Build dependencies: the image has none of fmt / yaml-cpp / nlohmann-json /
# highway / dlpack / gtest; .deps/ (ignored, carried) holds their Debian
# packages, unpacked into a private prefix, never into /.
CMAKE_EXTRA=()
if [[ -d "$ROOT/.deps" ]] && ! pkg-config --exists libhwy 2>/dev/null; then
  mkdir -p /tmp/akdeps
  for f in "$ROOT"/.deps/*.deb; do dpkg -x "$f" /tmp/akdeps; done
  P=/tmp/akdeps/usr
  export PKG_CONFIG_PATH="$P/lib/x86_64-linux-gnu/pkgconfig:$P/share/pkgconfig"
  export PKG_CONFIG_SYSROOT_DIR=/tmp/akdeps
  export LD_LIBRARY_PATH="$P/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
  CMAKE_EXTRA+=("-DCMAKE_PREFIX_PATH=$P")
fi

if ! skip build; then
  # Only the arch that runs here (sm_90 on the H200; GPU_CHECK_ARCHS overrides):
  # CI already compiles the sm_80 path, and every device second counts.
  archs="${GPU_CHECK_ARCHS:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')}"
  [[ "$archs" =~ ^[0-9]+$ ]] || archs=90
  step "configure + build (-j$JOBS, sm_$archs)"
  variants=OFF; { skip variants && [[ -z "${GPU_CHECK_PROFILE_VARIANT:-}" ]]; } || variants=ON
  # Compile only the variants this call runs (empty: all of them).
  variants_only="${GPU_CHECK_VARIANTS:-}"
  skip variants && [[ -n "${GPU_CHECK_PROFILE_VARIANT:-}" ]] && variants_only="${GPU_CHECK_PROFILE_VARIANT}\$"
  # The test binaries only for the steps that run them (a timing-only call skips their compile).
  targets=(attnkit_cli)
  { skip parity && skip sanitizer && [[ "${GPU_CHECK_SANITIZE_ALL:-0}" != 1 ]]; } \
    || targets+=(test_parity test_cuda_kernels test_sparse_gpu)
  { skip variants && skip bench && [[ "${GPU_CHECK_PROFILE:-0}" != 1 && -z "${GPU_CHECK_AB:-}" ]]; } || targets+=(bench_fa2)
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$archs" \
    -DATTNKIT_BENCH_FA2_VARIANTS=$variants -DATTNKIT_BENCH_VARIANTS_ONLY="$variants_only" \
    "${CMAKE_EXTRA[@]}" > "$LOGS/configure.log" 2>&1 || { tail -30 "$LOGS/configure.log"; exit 1; }
  cmake --build "$BUILD" -j"$JOBS" --target "${targets[@]}" > "$LOGS/build.log" 2>&1 \
    || { grep -E "error|Error" "$LOGS/build.log" | head -40; exit 1; }
  echo "build ok"
  # Every fa3 instance's key-loop instruction mix (uniform instructions, R2UR moves, HGMMAs)
  # into the logs, so each call records the SASS its timings ran (bench/gpu/sass_key_loop.py).
  python3 "$ROOT/bench/gpu/sass_key_loop.py" "$BUILD"/src/backends/cuda/CMakeFiles/attnkit_sm90a.dir/generated/fa3*_bf16_*.o \
    > "$LOGS/sass_key_loop.txt" 2>&1 || echo "sass_key_loop.py failed (logs.tgz: sass_key_loop.txt)"
  # The Python module is optional here: the image's Python may lack headers
  # (and the steps that run Python benchmarks are its only users).
  if ! { skip python && skip bench && skip cudnn && [[ "${GPU_CHECK_SPARSE:-0}" != 1 && "${GPU_CHECK_SKIP_SOFTMAX:-0}" != 1 \
         && -z "${GPU_CHECK_PEER_KERNELS:-}" && -z "${GPU_CHECK_PROFILE_SPARSE:-}" ]]; }; then
    cmake --build "$BUILD" -j"$JOBS" --target _attnkit > "$LOGS/build_python.log" 2>&1 \
      && echo "python module ok" || { echo "python module NOT built:"; grep -E "error|Error" "$LOGS/build_python.log" | head -10; }
  fi
fi

if ! skip parity; then
  step "GPU parity (ctest: fa3, fa2, cuda_sdpa)"
  # A kernel that deadlocks on a barrier must cost a minute, not the call.
  # GPU_CHECK_PARITY_REGEX: a subset (e.g. 'fa3'), for a short call; a landing runs them all.
  ctest --test-dir "$BUILD" -R "${GPU_CHECK_PARITY_REGEX:-fa3|fa2|cuda_sdpa|CudaBackends|CudaGatherRows|SlidingTileGpu|RasterTokensGpu|SkipSoftmaxGpu|SpargeGpu|SolGpu|VideoSparseGpu|HybridWindowGpu|SparseDeploymentGpu|ParityCoverage|Fa3}" -j"$JOBS" --timeout 120 \
    --output-on-failure > "$LOGS/parity.log" 2>&1
  rc=$?
  grep -E "tests passed|tests failed" "$LOGS/parity.log"
  grep -E "\*\*\*Failed|\*\*\*Exception|\*\*\*Timeout" "$LOGS/parity.log" | head -20
  # The failure messages themselves (gtest prints them under --output-on-failure).
  grep -E "Failure|rel_l2|accepts only|exception" "$LOGS/parity.log" | sort | uniq -c | head -20
  # Skips mean "declared it cannot run this case"; count what each backend ran.
  for b in fa3 fa2 cuda_sdpa; do
    echo "$b: $(grep -E "[/_]${b}_" "$LOGS/parity.log" | grep -c " Passed") passed," \
         "$(grep -E "[/_]${b}_" "$LOGS/parity.log" | grep -c "Skipped") refused by capability," \
         "$(grep -E "[/_]${b}_" "$LOGS/parity.log" | grep -c "Failed") failed"
  done
  [[ $rc -eq 0 ]] || status=1
fi

# cudnn only under memcheck: racecheck flags cuDNN's own SDPA kernel and synccheck
# overflows its barrier tracking there (see ATTNKIT_TEST_SKIP_BACKENDS in
# tests/testing/backend_runner.cpp); the kernel is cuDNN's, its aux kernels ours.
sanitizer_env() {
  if [[ $1 == memcheck ]]; then unset ATTNKIT_TEST_SKIP_BACKENDS; else export ATTNKIT_TEST_SKIP_BACKENDS=cudnn; fi
}

if ! skip sanitizer; then
  step "compute-sanitizer memcheck + racecheck + synccheck (small shapes)"
  SMALL='AllBackends/Parity.MatchesReference/fa2_s17_bf16_causal:AllBackends/Parity.MatchesReference/fa2_s127_f16:'\
'AllBackends/Parity.MatchesReference/fa2_d96_bf16:AllBackends/Parity.MatchesReference/fa2_d256_bf16:'\
'AllBackends/Parity.MatchesReference/fa2_varlen_causal_bf16:AllBackends/Parity.MatchesReference/fa2_softcap_sinks_lse_bf16:'\
'AllBackends/Parity.MatchesReference/cuda_sdpa_s17_f32_causal:AllBackends/Parity.MatchesReference/cuda_sdpa_paged_prefill_causal:'\
'AllBackends/Parity.MatchesReference/cuda_sdpa_block_sparse_per_head:AllBackends/Parity.MatchesReference/cuda_sdpa_custom_mask:'\
'AllBackends/Parity.MatchesReference/cuda_sdpa_dqk192_dv128:AllBackends/Parity.MatchesReference/cuda_sdpa_varlen_causal_bf16'
  SMALL="$SMALL:${SMALL//fa2_/fa3_}"  # every fa2 case again on fa3
  SMALL="$SMALL:AllBackends/Parity.MatchesReference/fa3_block_sparse_d128_*:AllBackends/Parity.MatchesReference/fa2_block_sparse_d128_*:AllBackends/Parity.MatchesReference/cuda_sdpa_block_sparse_d128_varlen_bf16"
  # rows whose max moves mid-row: the lazily rescaled instances (d128, d256, 128- and 192-key lists)
  SMALL="$SMALL:AllBackends/Parity.MatchesReference/fa3_rising_logits_*"
  SMALL_GPU='Gpu/CudaKernels.MatchesReference/fa2_window1_bf16:Gpu/CudaKernels.MatchesReference/fa2_lse_empty_rows_sinks_f16:'\
'Gpu/CudaKernels.MatchesReference/fa2_bhsd_causal_bf16:Gpu/CudaKernels.MatchesReference/fa3_varlen_long_causal_bf16:'\
'CudaBackends.BadDeviceBlockListsStayInBounds'
  SMALL_GPU="$SMALL_GPU:${SMALL_GPU//fa2_/fa3_}"
  # fa3's dynamic tile scheduler (tile numbers through shared memory, the workspace counter)
  SMALL_GPU="$SMALL_GPU:Gpu/CudaKernels.MatchesReference/fa3_dynamic_varlen_30_sequences_causal_bf16:"\
'Gpu/CudaKernels.MatchesReference/fa3_dynamic_160_tiles_window_d64_f16:'\
'Gpu/CudaKernels.MatchesReference/fa3_dynamic_block_sparse_varlen_12_sequences_f16'
  # long d128 key rows, empty sequences (lazy rescaling over many key tiles)
  SMALL_GPU="$SMALL_GPU:Gpu/CudaKernels.MatchesReference/fa3_long_keys_varlen_empty_sequences_f16"
  # d128 on the persistent walk and the dynamic scheduler: CTAs that store several tiles (through one
  # staging tile once O by TMA, kStoreOTma, ships on d128)
  SMALL_GPU="$SMALL_GPU:Gpu/CudaKernels.MatchesReference/fa3_persistent_144_tiles_d128_k1000_bf16:"\
'Gpu/CudaKernels.MatchesReference/fa3_dynamic_144_tiles_causal_d128_bf16'
  SMALL_GPU="$SMALL_GPU:GpuPaged/CudaKernels.MatchesReference/fa3_paged16_prefill_causal_gqa_lse_bf16:"\
'GpuPaged/CudaKernels.MatchesReference/fa3_paged256_window_mqa_bf16:GpuPaged/CudaKernels.MatchesReference/fa3_paged16_d256_causal_bf16'
  # device metadata that lies (cu_seqlens, seqlens_k, block tables): clamped, NaN, never out of bounds
  SMALL_GPU="$SMALL_GPU:CudaLyingMetadata.*"
  SPARSE_ORACLE_HEAVY='SolGpu.RoutingMatchesTheCpuRouting:SolGpu.RoutedCallsMatchTheCpuPlanAndTheOracle:'\
'VideoSparseGpu.CudaPlanMatchesTheCpuPlanAndTheOracle:HybridWindowGpu.CudaPlanMatchesTheCpuPlanAndTheOracle'
  # The three tools run at once (their own processes and logs; the machine has the cores): the
  # step took 211 s one tool after the other (2026-12-02, 16:14 UTC).
  small_sanitize() {  # one tool over the small-shape list; its two exit codes into sanitizer_<tool>.rc
    local tool=$1 log="$LOGS/sanitizer_$1.log" a b
    sanitizer_env "$tool"
    timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 99 "$BUILD/tests/test_parity" --gtest_filter="$SMALL" \
      > "$log" 2>&1
    a=$?
    timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 99 "$BUILD/tests/test_cuda_kernels" --gtest_filter="$SMALL_GPU" \
      >> "$log" 2>&1
    b=$?
    # The sparse CUDA paths (sliding tile, sparge, sol, VSA, hybrid) without their tests that
    # spend 10-30 s each in host oracles (SPARSE_ORACLE_HEAVY: GPU_CHECK_SANITIZE_ALL=1 runs
    # them); the rest still launch every kernel these paths have. Saves ~3 of the step's
    # ~7 minutes (2026-12-02).
    timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 99 "$BUILD/tests/test_sparse_gpu" \
      --gtest_filter="-SkipSoftmaxGpu.*:$SPARSE_ORACLE_HEAVY" >> "$log" 2>&1 || b=$?
    # The skip-softmax instances (fa3ss) on their own clock: four kernels, larger shapes.
    timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 99 "$BUILD/tests/test_sparse_gpu" \
      --gtest_filter='SkipSoftmaxGpu.*' >> "$log" 2>&1 || b=$?
    echo "$a $b" > "$LOGS/sanitizer_$tool.rc"
  }
  # GPU_CHECK_SANITIZE_KERNELS_ONLY=<gtest filter>: only those test_cuda_kernels cases, under the three tools
  # (a short device call that checks one kernel change; the step's full list is what a landing needs).
  kernels_only() {
    local tool=$1 log="$LOGS/sanitizer_$1.log"
    sanitizer_env "$tool"
    timeout 300 compute-sanitizer --tool "$tool" --error-exitcode 99 "$BUILD/tests/test_cuda_kernels" \
      --gtest_filter="$GPU_CHECK_SANITIZE_KERNELS_ONLY" > "$log" 2>&1
    echo "0 $?" > "$LOGS/sanitizer_$tool.rc"
  }
  for tool in memcheck racecheck synccheck; do
    if [[ -n "${GPU_CHECK_SANITIZE_KERNELS_ONLY:-}" ]]; then kernels_only "$tool" & else small_sanitize "$tool" & fi
  done
  wait
  for tool in memcheck racecheck synccheck; do
    read -r a b < "$LOGS/sanitizer_$tool.rc" 2>/dev/null || { a=1; b=1; }
    echo "$tool: exit $a / $b; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY' "$LOGS/sanitizer_${tool}.log" | tr '\n' ' ')"
    [[ $a -eq 0 && $b -eq 0 ]] || status=1
  done
  unset ATTNKIT_TEST_SKIP_BACKENDS
fi

# The whole GPU parity suite under the three tools (GPU_CHECK_SANITIZE_ALL=1;
# issue 20): every parity case of fa3 / fa2 / cuda_sdpa, all of
# test_cuda_kernels and all of test_sparse_gpu, not only the small shapes
# above. Minutes per tool: GPU_CHECK_SANITIZE_TOOLS splits them over calls.
if [[ "${GPU_CHECK_SANITIZE_ALL:-0}" == 1 ]]; then
  step "compute-sanitizer over the whole GPU parity suite"
  bins=" ${GPU_CHECK_SANITIZE_BINS:-parity cuda_kernels sparse_gpu} "
  # Each (tool, binary) pair is split into GPU_CHECK_SANITIZE_SHARDS gtest shards
  # (GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX: every test in exactly one shard) and
  # every shard runs as its own compute-sanitizer process at once, each with its own
  # log and timeout (a racecheck'd case of a few hundred CTAs took up to 163 s alone,
  # 2026-12-02, one process at a time; how much the shards gain on one GPU is for the
  # device log to say).
  shards="${GPU_CHECK_SANITIZE_SHARDS:-1}"
  shard_timeout="${GPU_CHECK_SANITIZE_TIMEOUT:-900}"
  whole_suite_shard() {  # tool bin shard: one compute-sanitizer process, its exit code in <log>.rc
    local tool=$1 bin=$2 shard=$3 log="$LOGS/sanitizer_all_$1_$2_$3.log" filter
    case $bin in
      parity) filter='AllBackends/Parity.MatchesReference/fa3_*:AllBackends/Parity.MatchesReference/fa2_*:AllBackends/Parity.MatchesReference/cuda_sdpa_*' ;;
      cuda_kernels)
        filter="${GPU_CHECK_SANITIZE_KERNELS_FILTER:-*}"
        # Under racecheck the generic kernel's copies of the many-tile cases are left
        # out: those shapes exist for fa3 / fa2's persistent and dynamic walks and
        # long d128 key rows, while cuda_sdpa runs one CTA per query block, the same loop
        # at any size (its paths, paged / listed / varlen / masks, are racechecked in
        # the parity binary); up to 163 s each under racecheck alone (2026-12-02).
        [[ $tool == racecheck && -z "${GPU_CHECK_SANITIZE_KERNELS_FILTER:-}" ]] &&
          filter='*:-*/cuda_sdpa_persistent_*:*/cuda_sdpa_dynamic_*:*/cuda_sdpa_long_keys_*' ;;
      *) filter='*' ;;
    esac
    sanitizer_env "$tool"
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$shard timeout "$shard_timeout" \
      compute-sanitizer --tool "$tool" --error-exitcode 99 "$BUILD/tests/test_$bin" --gtest_filter="$filter" \
      > "$log" 2>&1
    echo $? > "$log.rc"
  }
  tools="${GPU_CHECK_SANITIZE_TOOLS:-memcheck racecheck synccheck}"
  run_bins=()  # the known binaries the caller named, in this order
  for bin in parity cuda_kernels sparse_gpu; do [[ $bins == *" $bin "* ]] && run_bins+=("$bin"); done
  for tool in $tools; do
    for bin in "${run_bins[@]}"; do
      for ((i = 0; i < shards; ++i)); do whole_suite_shard "$tool" "$bin" "$i" & done
    done
  done
  wait
  for tool in $tools; do
    for bin in "${run_bins[@]}"; do
      for ((i = 0; i < shards; ++i)); do
        log="$LOGS/sanitizer_all_${tool}_${bin}_$i.log"
        rc="$(cat "$log.rc" 2>/dev/null || echo missing)"
        # 124: the shard's timeout; its finished tests still count, the suite is not claimed.
        echo "$tool $bin shard $i/$shards: exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK SUMMARY' "$log" | tr '\n' ' ')" \
             "$(grep -cE '^\[       OK \]' "$log") ok, $(grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$log") failed;" \
             "$(grep -E '^\[  (PASSED|FAILED) ' "$log" | tr '\n' ' ')"
        [[ $rc == 0 ]] || status=1
      done
    done
  done
  unset ATTNKIT_TEST_SKIP_BACKENDS
fi

# ---- cudnn backend (issue 16): its GPU tests, its share of the parity harness,
# memcheck on its padded / ragged / paged paths. Own step (GPU_CHECK_SKIP=cudnn);
# the dense-grid comparison with PyTorch's cuDNN runs in the bench step with
# GPU_CHECK_BACKENDS=fa3,fa2,cudnn (report.py adds the cudnn / torch-cuDNN table).
if ! skip cudnn; then
  step "cudnn backend: test_cudnn, parity (cudnn cases), memcheck"
  if cmake --build "$BUILD" -j"$JOBS" --target test_cudnn test_parity > "$LOGS/build_cudnn.log" 2>&1; then
    # The newest cuDNN on the machine (PyTorch's wheel: 9.19 on the H200 image; the
    # system's is 9.14): the one a Python user running torch gets, and what the
    # targets of issue 16 are measured against.
    torch_cudnn="$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib", "libcudnn.so.9"))' 2>/dev/null)"
    [[ -f "$torch_cudnn" ]] && export ATTNKIT_CUDNN_LIBRARY="$torch_cudnn"
    "$BUILD/tests/test_cudnn" > "$LOGS/test_cudnn.log" 2>&1 || status=1
    grep -E "^cuDNN |first build|slowest|Failure|FAILED|Skipped" "$LOGS/test_cudnn.log" | head -30
    tail -3 "$LOGS/test_cudnn.log"
    "$BUILD/tests/test_parity" --gtest_filter='AllBackends/Parity.MatchesReference/cudnn_*:ParityCoverage.*' \
      > "$LOGS/parity_cudnn.log" 2>&1 || status=1
    echo "cudnn parity: $(grep -cE '^\[       OK \] .*cudnn_.* \([0-9]+ ms\)$' "$LOGS/parity_cudnn.log") passed," \
         "$(grep -cE '^\[  SKIPPED \] .*cudnn_.* \([0-9]+ ms\)$' "$LOGS/parity_cudnn.log") refused by check," \
         "$(grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$LOGS/parity_cudnn.log") failed"
    grep -A3 -E "^\[ RUN .*cudnn_" "$LOGS/parity_cudnn.log" | grep -E "declares it cannot|Failure|AK[0-9]{4}" | sort | uniq | head -30
    compute-sanitizer --tool memcheck --error-exitcode 99 "$BUILD/tests/test_cudnn" \
      --gtest_filter='Cases/CudnnGpu.MatchesReference/varlen_causal_lse_sinks_bf16:Cases/CudnnGpu.MatchesReference/paged_decode_lse_bf16:Cases/CudnnGpu.MatchesReference/paged_prefill_causal_sinks_bf16:Cases/CudnnGpu.MatchesReference/causal_q333_k300_lse_sinks_bf16:Cases/CudnnGpu.MatchesReference/window_q500_k400_lse_bf16' \
      > "$LOGS/sanitizer_cudnn.log" 2>&1
    a=$?
    echo "cudnn memcheck: exit $a; $(grep -E 'ERROR SUMMARY' "$LOGS/sanitizer_cudnn.log" | tr '\n' ' ')"
    [[ $a -eq 0 ]] || status=1
    if [[ -n "${ATTNKIT_CUDNN_LIBRARY:-}" ]]; then  # the same build-time test on the system's cuDNN, for the record
      env -u ATTNKIT_CUDNN_LIBRARY "$BUILD/tests/test_cudnn" --gtest_filter='CudnnGpuPlan.GraphBuild*' \
        > "$LOGS/test_cudnn_system.log" 2>&1
      echo "system cuDNN: $(grep -E '^cuDNN |slowest' "$LOGS/test_cudnn_system.log" | tr '\n' ' ')"
    fi
    unset ATTNKIT_CUDNN_LIBRARY
    if [[ -f "$BUILD/python/attnkit/__init__.py" ]]; then  # kernels torch's cuDNN and ours launch, same process
      PYTHONPATH="$BUILD/python" timeout 120 python3 "$ROOT/bench/gpu/cudnn_kernels.py" > "$LOGS/cudnn_kernels.log" 2>&1
      cat "$LOGS/cudnn_kernels.log"
    fi
  else
    echo "test_cudnn did not build:"; grep -E "error|Error" "$LOGS/build_cudnn.log" | head -20; status=1
  fi
fi

# ---- sequence parallelism (issue 17) on one GPU: the NCCL communicator at
# world size 1, ring / Ulysses / USP through the in-process group with fa3 /
# fa2 / cuda_sdpa inside. (More GPUs: issue 18, a multi-GPU kind.)
if ! skip dist; then
  step "dist: test_dist_gpu (NCCL at world size 1, ring / Ulysses / USP on one GPU)"
  if cmake --build "$BUILD" -j"$JOBS" --target test_dist_gpu > "$LOGS/build_dist.log" 2>&1; then
    timeout 300 "$BUILD/tests/test_dist_gpu" > "$LOGS/test_dist_gpu.log" 2>&1 || status=1
    grep -E "Failure|FAILED|SKIPPED|Skipped|no NCCL" "$LOGS/test_dist_gpu.log" | sort | uniq -c | head -20
    tail -3 "$LOGS/test_dist_gpu.log"
    timeout 300 compute-sanitizer --tool memcheck --error-exitcode 99 "$BUILD/tests/test_dist_gpu" \
      --gtest_filter='*Ring*:*Ulysses*' > "$LOGS/sanitizer_dist.log" 2>&1
    a=$?
    echo "dist memcheck: exit $a; $(grep -E 'ERROR SUMMARY' "$LOGS/sanitizer_dist.log" | tr '\n' ' ')"
    [[ $a -eq 0 ]] || status=1
  else
    echo "test_dist_gpu did not build:"; grep -E "error|Error" "$LOGS/build_dist.log" | head -20; status=1
  fi
fi

if ! skip python; then
  step "Python module on CUDA tensors (pytest) and the examples on the GPU"
  # cupy is not in the image and the machine has no registry: a repacked
  # cupy-cuda13x wheel (tar.xz, under the carry limit) and fastrlock in .deps/
  # make python/tests/test_attention_cupy.py run (it skips otherwise).
  pypath="$BUILD/python"
  if ls "$ROOT"/.deps/cupy_*.tar.xz >/dev/null 2>&1 && ! python3 -c 'import cupy' 2>/dev/null; then
    mkdir -p /tmp/akcupy
    tar -C /tmp/akcupy -xJf "$ROOT"/.deps/cupy_*.tar.xz
    for w in "$ROOT"/.deps/fastrlock-*.whl; do python3 -m zipfile -e "$w" /tmp/akcupy; done
    pypath="$pypath:/tmp/akcupy"
    echo "cupy unpacked from .deps/"
  fi
  if [[ -f "$BUILD/python/attnkit/__init__.py" ]] && ls "$BUILD"/python/attnkit/_attnkit*.so >/dev/null 2>&1; then
    ATTNKIT_CLI="$BUILD/src/cli/attnkit" PYTHONFAULTHANDLER=1 PYTHONPATH="$pypath" CUDA_PATH="${CUDA_PATH:-/usr/local/cuda}" python3 -m pytest -v --durations=20 "$ROOT/python/tests" > "$LOGS/pytest.log" 2>&1 \
      || status=1
    tail -1 "$LOGS/pytest.log"
    grep -E "FAILED|Error|Fatal|File .*attnkit" "$LOGS/pytest.log" | head -12
    for ex in "dit_block.py --dtype bf16" "llm_decode.py"; do
      PYTHONPATH="$BUILD/python" python3 "$ROOT/python/examples/"$ex 2>&1 | tail -2 || status=1
    done
  else
    echo "skipped: no Python module in $BUILD/python"
  fi
fi

if ! skip wheel; then
  # What a user does on a CUDA machine: `pip install .` (scikit-build-core,
  # the image's own nanobind and torch: no network), then the same tests
  # against the installed package instead of the build tree.
  step "pip install . on this CUDA machine, tests against the installed package"
  site=/tmp/attnkit-site
  rm -rf "$site"
  if CMAKE_PREFIX_PATH="${P:-}" SKBUILD_CMAKE_DEFINE="CMAKE_CUDA_ARCHITECTURES=90" \
      python3 -m pip install --no-build-isolation --no-deps --target "$site" -v "$ROOT" > "$LOGS/pip_install.log" 2>&1; then
    (cd /tmp && PYTHONPATH="$site" python3 -c 'import attnkit; print("installed:", attnkit.__file__)' \
      && PYTHONPATH="$site" python3 -m pytest -q -p no:cacheprovider "$ROOT/python/tests" > "$LOGS/pytest_installed.log" 2>&1) \
      || status=1
    tail -1 "$LOGS/pytest_installed.log"
  else
    echo "pip install . FAILED:"; grep -E "rror|not found|No module" "$LOGS/pip_install.log" | head -15; status=1
  fi
fi

if ! skip run; then
  step "attnkit run (the main job) on this GPU"
  "$BUILD/src/cli/attnkit" run 2>&1 | tee "$LOGS/run_default.log" || status=1
  "$BUILD/src/cli/attnkit" run --seqlen 4096 --causal --heads 32 --kv-heads 8 --format json 2>&1 \
    | tee "$LOGS/run_causal.json" || status=1
fi

if [[ "${GPU_CHECK_PROFILE:-0}" == 1 ]]; then
  pd="${GPU_CHECK_PROFILE_DIM:-128}" ps="${GPU_CHECK_PROFILE_SEQLEN:-4096}" pb="${GPU_CHECK_PROFILE_BACKEND:-fa2}"
  # fa2 is profiled against PyTorch's FLASH, fa3 against FlashAttention-3's hopper kernel (the fa3-fwd wheel);
  # GPU_CHECK_PROFILE_PEER=cudnn: against PyTorch's cuDNN SDPA kernel instead (the short causal rows' leader).
  peer="${GPU_CHECK_PROFILE_PEER:-}"; [[ -n "$peer" ]] || { [[ "$pb" == fa3 ]] && peer=fa3_fwd || peer=flash; }
  case "$peer" in
    fa3_fwd) peer_kernel='regex:FlashAttn|flash_fwd|device_kernel' peer_flags=(--fa3 --backends ""); install_fa3_fwd ;;
    cudnn) peer_kernel='regex:cudnn|fprop' peer_flags=(--backends cudnn) ;;
    flash) peer_kernel=regex:flash_fwd peer_flags=(--backends flash) ;;
    *) echo "GPU_CHECK_PROFILE_PEER=$peer: expected fa3_fwd, cudnn or flash"; exit 2 ;;
  esac
  pmask=full; [[ "${GPU_CHECK_PROFILE_CAUSAL:-0}" == 1 ]] && pmask=causal
  step "ncu: $pb vs $peer, bf16 d$pd s$ps $pmask (reports in logs.tgz)"
  # GPU_CHECK_PROFILE_VARIANT=<name in fa2_variants.def / fa3_variants.def>: that variant instead of the shipped kernel.
  pv="${GPU_CHECK_PROFILE_VARIANT:-}"
  if [[ -n "$pv" ]]; then ak_kernel="regex:[0-9]${pv}_traits" ak_args=(--variants --only "$pv");
  else ak_kernel="regex:${pb}_forward" ak_args=(--backend "$pb" --dims "$pd"); fi
  ncu --set full --import-source yes --kernel-name-base mangled -k "$ak_kernel" --launch-skip 2 --launch-count 1 -f \
    -o "$LOGS/ncu_$pb" "$BUILD/bench/gpu/bench_fa2" "${ak_args[@]}" --seqlens "$ps" --masks "$pmask" --iters 1 --warmup 2 \
    > "$LOGS/ncu_$pb.log" 2>&1
  PYTHONPATH=/tmp/akpeers ncu --set full -k "$peer_kernel" --launch-skip 2 --launch-count 1 -f -o "$LOGS/ncu_$peer" \
    python3 "$ROOT/bench/gpu/bench_torch_sdpa.py" "${peer_flags[@]}" --dims "$pd" --seqlens "$ps" --masks "$pmask" \
    --iters 1 --warmup 2 --json /dev/null > "$LOGS/ncu_$peer.log" 2>&1
  for r in "$pb" "$peer"; do
    ncu -i "$LOGS/ncu_$r.ncu-rep" --page details > "$LOGS/ncu_${r}_details.txt" 2>&1
    ncu -i "$LOGS/ncu_$r.ncu-rep" --page source --print-source sass --csv > "$LOGS/ncu_${r}_sass.csv" 2>&1
    grep -E "Duration|DRAM Throughput|Compute \(SM\) Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy|Executed Ipc A|No Eligible|Local Memory" \
      "$LOGS/ncu_${r}_details.txt" | sed "s/^/$r: /" | head -16
    # Where warps wait: the stall reasons, cycles per issued instruction.
    ncu -i "$LOGS/ncu_$r.ncu-rep" --page raw --csv --metrics regex:smsp__average_warp.*issue_stalled_.*_per_issue_active \
      > "$LOGS/ncu_${r}_stalls.csv" 2>&1
    python3 - "$LOGS/ncu_${r}_stalls.csv" "$r" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
if len(rows) >= 3:
    vals = {h.split("stalled_")[1].split("_per")[0]: v for h, v in zip(rows[0], rows[-1]) if "stalled_" in h}
    top = sorted(((float(v.replace(",", "")), k) for k, v in vals.items() if v.replace(",", "").replace(".", "").isdigit()), reverse=True)[:8]
    print(sys.argv[2] + " stalls/issue:", "  ".join(f"{k} {v:.2f}" for v, k in top))
PY
  done
fi

if ! skip variants; then
  vseq="${GPU_CHECK_VARIANT_SEQLENS:-1024,4096,16384}"
  step "fa2 tile-shape variants (bench/gpu/fa2_variants.def), bf16, s$vseq"
  timeout 480 "$BUILD/bench/gpu/bench_fa2" --variants ${GPU_CHECK_VARIANTS:+--only "$GPU_CHECK_VARIANTS"} --seqlens "$vseq" --iters 20 \
    --tile-counter "${GPU_CHECK_VARIANT_TILE_COUNTER:-on}" ${GPU_CHECK_VARIANT_WALK_GROUPS:+--walk-groups "$GPU_CHECK_VARIANT_WALK_GROUPS"} \
    --json "$OUT/bench_variants.json" \
    > "$LOGS/variants.log" 2>&1 || status=1
  cat "$LOGS/variants.log"
fi

# Which kernels PyTorch's cuDNN, FlashAttention-3 and attnkit's fa3 launch for
# the same calls (grid, block, shared memory, registers, median us).
if [[ -n "${GPU_CHECK_PEER_KERNELS:-}" ]]; then
  step "kernels per implementation (bench/gpu/cudnn_kernels.py), $GPU_CHECK_PEER_KERNELS"
  install_fa3_fwd || echo "fa3-fwd did not install (peers_install.log)"
  PYTHONPATH="$BUILD/python:/tmp/akpeers" timeout 180 python3 "$ROOT/bench/gpu/cudnn_kernels.py" \
    --impls torch_cudnn,fa3_fwd,attnkit_fa3 --shapes "$GPU_CHECK_PEER_KERNELS" > "$LOGS/peer_kernels.log" 2>&1 || status=1
  grep -vi warn "$LOGS/peer_kernels.log" | cut -c1-260
fi

if [[ -n "${GPU_CHECK_AB:-}" ]]; then
  ab_dims="${GPU_CHECK_AB_DIMS:-64,128,256}" ab_seq="${GPU_CHECK_SEQLENS:-512,2048,16384}"
  ab_backend="${GPU_CHECK_AB_BACKEND:-fa2}"
  step "A/B: bench_fa2 --backend $ab_backend of this tree vs $GPU_CHECK_AB (d$ab_dims, s$ab_seq), alternated"
  ab_src=/tmp/attnkit-ab-src ab_build="$BUILD-ab"
  # A failed rebuild must not fall back on an older baseline left in $ab_build.
  if rm -rf "$ab_src" && mkdir -p "$ab_src" && tar -xf "$ROOT/$GPU_CHECK_AB" -C "$ab_src" \
    && cmake -S "$ab_src" -B "$ab_build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${archs:-90}" \
         "${CMAKE_EXTRA[@]}" > "$LOGS/ab_configure.log" 2>&1 \
    && cmake --build "$ab_build" -j"$JOBS" --target bench_fa2 > "$LOGS/ab_build.log" 2>&1; then
    new_runs=() base_runs=()
    for r in $(seq 1 "${GPU_CHECK_AB_ROUNDS:-2}"); do
      "$BUILD/bench/gpu/bench_fa2" --backend "$ab_backend" --dims "$ab_dims" --seqlens "$ab_seq" --iters 20 \
        --json "$LOGS/ab_new_$r.json" > /dev/null 2>>"$LOGS/ab_bench.log" && new_runs+=("$LOGS/ab_new_$r.json")
      "$ab_build/bench/gpu/bench_fa2" --backend "$ab_backend" --dims "$ab_dims" --seqlens "$ab_seq" --iters 20 \
        --json "$LOGS/ab_base_$r.json" > /dev/null 2>>"$LOGS/ab_bench.log" && base_runs+=("$LOGS/ab_base_$r.json")
    done
    if (( ${#new_runs[@]} == 0 || ${#base_runs[@]} == 0 )); then
      echo "A/B: bench_fa2 failed:"; tail -5 "$LOGS/ab_bench.log"; status=1
    else
      python3 "$ROOT/bench/gpu/ab_report.py" --new "${new_runs[@]}" --base "${base_runs[@]}" --out-json "$OUT/bench_ab.json" \
        || status=1
    fi
  else
    echo "A/B baseline did not build:"; tail -20 "$LOGS/ab_build.log" "$LOGS/ab_configure.log" 2>/dev/null; status=1
  fi
fi

# ---- block-sparse video attention (issue 19): attnkit's fa3 over block-sparse
# lists vs FlexAttention (same block mask), FastVideo's sliding-tile kernels
# (.whl/fastvideo_kernel-*.whl when carried) and dense cuDNN. Opt-in
# (GPU_CHECK_SPARSE=1; GPU_CHECK_SPARSE_ONLY=sta_wan,density picks cases, GPU_CHECK_SPARSE_ARGS=--no-flex
# drops FlexAttention's compile per case; video_backends times
# sparge_attn, sol_attn, video_sparse_attn_h3 and hybrid_window_attn_h3 against fa3 dense).
if [[ "${GPU_CHECK_SPARSE:-0}" == 1 ]]; then
  step "block-sparse: bench_sparse.py (attnkit fa3 sparse vs FlexAttention, FastVideo STA, cuDNN dense)"
  sp_path="$BUILD/python"
  if ls "$ROOT"/.whl/fastvideo_kernel-*.whl >/dev/null 2>&1; then
    "$ROOT/scripts/fastvideo_peer.sh" /tmp/akfastvideo > "$LOGS/fastvideo_install.log" 2>&1 \
      && sp_path="$sp_path:/tmp/akfastvideo" || { echo "fastvideo-kernel did not install:"; tail -3 "$LOGS/fastvideo_install.log"; }
  fi
  preload=""; [[ "$sp_path" == *akfastvideo* ]] && preload=/tmp/akfastvideo/stub/libak_nccl_stub.so
  PYTHONUNBUFFERED=1 PYTHONPATH="$sp_path" LD_PRELOAD="$preload" \
    timeout 420 python3 "$ROOT/bench/gpu/bench_sparse.py" --json "$OUT/bench_sparse.json" \
    ${GPU_CHECK_SPARSE_ONLY:+--only $GPU_CHECK_SPARSE_ONLY} ${GPU_CHECK_SPARSE_ARGS:-} > "$LOGS/bench_sparse.log" 2>&1 || status=1
  grep -vE "Warning|warn" "$LOGS/bench_sparse.log" | tail -40
fi

# ncu of a block-sparse case: where the sparse kernel's time goes against the
# dense kernel's at the same shape (GPU_CHECK_PROFILE_SPARSE=<case>).
if [[ -n "${GPU_CHECK_PROFILE_SPARSE:-}" ]]; then
  pcase="$GPU_CHECK_PROFILE_SPARSE" pcases="${GPU_CHECK_PROFILE_SPARSE//,/ }"
  plaunches="${GPU_CHECK_PROFILE_SPARSE_LAUNCHES:-$((2 * $(wc -w <<< "$pcases")))}"
  step "ncu: bench_sparse.py $pcase, attnkit's fa3 block-sparse and dense kernels (reports in logs.tgz)"
  PYTHONPATH="$BUILD/python" timeout 400 ncu --set full --import-source yes -k regex:fa3_forward --launch-count "$plaunches" -f \
    -o "$LOGS/ncu_sparse" python3 "$ROOT/bench/gpu/bench_sparse.py" --json /dev/null --only "$pcase" --iters 1 \
    --warmup 1 --no-flex > "$LOGS/ncu_sparse.log" 2>&1 || { status=1; tail -5 "$LOGS/ncu_sparse.log"; }
  ncu -i "$LOGS/ncu_sparse.ncu-rep" --page details > "$LOGS/ncu_sparse_details.txt" 2>&1
  ncu -i "$LOGS/ncu_sparse.ncu-rep" --page source --print-source sass --csv > "$LOGS/ncu_sparse_sass.csv" 2>&1
  ncu -i "$LOGS/ncu_sparse.ncu-rep" --page raw --csv > "$LOGS/ncu_sparse_raw.csv" 2>&1
  grep -E "fa3_forward|Duration|Compute \(SM\) Throughput|L2 Hit Rate|DRAM Throughput|Issue Slots Busy|No Eligible|Local Memory" \
    "$LOGS/ncu_sparse_details.txt" | cut -c1-140 | head -24
fi

# Request skip-softmax on fa3 against its dense kernel (GPU_CHECK_SKIP_SOFTMAX=1).
if [[ "${GPU_CHECK_SKIP_SOFTMAX:-0}" == 1 ]]; then
  step "skip-softmax: bench_skip_softmax.py (fa3 with request skip-softmax vs dense, video-like inputs)"
  PYTHONUNBUFFERED=1 PYTHONPATH="$BUILD/python" timeout 300 python3 "$ROOT/bench/gpu/bench_skip_softmax.py" \
    --json "$LOGS/bench_skip_softmax.json" > "$LOGS/bench_skip_softmax.log" 2>&1 || status=1
  tail -12 "$LOGS/bench_skip_softmax.log"
fi

if ! skip bench; then
  backends="${GPU_CHECK_BACKENDS:-fa3,fa2}"
  step "benchmark: attnkit $backends vs FA3 and PyTorch SDPA (flash, cuDNN) in one process, bf16 dense grid"
  ak_json=()
  for b in ${backends//,/ }; do
    timeout 300 "$BUILD/bench/gpu/bench_fa2" --backend "$b" ${GPU_CHECK_SEQLENS:+--seqlens $GPU_CHECK_SEQLENS} \
      --json "$LOGS/bench_attnkit_$b.json" > "$LOGS/bench_attnkit_$b.log" 2>&1 && ak_json+=("$LOGS/bench_attnkit_$b.json") \
      || { status=1; echo "bench_fa2 --backend $b failed:"; tail -3 "$LOGS/bench_attnkit_$b.log"; }
  done
  # The peers, and attnkit again through the Python module in their process,
  # interleaved per grid point (design §6); the ratios come from this run.
  peer_args=(--video)
  ls "$BUILD"/python/attnkit/_attnkit*.so >/dev/null 2>&1 && peer_args+=(--attnkit --attnkit-backend "$backends")
  if ls "$ROOT"/.whl/fa3_fwd-*.whl >/dev/null 2>&1; then
    install_fa3_fwd && peer_args+=(--fa3) || echo "fa3-fwd did not install (peers_install.log)"
  fi
  # shellcheck disable=SC2086  # GPU_CHECK_TORCH_ARGS is a list of flags
  PYTHONUNBUFFERED=1 PYTHONPATH="$BUILD/python:/tmp/akpeers" timeout 420 python3 "$ROOT/bench/gpu/bench_torch_sdpa.py" \
    "${peer_args[@]}" ${GPU_CHECK_SEQLENS:+--seqlens $GPU_CHECK_SEQLENS} ${GPU_CHECK_TORCH_ARGS:-} \
    --json "$OUT/bench_torch.json" > "$LOGS/bench_torch.log" 2>&1 \
    || { status=1; grep -E "MISMATCH|Error|mismatch" "$LOGS/bench_torch.log" | head; }
  step "summary"
  if ((${#ak_json[@]})); then
    cp "${ak_json[0]}" "$OUT/bench_attnkit.json"
    python3 "$ROOT/bench/gpu/report.py" --attnkit "${ak_json[@]}" --torch "$OUT/bench_torch.json" \
      --out-json "$OUT/summary.json" --out-md "$OUT/summary.md" || status=1
  fi
fi
exit $status
