# `kvlab sweep` from text files, end to end:
#  - a malformed recipes file fails with every bad line's number, and nothing runs;
#  - 5 labelled recipes x 3 seeds run with no rebuild, and the table shows each label once,
#    in the given order, with mean ± CI over 3 seeds and the data spec in its caption;
#  - cells.csv and cells.jsonl hold every cell at full precision;
#  - `kvlab table --by recipe --metric` chooses rows and columns;
#  - a cell whose provenance says other code made it is computed again (the old one kept in
#    .superseded/), unless --reuse; --force computes every cell again.
cmake_policy(VERSION 3.28)
include(${CMAKE_CURRENT_LIST_DIR}/check_helpers.cmake)
set(root ${WORK})
file(REMOVE_RECURSE ${root})
file(MAKE_DIRECTORY ${root})
set(data "synthetic:llm(L=1,H=2,Q=4,T=256,D=64,seed={seed})")

file(WRITE ${root}/bad.txt "q8_0 = k=int8@group(32),v=int8@group(32)\nbroken = k=int9@token\n# a comment\nnolabel =\n")
kvlab_fails(ARGS sweep --recipes ${root}/bad.txt --data ${data} --out ${root}/bad
  EXPECT "2 bad lines in ${root}/bad.txt; nothing was run" "bad.txt:2: recipe part 'k=int9@token'"
         "bad.txt:4: label 'nolabel' has no recipe")
if(EXISTS ${root}/bad)
  message(FATAL_ERROR "a malformed recipes file still created its results folder")
endif()
kvlab_fails(ARGS sweep --recipe k=int8@token --data "synthetic:llm(T=256)" --seeds 1..3 --out ${root}/bad
  EXPECT "has no {seed}")

