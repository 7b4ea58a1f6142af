#!/usr/bin/env bash
# The long fuzz run of issue 16 point 3: all seven targets side by side, then every artifact
# classified and replayed through the release CLI. Runs from a bundle (fuzz binaries + scurry + their
# shared libraries, /work/shared/gpu/bundle.sh) on a machine without clang, h5py or a symbolizer.
#
#   fuzz/longrun.sh BIN_DIR OUT_DIR [SECONDS] [CORES]
#     BIN_DIR  holds fuzz_h5ad fuzz_tenx_h5 fuzz_tenx_mtx fuzz_zarr_meta fuzz_zarr_{blosc,zstd,gzip}
#              and scurry (a bundle's bin/; set LD_LIBRARY_PATH to its lib/)
#     OUT_DIR  work directory: OUT_DIR/<target>/{corpus,art,fuzz.log,replay/}, OUT_DIR/summary.txt,
#              and OUT_DIR/longrun.tgz (logs, summary, artifacts; not the grown corpora)
#     SECONDS  per target, libFuzzer's -max_total_time (default 3600)
#     CORES    in all (default: nproc); each target gets -fork=K jobs in proportion to its cost per
#              execution (RESULTS section 46: h5ad 10.5 ms, zarr_gzip 10, zarr_blosc 9.5, zarr_zstd
#              7.7, zarr_meta 5.1, tenx_h5 3.1, tenx_mtx 0.63), at least one each, so that the seven
#              reach similar execution counts; SCURRY_FUZZ_JOBS="fuzz_h5ad=4 fuzz_tenx_mtx=1 ..."
#              sets them by hand (=0: that target not run)
#   SCURRY_FUZZ_RESUME=DIR   also start each target from DIR/<target>/ (the grown corpus of an
#              earlier run, e.g. unpacked from its corpora.tar.xz): a long run in several pieces
#   SCURRY_FUZZ_KEEP_CORPUS=1   pack the grown corpora into OUT_DIR/corpora.tar.xz for the next piece
#   SCURRY_FUZZ_LEAKS=0      no LeakSanitizer (-detect_leaks=0): 1.3-1.5x the executions per second
#              (h5ad: 135 against 91 per core), leaks then not sought; the CI smoke runs seek them
#   fuzz/longrun.sh --classify BIN_DIR OUT_DIR [SECONDS] [CORES]   redo only the classification and
#              the CLI replays
#              (e.g. on the development machine, where llvm-symbolizer names every frame)
#
# Seeds: fuzz/corpus/<target>/ next to this script. Each run (fuzz/README.md, bench/RESULTS.md
# section 11): -fork=K -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 -timeout=10
# -rss_limit_mb=4096 -malloc_limit_mb=2048 -close_fd_mask=2 (one allocation past 2 GB is an OOM; the resident set may reach 4 GB, as libhdf5 leaks on damaged files add up over a job of many inputs), ASAN_OPTIONS allocator_may_return_null=1 (libhdf5's absurd
# mallocs return NULL as outside the sanitizer), LeakSanitizer with fuzz/lsan.supp (libhdf5's own
# leaks). Per target it prints executions (libFuzzer's last "#N:" status line), exec/s, and the
# crash, hang (timeout), OOM and leak artifacts. Every artifact is then
#   1. replayed through its fuzz binary (one input, -timeout=10) and classified by the first frame
#      of its report that is not the sanitizer's, libFuzzer's or libc's: inside libhdf5 or not;
#   2. turned into the file or directory the target built from it (SCURRY_FUZZ_MATERIALIZE) and
#      given to the release CLI: `scurry convert IN out.h5ad` in an empty directory, which must
#      end with exit 2, exactly one "scurry: error:" (or the crash guard's "scurry: corrupt HDF5 file:") line on stderr (after any "scurry: warning:" lines) and nothing left in the directory ("clean"), or
#      exit 0 with out.h5ad and no temporary ("accepted": an input libhdf5 leaked or ran out of
#      memory on, that is still a valid file). Anything else is "BAD".
# Exit status: 0 when no artifact outside libhdf5 was found and every replay was clean or
# accepted; 1 otherwise.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
TARGETS=(fuzz_h5ad fuzz_tenx_h5 fuzz_zarr_blosc fuzz_zarr_zstd fuzz_zarr_gzip fuzz_zarr_meta fuzz_tenx_mtx)

