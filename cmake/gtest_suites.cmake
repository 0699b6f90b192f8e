# Run at build time, after a gtest executable links (thx_gtest_suites in CMakeLists.txt): lists
# its tests and writes OUT, a CTest file with one test per gtest suite ("Claims.*", run as
# --gtest_filter=Claims.*) labelled LABEL. One process per suite instead of per test: every
# process of a test binary first spends most of a second loading LibTorch, which over some 440
# tests was about a third of the suite's time.
execute_process(COMMAND "${EXE}" --gtest_list_tests OUTPUT_VARIABLE listing RESULT_VARIABLE rc TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${EXE} --gtest_list_tests failed (${rc})")
endif()
string(REPLACE "\n" ";" lines "${listing}")
set(text "")
foreach(line IN LISTS lines)
  if(line MATCHES "^([A-Za-z_][A-Za-z0-9_/]*)\\.")
    set(suite "${CMAKE_MATCH_1}")
    string(APPEND text "add_test([=[${suite}.*]=] \"${EXE}\" [=[--gtest_filter=${suite}.*]=])\n")
    string(APPEND text "set_tests_properties([=[${suite}.*]=] PROPERTIES LABELS ${LABEL})\n")
  endif()
endforeach()
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
