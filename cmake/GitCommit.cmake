# strata_git_commit(VAR DIR): the short commit DIR is checked out at, with "-dirty" when a
# tracked file differs from it, or "unknown" without git or outside a checkout. Read when
# CMake configures, so a build needs no git. Also a script, for the version test:
#   cmake -DDIR=<dir> -P GitCommit.cmake   prints the same text.
function(strata_git_commit var dir)
  set(commit "unknown")
  find_program(STRATA_GIT_EXECUTABLE git)
  if(STRATA_GIT_EXECUTABLE)
    execute_process(COMMAND ${STRATA_GIT_EXECUTABLE} -C ${dir} rev-parse --short HEAD
                    OUTPUT_VARIABLE head RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(rc EQUAL 0 AND head MATCHES "^[0-9a-f]+$")
      set(commit ${head})
      execute_process(COMMAND ${STRATA_GIT_EXECUTABLE} -C ${dir} status --porcelain --untracked-files=no
                      OUTPUT_VARIABLE changes RESULT_VARIABLE rc ERROR_QUIET)
      if(NOT rc EQUAL 0 OR NOT changes STREQUAL "")
        string(APPEND commit "-dirty")
      endif()
    endif()
  endif()
  set(${var} ${commit} PARENT_SCOPE)
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  strata_git_commit(commit "${DIR}")
  message("${commit}")
endif()