classify_only=0
if [ "${1:-}" = "--classify" ]; then classify_only=1; shift; fi
[ $# -ge 2 ] || { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }
BIN=$(cd "$1" && pwd); OUT=$2; SECS=${3:-3600}; CORES=${4:-$(nproc)}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
for t in "${TARGETS[@]}" scurry; do
  [ -x "$BIN/$t" ] || { echo "longrun.sh: $BIN/$t is missing (build the fuzz targets and scurry, see fuzz/README.md)" >&2; exit 2; }
done

export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1:allow_addr2line=1"
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$here/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}print_stacktrace=1"
# One OpenMP thread per fuzzing process (the targets set it too): K jobs x 7 targets share the cores.
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive

# ---- the runs ------------------------------------------------------------------------------------
if [ $classify_only = 0 ]; then
  # Jobs per target: proportional to its cost per execution (largest remainders), at least one.
  declare -A JOBS
  if [ -n "${SCURRY_FUZZ_JOBS:-}" ]; then
    for kv in $SCURRY_FUZZ_JOBS; do JOBS[${kv%%=*}]=${kv#*=}; done
  else
    while read -r t k; do JOBS[$t]=$k; done < <(awk -v cores="$CORES" '
      BEGIN { n = split("fuzz_h5ad:10.5 fuzz_tenx_h5:3.1 fuzz_zarr_blosc:9.5 fuzz_zarr_zstd:7.7 fuzz_zarr_gzip:10 fuzz_zarr_meta:5.1 fuzz_tenx_mtx:0.63", e, " ")
        for (i = 1; i <= n; i++) { split(e[i], p, ":"); name[i] = p[1]; c[i] = p[2]; sum += p[2] }
        left = cores
        for (i = 1; i <= n; i++) { q = cores * c[i] / sum; k[i] = int(q); if (k[i] < 1) k[i] = 1; r[i] = q - int(q); left -= k[i] }
        while (left > 0) { b = 0; for (i = 1; i <= n; i++) if (b == 0 || r[i] > r[b]) b = i; k[b]++; r[b] = -1; left-- }
        for (i = 1; i <= n; i++) print name[i], k[i] }')
  fi
  echo "longrun.sh: ${#TARGETS[@]} targets, $SECS s each, $CORES cores (jobs: $(for t in "${TARGETS[@]}"; do printf '%s=%s ' "${t#fuzz_}" "${JOBS[$t]:-1}"; done)), resume: ${SCURRY_FUZZ_RESUME:-no}, $(date -u +%FT%TZ)"
  pids=()
  for i in "${!TARGETS[@]}"; do
    t=${TARGETS[$i]}; k=${JOBS[$t]:-1}
    [ "$k" = 0 ] && continue  # SCURRY_FUZZ_JOBS="fuzz_h5ad=0 ...": this target not run
    d="$OUT/$t"; rm -rf "$d"; mkdir -p "$d/corpus" "$d/art"
    cp "$here/corpus/$t"/* "$d/corpus/"
    if [ -n "${SCURRY_FUZZ_RESUME:-}" ] && [ -d "$SCURRY_FUZZ_RESUME/$t" ]; then
      find "$SCURRY_FUZZ_RESUME/$t" -maxdepth 1 -type f -exec cp -t "$d/corpus/" {} +
    fi
    echo "$k" > "$d/jobs"
    leaks=(); [ "${SCURRY_FUZZ_LEAKS:-1}" = 0 ] && leaks=(-detect_leaks=0)
    ( cd "$d" && exec "$BIN/$t" "${leaks[@]}" -fork="$k" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 -timeout=10 \
        -rss_limit_mb=4096 -malloc_limit_mb=2048 -close_fd_mask=2 -print_final_stats=1 -artifact_prefix="$d/art/" \
        -max_total_time="$SECS" corpus > fuzz.log 2>&1 ) &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  echo "longrun.sh: runs done $(date -u +%FT%TZ)"
fi

# ---- classification ------------------------------------------------------------------------------
# The first frame of a sanitizer/libFuzzer report that is not the sanitizer runtime's, libFuzzer's
# or libc's: "FUNCTION (MODULE)" or "(MODULE+OFFSET)" when unsymbolized.
first_frame() {
  awk '
    /ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|SUMMARY: UndefinedBehaviorSanitizer/ { on = 1 }
    on && /^ *#[0-9]+ 0x/ {
      line = $0
      sub(/^ *#[0-9]+ 0x[0-9a-f]+ /, "", line)
      if (line ~ /^in (__asan|__interceptor|___interceptor|__sanitizer|__ubsan|__lsan|__interception|fuzzer::|LLVMFuzzerRunDriver|__libc_|_start|malloc|calloc|realloc|free|operator new|operator delete|memcpy|memmove|memset|__memcpy|__memmove|__memset|strlen|strnlen|strcmp|strncmp|raise|abort|__GI_|__pthread|pthread_kill)/) next
      if (line ~ /\((.*\/)?(libc\.so|ld-linux)[^)]*\)$/) next
      print line; exit
    }' "$1"
}

# One artifact: replayed through its fuzz binary and through the CLI; prints its artifacts.tsv line.
replay_one() {
  local t=$1 a=$2 d name kind rep frc frame where w in ext cli crc lines left
  d="$OUT/$t"; name=$(basename "$a"); kind=${name%%-*}
  case $t in
    fuzz_h5ad) ext=.h5ad ;; fuzz_tenx_h5) ext=.h5 ;; fuzz_tenx_mtx) ext=_mtx ;; *) ext=.zarr ;;
  esac
  rep="$d/replay/$name.fuzz.txt"
  timeout -k 5 60 "$BIN/$t" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 "$a" > "$rep" 2>&1
  frc=$?
  frame=$(first_frame "$rep")
  if [ -z "$frame" ]; then
    if grep -q "out-of-memory (used" "$rep"; then frame="(rss limit: no stack)"; elif [ $frc = 0 ]; then frame="(did not reproduce)"; else frame="(no stack, exit $frc)"; fi
  fi
  where=ours
  case $frame in *libhdf5*|*" in H5"*|"in H5"*) where=libhdf5 ;; "("*) where=unknown ;; esac
  # The CLI on the same input, in an empty directory.
  w="$d/replay/$name.cli"; rm -rf "$w"; mkdir -p "$w"
  in="$d/replay/$name.in$ext"; rm -rf "$in"
  SCURRY_FUZZ_MATERIALIZE="$in" "$BIN/$t" "$a" > /dev/null 2>&1
  if [ ! -e "$in" ]; then
    cli="BAD(not materialized)"
  else
    ( cd "$w" && SCURRY_HDF5_HANG_SECONDS=5 timeout -k 5 60 "$BIN/scurry" --threads 1 convert "$in" out.h5ad \
        > "../$name.cli.stdout" 2> "../$name.cli.stderr" )
    crc=$?
    # warnings before the error ("scurry: warning: ... skipping column ...") are the reader's own
    lines=$(grep -vc '^scurry: warning: ' "$d/replay/$name.cli.stderr")
    errs=$(grep -cE '^scurry: (error|corrupt HDF5 file): ' "$d/replay/$name.cli.stderr")  # the reader's, or the crash guard's
    left=$(ls -A "$w" | tr '\n' ' ')
    if [ $crc = 2 ] && [ "$lines" = 1 ] && [ "$errs" = 1 ] && [ -z "$left" ]; then cli=clean
    elif [ $crc = 0 ] && [ "$left" = "out.h5ad " ]; then cli=accepted
    else cli="BAD(exit $crc, $lines stderr lines, left: $left)"; fi
    rm -rf "$w" "$in"
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$kind" "$name" "$where" "$frame" "$cli"
}
export -f replay_one first_frame
export OUT BIN

for t in "${TARGETS[@]}"; do [ -d "$OUT/$t/art" ] && { rm -rf "$OUT/$t/replay"; mkdir -p "$OUT/$t/replay"; }; done
for t in "${TARGETS[@]}"; do
  [ -d "$OUT/$t/art" ] || continue
  for a in "$OUT/$t/art"/*; do [ -f "$a" ] && printf '%s\t%s\n' "$t" "$a"; done
done | xargs -r -P "$CORES" -d '\n' -n 1 bash -c 'IFS=$'"'"'\t'"'"' read -r t a <<< "$1"; replay_one "$t" "$a"' _ \
  | sort > "$OUT/artifacts.tsv"
echo "longrun.sh: $(wc -l < "$OUT/artifacts.tsv") artifacts replayed $(date -u +%FT%TZ)"

# ---- summary --------------------------------------------------------------------------------------
{
  echo "# longrun.sh summary, $(date -u +%FT%TZ), $(uname -m), $(getconf _NPROCESSORS_ONLN) cores here, $CORES used, $SECS s per target, LeakSanitizer $([ "${SCURRY_FUZZ_LEAKS:-1}" = 0 ] && echo off || echo on)"
  printf '%-16s %5s %12s %9s %8s %7s %6s %6s %9s %6s\n' target jobs executions wall_s exec/s crashes hangs ooms leaks ours
  for t in "${TARGETS[@]}"; do
    d="$OUT/$t"; [ -f "$d/fuzz.log" ] || continue
    st=$(grep -E '^#[0-9]+: ' "$d/fuzz.log" | tail -1)
    ex=$(sed -E 's/^#([0-9]+):.*/\1/' <<< "$st"); ex=${ex:-0}
    secs=$(sed -nE 's/.* time: ([0-9]+)s.*/\1/p' <<< "$st"); secs=${secs:-0}
    rate=0; [ "$secs" -gt 0 ] && rate=$(( ex / secs ))
    c=$(ls "$d/art" | grep -c '^crash-'); h=$(ls "$d/art" | grep -c '^timeout-')
    o=$(ls "$d/art" | grep -c '^oom-'); l=$(ls "$d/art" | grep -c '^leak-')
    ours=$(awk -F'\t' -v t="$t" '$1 == t && $4 != "libhdf5" && $5 != "(did not reproduce)"' "$OUT/artifacts.tsv" | wc -l)
    printf '%-16s %5s %12s %9s %8s %7s %6s %6s %9s %6s\n' "$t" "$(cat "$d/jobs" 2>/dev/null)" "$ex" "$secs" "$rate" "$c" "$h" "$o" "$l" "$ours"
    echo "    libFuzzer: ${st:-no status line}"
  done
  echo
  echo "artifacts (target, kind, file, where, first non-sanitizer frame, CLI replay):"
  cat "$OUT/artifacts.tsv"
  echo
  echo "CLI replays: $(cut -f6 "$OUT/artifacts.tsv" | grep -c '^clean') clean, $(cut -f6 "$OUT/artifacts.tsv" | grep -c '^accepted') accepted, $(cut -f6 "$OUT/artifacts.tsv" | grep -c '^BAD') BAD"
} > "$OUT/summary.txt"
cat "$OUT/summary.txt"

( cd "$OUT" && tar czf longrun.tgz summary.txt artifacts.tsv $(for t in "${TARGETS[@]}"; do [ -d "$t" ] && echo "$t/fuzz.log $t/art $t/replay $t/jobs"; done) 2>/dev/null )
echo "longrun.sh: $OUT/longrun.tgz ($(du -h "$OUT/longrun.tgz" | cut -f1))"
if [ "${SCURRY_FUZZ_KEEP_CORPUS:-0}" = 1 ]; then
  ( cd "$OUT" && rm -rf corpora && mkdir corpora && for t in "${TARGETS[@]}"; do [ ! -d "$t/corpus" ] || cp -r "$t/corpus" "corpora/$t"; done \
    && tar cJf corpora.tar.xz corpora && rm -rf corpora )
  echo "longrun.sh: $OUT/corpora.tar.xz ($(du -h "$OUT/corpora.tar.xz" | cut -f1))"
fi
bad=$(awk -F'\t' '($4 != "libhdf5" && $5 != "(did not reproduce)") || $6 ~ /^BAD/' "$OUT/artifacts.tsv" | wc -l)
[ "$bad" = 0 ]
