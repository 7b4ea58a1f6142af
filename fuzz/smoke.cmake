# A fuzz target's smoke run (ctest, label fuzz):
#   cmake -DTARGET=... -DCORPUS=... -DWORK=... -DSECONDS=... -DRUNS=... [-DEXTRA=flag;flag] -P smoke.cmake
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/corpus)
file(GLOB seeds ${CORPUS}/*)
if(NOT seeds)
  message(FATAL_ERROR "no seeds in ${CORPUS}")
endif()
file(COPY ${seeds} DESTINATION ${WORK}/corpus)
# allocator_may_return_null: a failed malloc returns NULL as it does outside the sanitizer (libhdf5
# asks for absurd sizes from corrupt headers and handles the NULL); scurry's own large allocations are
# still caught, by libFuzzer's -malloc_limit_mb (= -rss_limit_mb) or as an uncaught std::bad_alloc.
# Leaks inside libhdf5 are suppressed (lsan.supp); scurry's are reported.
get_filename_component(here ${CMAKE_CURRENT_LIST_FILE} DIRECTORY)
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env "ASAN_OPTIONS=$ENV{ASAN_OPTIONS}:allocator_may_return_null=1"
          "LSAN_OPTIONS=$ENV{LSAN_OPTIONS}:suppressions=${here}/lsan.supp:print_suppressions=0"
          ${TARGET} -seed=1 -runs=${RUNS} -max_total_time=${SECONDS} -timeout=10 -rss_limit_mb=2048 -close_fd_mask=2
          -print_final_stats=1 ${EXTRA} ${WORK}/corpus
  WORKING_DIRECTORY ${WORK}
  RESULT_VARIABLE rc)
# In fork mode libFuzzer exits with the last job's code, also when that job was an ignored timeout
# (70, -timeout_exitcode); any crash, leak or OOM leaves its input as crash-*/leak-*/oom-* here.
file(GLOB found ${WORK}/crash-* ${WORK}/leak-* ${WORK}/oom-*)
set(ok_rc 0)
if(EXTRA MATCHES "ignore_timeouts")
  list(APPEND ok_rc 70)
endif()
list(FIND ok_rc "${rc}" i)
if(i LESS 0 OR found)
  message(FATAL_ERROR "${TARGET} found a problem (exit ${rc}); the input is in ${WORK}: ${found}")
endif()
