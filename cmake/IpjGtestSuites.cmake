# ipj_gtest_suites(TARGET [LABELS ...] [PROPERTIES ...]): one CTest test per GoogleTest suite of TARGET, found
# after each link. A test per suite, not per case: every test process loads LibTorch (~0.8 s on 2 cores), and
# ~440 cases in ~140 suites made that a quarter of the suite's time. `ctest -R Suite` picks a suite; inside
# one, `EXE --gtest_filter=Suite.Case` runs a case.
set(IPJ_GTEST_SUITES_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/gtest_suites_discover.cmake)

function(ipj_gtest_suites target)
  cmake_parse_arguments(ARG "" "" "LABELS;PROPERTIES" ${ARGN})
  set(suites_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake")
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND ${CMAKE_COMMAND} -D EXECUTABLE=$<TARGET_FILE:${target}> -D OUTPUT=${suites_file}
      -P ${IPJ_GTEST_SUITES_SCRIPT}
    BYPRODUCTS ${suites_file} VERBATIM)
  # The properties, written as bracket arguments so values with ';', '=' or ':' stay whole.
  set(properties "")
  if(ARG_LABELS)
    list(APPEND ARG_PROPERTIES LABELS ${ARG_LABELS})
  endif()
  foreach(item IN LISTS ARG_PROPERTIES)
    string(APPEND properties " [==[${item}]==]")
  endforeach()
  set(include_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites_include.cmake")
  file(WRITE "${include_file}"
    "if(EXISTS [==[${suites_file}]==])\n"
    "  include([==[${suites_file}]==])\n"
    "  if(IPJ_SUITES)\n"
    "    set_tests_properties(\${IPJ_SUITES} PROPERTIES${properties})\n"
    "  endif()\n"
    "else()\n"
    "  add_test([==[${target}_NOT_BUILT]==] [==[${target}_NOT_BUILT]==])\n"
    "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${include_file}")
endfunction()
