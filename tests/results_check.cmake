# A results folder holds complete cells or names the ones that are not, end to end on the
# `default` experiment:
#  - merge refuses a shard holding a truncated metrics.json, naming the shard and the cell,
#    and leaves OUT as it was (or absent);
#  - merge refuses a cell whose metrics differ between shards or with OUT, whatever the
#    order of the arguments, and leaves OUT as it was;
#  - table names the cell whose metrics.json is corrupt;
#  - run recomputes, naming each, a truncated, a missing and a swapped metrics.json;
#  - cells stored before provenance.json named its cell still count as complete;
#  - run removes the staging folders of ended processes of this host, and only those.
cmake_policy(VERSION 3.28)
include(${CMAKE_CURRENT_LIST_DIR}/check_helpers.cmake)
set(root ${WORK})
file(REMOVE_RECURSE ${root})

kvlab(run default --out ${root}/whole)
kvlab(run default --out ${root}/shard1 --shard 1/2)
kvlab(run default --out ${root}/shard2 --shard 2/2)
kvlab_cell_folders(cells ${root}/whole)
kvlab_cell_folders(shard1_cells ${root}/shard1)
list(GET shard1_cells 0 cell)
file(COPY ${root}/shard2/ DESTINATION ${root}/out)
file(COPY ${root}/shard2/ DESTINATION ${root}/out_before)

# A truncated metrics.json in a shard.
file(COPY ${root}/shard1/ DESTINATION ${root}/truncated)
file(READ ${root}/truncated/${cell}/metrics.json metrics)
string(SUBSTRING "${metrics}" 0 100 half_metrics)
file(WRITE ${root}/truncated/${cell}/metrics.json "${half_metrics}")
set(truncated_message "cell '${cell}' in ${root}/truncated is incomplete: metrics.json: invalid JSON at byte")
kvlab_fails(EXPECT "${truncated_message}" "nothing was merged" ARGS merge ${root}/out ${root}/truncated)
assert_same_tree(${root}/out ${root}/out_before)
kvlab_fails(EXPECT "${truncated_message}" ARGS merge ${root}/fresh ${root}/shard2 ${root}/truncated)
if(EXISTS ${root}/fresh)
  message(FATAL_ERROR "a refused merge created its output folder")
endif()
kvlab_fails(EXPECT "${truncated_message}" ARGS table ${root}/truncated)

# The same cell with different metrics, in either order, and against OUT.
file(COPY ${root}/shard1/ DESTINATION ${root}/altered)
string(REGEX REPLACE "\"tokens\": [0-9]+" "\"tokens\": 1" altered_metrics "${metrics}")
if(altered_metrics STREQUAL metrics)
  message(FATAL_ERROR "metrics.json has no tokens field to alter:\n${metrics}")
endif()
file(WRITE ${root}/altered/${cell}/metrics.json "${altered_metrics}")
set(conflict_message "cell '${cell}' differs between ${root}/altered and ${root}/shard1; nothing was merged")
kvlab_fails(EXPECT "${conflict_message}" ARGS merge ${root}/out ${root}/shard1 ${root}/altered)
assert_same_tree(${root}/out ${root}/out_before)
kvlab_fails(EXPECT "${conflict_message}" ARGS merge ${root}/out ${root}/altered ${root}/shard1)
assert_same_tree(${root}/out ${root}/out_before)
file(COPY ${root}/altered/ DESTINATION ${root}/out_altered)
kvlab_fails(EXPECT "cell '${cell}' differs between ${root}/out_altered and ${root}/shard1"
  ARGS merge ${root}/out_altered ${root}/shard1)
assert_same_tree(${root}/out_altered ${root}/altered)
kvlab(merge ${root}/out ${root}/shard1)
assert_same_tree(${root}/out ${root}/whole)

# run recomputes incomplete cells and names them; it removes only stale staging folders.
file(COPY ${root}/whole/ DESTINATION ${root}/rerun)
list(GET cells 0 truncated_cell)
list(GET cells 1 missing_cell)
list(GET cells 2 swapped_a)
list(GET cells 3 swapped_b)
file(READ ${root}/rerun/${truncated_cell}/metrics.json metrics)
string(SUBSTRING "${metrics}" 0 100 half_metrics)
file(WRITE ${root}/rerun/${truncated_cell}/metrics.json "${half_metrics}")
file(REMOVE ${root}/rerun/${missing_cell}/metrics.json)
file(RENAME ${root}/rerun/${swapped_a} ${root}/rerun/swapping)
file(RENAME ${root}/rerun/${swapped_b} ${root}/rerun/${swapped_a})
file(RENAME ${root}/rerun/swapping ${root}/rerun/${swapped_b})

file(READ /proc/sys/kernel/pid_max pid_max)
string(STRIP "${pid_max}" pid_max)
math(EXPR ended_pid "${pid_max} + 1") # no process can have it
cmake_host_system_information(RESULT host QUERY HOSTNAME)
set(stale_run ${root}/rerun/.staging-${ended_pid}-00000000000000ab-3@${host})
set(stale_merge ${root}/rerun/.merging-${ended_pid}-00000000000000cd-0@${host})
set(live ${root}/rerun/.staging-1-00000000000000ef-0@${host}) # pid 1 always runs
set(other_host ${root}/rerun/.staging-${ended_pid}-0000000000000012-0@not-${host})
foreach(staging ${stale_run} ${stale_merge} ${live} ${other_host})
  file(WRITE ${staging}/metrics.json "{\"half\": ")
endforeach()

kvlab(run default --out ${root}/rerun)
foreach(expected
    "cell '${truncated_cell}' in ${root}/rerun is incomplete (metrics.json: invalid JSON at byte"
    "cell '${missing_cell}' in ${root}/rerun is incomplete (metrics.json is missing)"
    "cell '${swapped_a}' in ${root}/rerun is incomplete (provenance.json names the cell '${swapped_b}')"
    "cell '${swapped_b}' in ${root}/rerun is incomplete (provenance.json names the cell '${swapped_a}')"
    "removed ${stale_run}: the staging folder of process ${ended_pid}, which ended"
    "removed ${stale_merge}: the staging folder of process ${ended_pid}, which ended"
    "4 computed, 7 already done")
  string(FIND "${last_output}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "kvlab run did not say '${expected}':\n${last_output}")
  endif()
endforeach()
if(EXISTS ${stale_run} OR EXISTS ${stale_merge} OR NOT EXISTS ${live} OR NOT EXISTS ${other_host})
  message(FATAL_ERROR "run removed the wrong staging folders")
endif()
file(REMOVE_RECURSE ${live} ${other_host})
assert_same_tree(${root}/rerun ${root}/whole)

# Cells whose provenance.json has no "cell" field (stored before it existed) are complete.
file(COPY ${root}/whole/ DESTINATION ${root}/legacy)
foreach(legacy_cell ${cells})
  file(READ ${root}/legacy/${legacy_cell}/provenance.json provenance)
  string(REGEX REPLACE "\n  \"cell\": \"[^\n]*\"," "" provenance "${provenance}")
  file(WRITE ${root}/legacy/${legacy_cell}/provenance.json "${provenance}")
endforeach()
kvlab(run default --out ${root}/legacy)
if(NOT last_output MATCHES "0 computed, 11 already done")
  message(FATAL_ERROR "run recomputed cells stored without a \"cell\" field:\n${last_output}")
endif()
message(STATUS "results folder: incomplete cells are named, recomputed by run and refused by merge")
