# ctest Registration.Configure: cmake/backends.cmake on scratch source trees (configure only, no
# compiler). A backend registered the README's way is kept whatever its C++ looks like (here its
# descriptor's brace is on the next line); a registry line without a folder and a folder without
# a registry line each stop the configure with a message naming both.
#   cmake -DSOURCE_DIR=<source> -DWORK=<scratch dir> -P registration_test.cmake
file(REMOVE_RECURSE ${WORK})

# A scratch tree: `folders` under src/backends (NAME or NAME=REG1,REG2 for a backend.cmake that
# declares what it registers), `lines` the registry lines (ATTN_BACKEND(x) / ATTN_MIXER(x)).
function(scratch tree folders lines)
  set(root ${WORK}/${tree})
  file(WRITE ${root}/CMakeLists.txt "cmake_minimum_required(VERSION 3.20)\nproject(scratch NONE)\n"
                                    "include(${SOURCE_DIR}/cmake/backends.cmake)\n")
  foreach(f IN LISTS folders)
    string(REPLACE "=" ";" parts "${f}")
    list(GET parts 0 name)
    file(WRITE ${root}/src/backends/${name}/${name}.cpp "BackendDescriptor ${name}_descriptor()\n{\n  return {};\n}\n")
    list(LENGTH parts n)
    if(n EQUAL 2)
      list(GET parts 1 regs)
      string(REPLACE "," " " regs "${regs}")
      file(WRITE ${root}/src/backends/${name}/backend.cmake "set(ATTN_BACKEND_REGISTERS ${regs})\n")
    endif()
  endforeach()
  set(backends "")
  set(mixers "")
  foreach(l IN LISTS lines)
    if(l MATCHES "^ATTN_MIXER")
      string(APPEND mixers "${l}\n")
    else()
      string(APPEND backends "${l}\n")
    endif()
  endforeach()
  file(WRITE ${root}/src/backends/builtin_list.inc "// scratch\n${backends}")
  file(WRITE ${root}/src/mamba/mixer_list.inc "// scratch\n${mixers}")
endfunction()

# Configures tree `tree`; `expect_ok` TRUE/FALSE; every fragment in ARGN must be in the output.
function(configure tree expect_ok)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${WORK}/${tree} -B ${WORK}/${tree}/build
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REPLACE "\n" " " text "${out} ${err}")
  string(REGEX REPLACE " +" " " text "${text}")
  if(expect_ok AND NOT rc EQUAL 0)
    message(FATAL_ERROR "${tree}: configure failed:\n${out}\n${err}")
  elseif(NOT expect_ok AND rc EQUAL 0)
    message(FATAL_ERROR "${tree}: configure passed, expected it to stop")
  endif()
  foreach(fragment IN LISTS ARGN)
    string(FIND "${text}" "${fragment}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "${tree}: output lacks '${fragment}':\n${out}\n${err}")
    endif()
  endforeach()
endfunction()

scratch(good "alpha;mix;duo=duo_a,duo_b" "ATTN_BACKEND(alpha);ATTN_MIXER(mix);ATTN_BACKEND(duo_a);ATTN_BACKEND(duo_b)")
configure(good TRUE)
file(READ ${WORK}/good/build/generated/backends/builtin_list.inc generated)
foreach(line "ATTN_BACKEND(alpha)" "ATTN_BACKEND(duo_a)" "ATTN_BACKEND(duo_b)")
  string(FIND "${generated}" "${line}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "good: the generated registry lacks ${line}:\n${generated}")
  endif()
endforeach()

scratch(ghost_line "alpha" "ATTN_BACKEND(alpha);ATTN_BACKEND(ghost)")
configure(ghost_line FALSE "src/backends/builtin_list.inc: ATTN_BACKEND(ghost) names no backend folder"
          "src/backends/ghost" "folders: alpha")

scratch(unlisted_folder "alpha;beta" "ATTN_BACKEND(alpha)")
configure(unlisted_folder FALSE "backend folder src/backends/beta registers 'beta'" "add ATTN_BACKEND(beta) to src/backends/builtin_list.inc")

scratch(bad_line "alpha" "ATTN_BACKEND(alpha);ATTN_BACKEND(Alpha-2)")
configure(bad_line FALSE "line 'ATTN_BACKEND(Alpha-2)' invalid")
message("registration: 4 scratch trees behaved")
