# The sweep runner end to end, on the `default` experiment:
#  - 1 and 2 threads write byte-identical cells;
#  - a second run computes nothing and changes nothing;
#  - after losing a cell (and a half-written staging folder, as a kill leaves), a run
#    recomputes exactly that cell;
#  - shards 1/2 and 2/2 merged equal the unsharded results;
#  - `kvlab table` renders the stored cells.
cmake_policy(VERSION 3.28)
include(${CMAKE_CURRENT_LIST_DIR}/check_helpers.cmake)
set(root ${WORK})
file(REMOVE_RECURSE ${root})

kvlab(run default --out ${root}/one --threads 1)
kvlab(run default --out ${root}/two --threads 2)
assert_same_tree(${root}/one ${root}/two)

foreach(output table.md table.tex fidelity_vs_bytes.svg)
  if(NOT EXISTS ${root}/one/${output})
    message(FATAL_ERROR "kvlab run did not write ${output}")
  endif()
endforeach()
file(READ ${root}/one/table.tex tex)
if(NOT tex MATCHES "toprule")
  message(FATAL_ERROR "table.tex is not a booktabs table:\n${tex}")
endif()
file(GLOB cells LIST_DIRECTORIES true ${root}/one/*)
list(FILTER cells EXCLUDE REGEX "\\.(md|tex|svg|csv|jsonl|txt)$")
list(LENGTH cells count)
if(NOT count EQUAL 11)
  message(FATAL_ERROR "expected 11 cell folders, found ${count}")
endif()

file(TIMESTAMP ${root}/two/table.md before "%s")
execute_process(COMMAND sleep 1.1)
kvlab(run default --out ${root}/two --threads 2)
if(NOT last_output MATCHES "0 computed, 11 already done")
  message(FATAL_ERROR "a second run recomputed cells:\n${last_output}")
endif()
file(TIMESTAMP ${root}/two/table.md after "%s")
if(NOT before STREQUAL after)
  message(FATAL_ERROR "a finished re-run rewrote table.md")
endif()
assert_same_tree(${root}/one ${root}/two)

list(GET cells 3 lost)
file(REMOVE_RECURSE ${lost})
file(MAKE_DIRECTORY ${root}/two/.staging-99999-3)
file(WRITE ${root}/two/.staging-99999-3/metrics.json "{\"half\": ")
get_filename_component(lost_name ${lost} NAME)
file(REMOVE_RECURSE ${root}/two/${lost_name})
kvlab(run default --out ${root}/two --threads 2)
if(NOT last_output MATCHES "1 computed, 10 already done")
  message(FATAL_ERROR "resume did not compute exactly the lost cell:\n${last_output}")
endif()
file(REMOVE_RECURSE ${root}/two/.staging-99999-3)
kvlab(run default --out ${root}/one --threads 1)
assert_same_tree(${root}/one ${root}/two)

kvlab(run default --out ${root}/shard1 --shard 1/2)
kvlab(run default --out ${root}/shard2 --shard 2/2)
kvlab(merge ${root}/merged ${root}/shard1 ${root}/shard2)
assert_same_tree(${root}/one ${root}/merged)

kvlab(table ${root}/merged --format tex)
if(NOT last_output MATCHES "toprule.*boldsymbol")
  message(FATAL_ERROR "no LaTeX table with a marked best value:\n${last_output}")
endif()
message(STATUS "sweep runner: deterministic, resumable, shardable")

kvlab(plot ${root}/merged --out ${root}/plot.svg)
file(READ ${root}/plot.svg svg)
if(NOT svg MATCHES "^<svg.*<g class=\"series\".*class=\"legend\"[^>]*>int8-token</text>.*</svg>")
  message(FATAL_ERROR "plot is not an SVG with a series per baseline, labelled:\n${svg}")
endif()
