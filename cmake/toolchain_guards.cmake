# The toolchain (see the design): clang 19 or newer with its clang-scan-deps, CMake >= 3.28
# and Ninja. Fail early with a message that says what to do instead of failing in a module
# scan later.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang" OR CMAKE_CXX_COMPILER_VERSION VERSION_LESS 19)
  message(FATAL_ERROR "kvlab needs clang 19 or newer (found ${CMAKE_CXX_COMPILER_ID} "
    "${CMAKE_CXX_COMPILER_VERSION}). Use a preset: cmake --preset release")
endif()
if(NOT CMAKE_GENERATOR MATCHES "Ninja")
  message(FATAL_ERROR "kvlab's C++20 modules need the Ninja generator (found ${CMAKE_GENERATOR})")
endif()
