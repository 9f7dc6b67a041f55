# Run after a test executable is linked (cmake -P): lists its GoogleTest suites and writes one CTest test per
# suite (`EXE --gtest_filter=Suite.*`) to OUTPUT, with the suite names in IPJ_SUITES. Limits: suite names
# must be unique across executables (CTest test names); typed-test comments are dropped.
if(NOT EXECUTABLE OR NOT OUTPUT)
  message(FATAL_ERROR "usage: cmake -D EXECUTABLE=... -D OUTPUT=... -P gtest_suites_discover.cmake")
endif()
execute_process(COMMAND "${EXECUTABLE}" --gtest_list_tests
  OUTPUT_VARIABLE listing ERROR_VARIABLE errors RESULT_VARIABLE status TIMEOUT 60)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${EXECUTABLE} --gtest_list_tests failed (${status}): ${errors}")
endif()
string(REPLACE "\n" ";" lines "${listing}")
set(script "set(IPJ_SUITES)\n")
foreach(line IN LISTS lines)
  # A suite line starts in column 0 and ends with '.' (then an optional "  # TypeParam = ..." comment).
  if(line MATCHES "^([^ #][^ ]*)\\.( .*)?$")
    set(suite "${CMAKE_MATCH_1}")
    string(APPEND script "add_test([==[${suite}]==] [==[${EXECUTABLE}]==] [==[--gtest_filter=${suite}.*]==])\n"
      "list(APPEND IPJ_SUITES [==[${suite}]==])\n")
  endif()
endforeach()
file(WRITE "${OUTPUT}.tmp" "${script}")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
