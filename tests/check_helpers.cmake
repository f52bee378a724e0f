# Helpers of the ctest scripts.

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

# Reads cell `index` of the JSON table ${out} into ${recipe}, ${error} (attn_rel_l2) and
# ${bytes} (bytes_per_token), failing the check unless both are numbers.
function(kvlab_read_cell index)
  string(JSON recipe GET "${out}" ${index} recipe)
  string(JSON error GET "${out}" ${index} attn_rel_l2)
  string(JSON bytes GET "${out}" ${index} bytes_per_token)
  if(NOT error MATCHES "^[0-9]" OR NOT bytes MATCHES "^[0-9]")
    message(FATAL_ERROR "${recipe}: attn_rel_l2 '${error}' or bytes_per_token '${bytes}' is not a number")
  endif()
  set(recipe "${recipe}" PARENT_SCOPE)
  set(error "${error}" PARENT_SCOPE)
  set(bytes "${bytes}" PARENT_SCOPE)
endfunction()

# Runs ${KVLAB} with the arguments and fails the check unless it exits 0; leaves its output
# (stdout and stderr) in ${last_output}.
function(kvlab)
  execute_process(COMMAND ${KVLAB} ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "kvlab ${ARGN} failed (${code}):\n${out}${err}")
  endif()
  set(last_output "${out}${err}" PARENT_SCOPE)
endfunction()

# kvlab_fails(EXPECT text... ARGS argument...): runs ${KVLAB} with the ARGS and fails the
# check unless it exits non-zero and its output contains every EXPECT text (literally).
function(kvlab_fails)
  cmake_parse_arguments(ARG "" "" "EXPECT;ARGS" ${ARGN})
  execute_process(COMMAND ${KVLAB} ${ARG_ARGS} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(code EQUAL 0)
    message(FATAL_ERROR "kvlab ${ARG_ARGS} succeeded; expected it to fail saying ${ARG_EXPECT}:\n${out}${err}")
  endif()
  foreach(text ${ARG_EXPECT})
    string(FIND "${out}${err}" "${text}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "kvlab ${ARG_ARGS} did not say '${text}':\n${out}${err}")
    endif()
  endforeach()
endfunction()

# Fails the check unless folders `a` and `b` hold the same files (hidden ones included) with
# the same bytes.
function(assert_same_tree a b)
  file(GLOB_RECURSE files_a RELATIVE ${a} ${a}/*)
  file(GLOB_RECURSE files_b RELATIVE ${b} ${b}/*)
  if(NOT files_a STREQUAL files_b)
    message(FATAL_ERROR "${a} and ${b} hold different files:\n${files_a}\n---\n${files_b}")
  endif()
  foreach(f ${files_a})
    execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${a}/${f} ${b}/${f} RESULT_VARIABLE differ)
    if(differ)
      message(FATAL_ERROR "${a}/${f} and ${b}/${f} differ")
    endif()
  endforeach()
endfunction()

# The cell folders of the results folder `dir` (names only, sorted) in ${out_var}.
function(kvlab_cell_folders out_var dir)
  file(GLOB names LIST_DIRECTORIES true RELATIVE ${dir} ${dir}/*)
  set(cells)
  foreach(name ${names})
    if(IS_DIRECTORY ${dir}/${name})
      list(APPEND cells ${name})
    endif()
  endforeach()
  list(SORT cells)
  set(${out_var} ${cells} PARENT_SCOPE)
endfunction()
