# Helpers of the ctest scripts (included by cli_check, kivi_check and eviction_check).

# Sets `result` to TRUE when the comparison of decimal numbers `a op b` holds (CMake's own
# comparisons take integers only; awk compares decimals).
function(kvlab_compare result a op b)
  execute_process(COMMAND sh -c "awk 'BEGIN{exit !(${a} ${op} ${b})}'" RESULT_VARIABLE code)
  if(code EQUAL 0)
    set(${result} TRUE PARENT_SCOPE)
  else()
    set(${result} FALSE PARENT_SCOPE)
  endif()
endfunction()

# Runs `kvlab run NAME` into a fresh ${WORK} folder and leaves its JSON table in ${out} and
# the number of cells in ${cells}.
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
