# scripts/fit-synthetic-llm end to end, on a target whose knobs are known: a synthetic:llm
# workload standing in for a real capture (another seed than the fit draws). The fitted spec
# must be one kvlab accepts, and every statistic of its comparison table must be within the
# tolerance the table states.
cmake_policy(VERSION 3.28)
set(target "synthetic:llm(L=1,H=2,Q=4,T=128,D=16,seed=3,sharpness=2,locality=0.3,value_dof=10,sinks=1)")
execute_process(COMMAND ${FIT} --kvlab ${KVLAB} --rounds 3 --starts 8 --seeds 1 "${target}"
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "fit-synthetic-llm failed (${code}):\n${out}${err}")
endif()
if(NOT out MATCHES "^(synthetic:llm\\(L=1,H=2,Q=4,T=128,D=16,[^\n]*\\))\n")
  message(FATAL_ERROR "fit-synthetic-llm did not print a spec of the target's shape:\n${out}")
endif()
set(spec "${CMAKE_MATCH_1}")
execute_process(COMMAND ${KVLAB} data-report "${spec}" RESULT_VARIABLE code OUTPUT_VARIABLE report ERROR_VARIABLE err)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "kvlab does not accept the fitted spec ${spec}:\n${err}")
endif()

string(REPLACE "\n" ";" lines "${out}")
set(checked 0)
foreach(line ${lines})
  # | statistic | real | synthetic | ±tolerance[%] |
  if(line MATCHES "^\\| ([^|]+) \\| ([-0-9.e]+) \\| ([-0-9.e]+) \\| ±([0-9.]+)(%?) \\|$")
    set(name "${CMAKE_MATCH_1}")
    set(real "${CMAKE_MATCH_2}")
    set(fitted "${CMAKE_MATCH_3}")
    set(allowed "${CMAKE_MATCH_4}")
    if(CMAKE_MATCH_5 STREQUAL "%")
      set(allowed "${allowed} / 100 * ${real}")
    endif()
    execute_process(COMMAND sh -c "awk 'BEGIN{d = ${fitted} - ${real}; if (d < 0) d = -d; exit !(d <= ${allowed})}'"
                    RESULT_VARIABLE outside)
    if(NOT outside EQUAL 0)
      message(FATAL_ERROR "${name}: fitted ${fitted} is outside ${real} ± ${allowed}:\n${out}")
    endif()
    math(EXPR checked "${checked} + 1")
  endif()
endforeach()
if(NOT checked EQUAL 9)
  message(FATAL_ERROR "expected 9 statistics in the comparison, read ${checked}:\n${out}")
endif()
message(STATUS "fitted ${spec}: 9 statistics within tolerance")