file(WRITE ${root}/recipes.txt "# five methods
q8_0 = k=int8@group(32),v=int8@group(32)
q4_0 = k=int4@group(32),v=int4@group(32)
KIVI-2 = k=uint2@channel(32),v=uint2@group(32),residual=64   # KIVI's 2-bit setting
H2O 25% = evict=h2o(0.125,0.125)
k=rht(lloyd3)@token,v=rht(lloyd3)@token
")
kvlab(sweep --recipes ${root}/recipes.txt --data ${data} --seeds 1..3 --decode-steps 8 --out ${root}/out)
if(NOT last_output MATCHES "15 cells in this shard: 15 computed, 0 already done")
  message(FATAL_ERROR "expected 15 computed cells:\n${last_output}")
endif()
file(READ ${root}/out/table.md table)
foreach(pattern "^Table: data synthetic:llm\\(L=1,H=2,Q=4,T=256,D=64,seed={seed}\\); mean ± 95 % t-interval over 3 seeds"
                "\n\\| q8_0 [^\n]*\n\\| q4_0 [^\n]*\n\\| KIVI-2 [^\n]*\n\\| H2O 25% [^\n]*\n\\| k=rht\\(lloyd3\\)@token"
                "\\| KIVI-2 +\\| +[0-9.]+ \\| +[0-9.]+ \\| +[0-9.]+ \\| [^\n]*[0-9] ± [0-9][^\n]*\\| +3 \\|\n")
  if(NOT table MATCHES "${pattern}")
    message(FATAL_ERROR "table.md does not match '${pattern}':\n${table}")
  endif()
endforeach()
string(FIND "${table}" "seed=1" at)
if(NOT at EQUAL -1)
  message(FATAL_ERROR "table.md names a seed's data in a row:\n${table}")
endif()
file(READ ${root}/out/table.tex tex)
if(NOT tex MATCHES "\\\\caption\\{data synthetic:llm.*\\$[0-9.]+ \\\\pm [0-9.]+\\$")
  message(FATAL_ERROR "table.tex has no caption or no numbers in math mode:\n${tex}")
endif()
file(STRINGS ${root}/out/cells.csv csv)
list(LENGTH csv rows)
list(GET csv 0 header)
if(NOT rows EQUAL 16 OR NOT header MATCHES "^label,recipe,data_spec,seed,.*attn_rel_l2,.*bits_k,bits_v,")
  message(FATAL_ERROR "cells.csv should have a header and 15 rows with seed, bits and metrics:\n${header} (${rows} lines)")
endif()
file(STRINGS ${root}/out/cells.jsonl jsonl)
list(LENGTH jsonl lines)
list(GET jsonl 14 last)
string(JSON seed GET "${last}" seed)
string(JSON label GET "${last}" label)
if(NOT lines EQUAL 15 OR NOT seed EQUAL 3 OR NOT label STREQUAL "k=rht(lloyd3)@token,v=rht(lloyd3)@token")
  message(FATAL_ERROR "cells.jsonl should hold 15 cells, the last seed 3 of the unlabelled recipe:\n${last}")
endif()

kvlab(table ${root}/out --by recipe --metric attn_rel_l2,dropped_mass)
if(NOT last_output MATCHES "\\| recipe +\\| bits_k \\| bits_v \\| B/token \\| +attn_rel_l2 \\| +dropped_mass \\| seeds \\|"
   OR NOT last_output MATCHES "\\| k=f16@token,v=f16@token,evict=h2o\\(0.125,0.125\\) ")
  message(FATAL_ERROR "kvlab table --by recipe --metric did not choose rows and columns:\n${last_output}")
endif()
kvlab_fails(ARGS table ${root}/out --metric no_such_metric EXPECT "--metric no_such_metric: no cell holds it")

# Results are tied to the code that made them.
kvlab(sweep --recipes ${root}/recipes.txt --data ${data} --seeds 1..3 --decode-steps 8 --out ${root}/out)
if(NOT last_output MATCHES "0 computed, 15 already done")
  message(FATAL_ERROR "a rerun with the same code recomputed cells:\n${last_output}")
endif()
file(GLOB provenance "${root}/out/k=int4@group(32)*seed=2/provenance.json")
file(READ "${provenance}" text)
string(REGEX REPLACE "\"strategies/int_symmetric.cppm\": \"[0-9a-f]+\"" "\"strategies/int_symmetric.cppm\": \"0\""
       edited "${text}")
string(REGEX REPLACE "\"code_digest\": \"[0-9a-f]+\"" "\"code_digest\": \"0ld\"" edited "${edited}")
file(WRITE "${provenance}" "${edited}")
kvlab(sweep --recipes ${root}/recipes.txt --data ${data} --seeds 1..3 --decode-steps 8 --out ${root}/out --reuse)
if(NOT last_output MATCHES "0 computed, 15 already done")
  message(FATAL_ERROR "--reuse recomputed a cell made by other code:\n${last_output}")
endif()
kvlab(sweep --recipes ${root}/recipes.txt --data ${data} --seeds 1..3 --decode-steps 8 --out ${root}/out)
if(NOT last_output MATCHES "made by other code \\(changed: strategies/int_symmetric.cppm\\)"
   OR NOT last_output MATCHES "1 computed, 14 already done")
  message(FATAL_ERROR "a cell made by other code was not computed again, naming the changed file:\n${last_output}")
endif()
file(GLOB kept "${root}/out/.superseded/k=int4@group(32)*seed=2~0ld")
if(NOT kept)
  message(FATAL_ERROR "the superseded cell was not kept in .superseded/")
endif()
kvlab(sweep --recipes ${root}/recipes.txt --data ${data} --seeds 1..3 --decode-steps 8 --out ${root}/out --force)
if(NOT last_output MATCHES "15 computed, 0 already done")
  message(FATAL_ERROR "--force did not compute every cell:\n${last_output}")
endif()
message(STATUS "kvlab sweep: text files, seeds with intervals, tidy files, cells tied to their code")
