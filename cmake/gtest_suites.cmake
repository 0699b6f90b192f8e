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
# The suites that take longest (seconds on 2 cores, 2026-11-26), so that `ctest -j2` starts them
# first: with no cost data yet (a clean clone, as CI), CTest starts tests in the order listed,
# and the 135-second BadInputCampaign started last ran alone for 90 s while the other core
# waited. Only the order depends on these numbers. (2026-12-02: SweepRun 115 -> 65, its shipped
# sweeps' dry runs in the test's own process; Cli 140 -> 30 and BadInputCampaign 140 -> 15, their
# refusals in forked copies of a process with LibTorch loaded, tests/cli/forked_cli.h.)
set(costs SweepRun 65 Precision 35 Cli 30 BadInputCampaign 15 EncoderContext 30 FinetuneResume 20
          Predict 17 EncoderParameters 16 Bf16Step 16 Recall 14 BadInput 13 CheckpointFaults 12)
# (and the two that compile thx's CUDA code with nvcc and the host compiler, 2026-11-29: both cores each)
list(APPEND costs CudaKernels 100 CudaHostCode 42)
# The suites that run kernels on the CUDA emulator (common/cuda_compat.h): each runs twice, its
# threads taking turns in ascending order (the emulator's default) and, as a second test named
# "<suite>.* descending", in descending order, so that a race between two threads shows in one of
# them (emu::Order). tests/common/cuda_emulator_test.cpp checks that the list names every such suite
# (each on a line of its own: `set(emulated ...)`, then `list(APPEND emulated ...)`).
set(emulated Emulator CudaMma CudaPrimitives Flash TiledRowKernels TiledRowKernelsTc FusedThEmulated FusedThPadded RmsNormEmulated)
list(APPEND emulated RowsSoftmax HeadsGemmRowSoftmax AdafactorEmulated CrossEntropyEmulated)
list(APPEND emulated RowsMix)
# Tests left out of a suite's descending run: Flash's three exhaustive sweeps (every bucket, every
# variant's memory reads, the bias's gradient: 101 of its 124 s, each run twice made the suite the
# CI's longest after the sweeps'). Its NoRaceWhenThreadsTakeTurnsInEitherOrder runs a problem with
# a bias, padding and a causal mask in both orders and all at once in either run.
set(descending_skips "Flash.EveryBucketOverBlocksOfRowsAndKeys:Flash.ReadNoMemoryNothingWrote")
string(APPEND descending_skips ":Flash.BiasGradientFourKeysAtATimeChangesNoNumber")
set(text "")
foreach(line IN LISTS lines)
  if(line MATCHES "^([A-Za-z_][A-Za-z0-9_/]*)\\.")
    set(suite "${CMAKE_MATCH_1}")
    string(APPEND text "add_test([=[${suite}.*]=] \"${EXE}\" [=[--gtest_filter=${suite}.*]=])\n")
    list(FIND costs "${suite}" at)
    set(cost "")
    if(at GREATER_EQUAL 0)
      math(EXPR at "${at} + 1")
      list(GET costs ${at} seconds)
      set(cost " COST ${seconds}")
    endif()
    string(APPEND text "set_tests_properties([=[${suite}.*]=] PROPERTIES LABELS ${LABEL}${cost})\n")
    list(FIND emulated "${suite}" emu)
    if(emu GREATER_EQUAL 0)
      set(skip "")
      string(REGEX MATCHALL "${suite}\\.[A-Za-z0-9_]+" skipped "${descending_skips}")
      if(skipped)
        string(REPLACE ";" ":" skipped "${skipped}")
        set(skip "-${skipped}")
      endif()
      string(APPEND text "add_test([=[${suite}.* descending]=] \"${EXE}\" [=[--gtest_filter=${suite}.*${skip}]=])\n"
                         "set_tests_properties([=[${suite}.* descending]=] PROPERTIES LABELS ${LABEL}${cost} "
                         "ENVIRONMENT THX_EMU_ORDER=descending)\n")
    endif()
  endif()
endforeach()
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
