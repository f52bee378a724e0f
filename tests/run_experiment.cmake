# Included by the experiment checks: runs `kvlab run NAME` into a fresh ${WORK} folder and
# leaves its JSON table in ${out} and the number of cells in ${cells}.
function(kvlab_run_experiment name)
  file(REMOVE_RECURSE ${WORK})
  execute_process(COMMAND ${KVLAB} run ${name} --out ${WORK} --format json RESULT_VARIABLE code
                  OUTPUT_VARIABLE table ERROR_VARIABLE err)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "kvlab run ${name} failed:\n${table}${err}")
  endif()
  string(JSON count LENGTH "${table}")
  set(out "${table}" PARENT_SCOPE)
  set(cells ${count} PARENT_SCOPE)
endfunction()
