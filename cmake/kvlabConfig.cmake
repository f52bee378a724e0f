# find_package(kvlab): the installed kvlab::kvlab (import kvlab;) and its dependencies.
# kvlab's module units are compiled again in the importing project, with clang 19 or newer,
# C++20, and the Ninja generator, as kvlab itself needs.
include(CMakeFindDependencyMacro)
find_dependency(xtl CONFIG) # Debian's xsimd target links xtl by name without finding it
find_dependency(xsimd CONFIG)
find_dependency(range-v3 CONFIG)
include(${CMAKE_CURRENT_LIST_DIR}/kvlabTargets.cmake)
