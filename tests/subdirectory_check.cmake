# kvlab configured from another project with add_subdirectory: configure succeeds, and
# everything kvlab generates lands in its own binary folder inside the consumer's build,
# none of it in the consumer's top level (paths from PROJECT_*, not CMAKE_SOURCE_DIR). The
# consumer's own strategy folder (KVLAB_STRATEGY_DIRS) is registered, named by its path.
# Arguments: SOURCE (kvlab's tree), WORK (a scratch folder), CXX and SCAN_DEPS (the compiler).
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/consumer/strategies)
file(COPY ${SOURCE}/tests/strategies/test_sign.cppm DESTINATION ${WORK}/consumer/strategies)
file(WRITE ${WORK}/consumer/CMakeLists.txt "cmake_minimum_required(VERSION 3.28)
project(consumer LANGUAGES CXX)
add_subdirectory(\"${SOURCE}\" kvlab)
")
execute_process(
  COMMAND ${CMAKE_COMMAND} -S ${WORK}/consumer -B ${WORK}/build -G Ninja -DCMAKE_BUILD_TYPE=Release
          -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_CXX_COMPILER_CLANG_SCAN_DEPS=${SCAN_DEPS}
          -DKVLAB_STRATEGY_DIRS=${WORK}/consumer/strategies
  RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "configuring a project that add_subdirectory()s kvlab failed (${code}):\n${out}\n${err}")
endif()
if(NOT EXISTS ${WORK}/build/kvlab/generated/kvlab_registry_builtin.cppm)
  message(FATAL_ERROR "the generated registry is not in kvlab's binary folder ${WORK}/build/kvlab/generated")
endif()
if(EXISTS ${WORK}/build/generated)
  message(FATAL_ERROR "kvlab wrote generated files into the consumer's top level: ${WORK}/build/generated")
endif()
file(READ ${WORK}/build/kvlab/generated/kvlab_registry_builtin.cppm registry)
string(FIND "${registry}" "all.add(\"strategies/window.cppm\"" in_tree)
if(in_tree EQUAL -1)
  message(FATAL_ERROR "the generated registry does not name strategy files relative to kvlab's tree:\n${registry}")
endif()
string(FIND "${registry}" "consumer/strategies/test_sign.cppm\", strategies::test_sign::info()" outside)
if(outside EQUAL -1)
  message(FATAL_ERROR "the generated registry does not register the consumer's strategy folder:\n${registry}")
endif()
file(REMOVE_RECURSE ${WORK})
message(STATUS "kvlab configures as a subdirectory")
