# A fuzz target's smoke run (ctest, label fuzz):
#   cmake -DTARGET=... -DCORPUS=... -DWORK=... -DSECONDS=... -DRUNS=... -P smoke.cmake
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/corpus)
file(GLOB seeds ${CORPUS}/*)
if(NOT seeds)
  message(FATAL_ERROR "no seeds in ${CORPUS}")
endif()
file(COPY ${seeds} DESTINATION ${WORK}/corpus)
execute_process(
  COMMAND ${TARGET} -seed=1 -runs=${RUNS} -max_total_time=${SECONDS} -timeout=10 -rss_limit_mb=2048 -close_fd_mask=2
          -print_final_stats=1 ${WORK}/corpus
  WORKING_DIRECTORY ${WORK}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${TARGET} found a problem (exit ${rc}); the input is in ${WORK}")
endif()
