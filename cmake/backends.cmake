# The backend folders of this build: src/backends/<folder>, minus ATTN_SKIP_BACKENDS.
# A folder registers the backend (or mixer) of its own name: the registration lists
# (src/backends/builtin_list.inc, src/mamba/mixer_list.inc) hold one line per registered name,
# and every line must name what a folder registers. A folder that registers something else, or
# several things, says so in its backend.cmake:
#   set(ATTN_BACKEND_REGISTERS name_a name_b)   # what this folder's descriptors are called
# Mistakes stop the configure with a message naming the folder and the list: a list line no
# folder registers, or a folder that no list line registers. (Nothing here reads the C++ text: a
# listed name whose <name>_descriptor() is missing fails the link, by name.)
# ATTN_SKIP_BACKENDS names folders, or single backends (a line of builtin_list.inc or
# mixer_list.inc) whose registration is dropped while their folder is still built.
# A folder whose code builds on another backend folder's (a family: cpu_sparse derives from
# cpu_mla's layer) names it in its backend.cmake:
#   set(ATTN_BACKEND_USES other_folder)
# Skipping the used folder while the user is built then keeps its sources in libattn, without
# its registration or its tests.
# Sets ATTN_BUILT_BACKEND_DIRS (folder names), ATTN_BACKEND_SOURCES, ATTN_BACKEND_TEST_SOURCES,
# ATTN_MODULE_DIRS, and generates the registration lists of the backends built.
file(GLOB ATTN_BACKEND_DIRS LIST_DIRECTORIES true CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/backends/*)
set(ATTN_ALL_BACKEND_DIRS)
set(ATTN_DECLARED_NAMES)   # every name some folder registers
foreach(dir IN LISTS ATTN_BACKEND_DIRS)
  if(NOT IS_DIRECTORY ${dir})
    continue()   # the registry sources beside the folders
  endif()
  get_filename_component(name ${dir} NAME)
  list(APPEND ATTN_ALL_BACKEND_DIRS ${name})
  set(ATTN_BACKEND_REGISTERS ${name})
  set(ATTN_BACKEND_USES)
  include(${dir}/backend.cmake OPTIONAL)
  set(ATTN_REGISTERS_${name} ${ATTN_BACKEND_REGISTERS})
  set(ATTN_USES_${name} ${ATTN_BACKEND_USES})
  foreach(r IN LISTS ATTN_BACKEND_REGISTERS)
    set(ATTN_FOLDER_OF_${r} ${name})
  endforeach()
  list(APPEND ATTN_DECLARED_NAMES ${ATTN_BACKEND_REGISTERS})
endforeach()

# name → list file it is registered in, from the two registration lists.
set(ATTN_REGISTRATION_LISTS backends/builtin_list.inc:ATTN_BACKEND mamba/mixer_list.inc:ATTN_MIXER)
set(ATTN_REGISTERED_NAMES)
foreach(entry IN LISTS ATTN_REGISTRATION_LISTS)
  string(REPLACE ":" ";" entry "${entry}")
  list(GET entry 0 list_file)
  list(GET entry 1 macro)
  file(STRINGS ${PROJECT_SOURCE_DIR}/src/${list_file} lines REGEX "^${macro}\\(")
  foreach(line IN LISTS lines)
    if(NOT line MATCHES "^${macro}\\(([a-z0-9_]+)\\)")
      message(FATAL_ERROR "src/${list_file}: line '${line}' invalid: expected ${macro}(<name>) with a lower-case name")
    endif()
    set(name ${CMAKE_MATCH_1})
    if(NOT name IN_LIST ATTN_DECLARED_NAMES)
      string(REPLACE ";" ", " folders "${ATTN_ALL_BACKEND_DIRS}")
      message(FATAL_ERROR "src/${list_file}: ${macro}(${name}) names no backend folder: expected a folder "
                          "src/backends/${name}, or a folder whose backend.cmake sets ATTN_BACKEND_REGISTERS to "
                          "include ${name} (folders: ${folders})")
    endif()
    list(APPEND ATTN_REGISTERED_NAMES ${name})
  endforeach()
  set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${list_file})
endforeach()
foreach(name IN LISTS ATTN_DECLARED_NAMES)
  if(NOT name IN_LIST ATTN_REGISTERED_NAMES)
    message(FATAL_ERROR "backend folder src/backends/${ATTN_FOLDER_OF_${name}} registers '${name}', but no registration "
                        "list has its line: add ATTN_BACKEND(${name}) to src/backends/builtin_list.inc (a backend) or "
                        "ATTN_MIXER(${name}) to src/mamba/mixer_list.inc (a mixer)")
  endif()
endforeach()
foreach(name IN LISTS ATTN_SKIP_BACKENDS)
  if(NOT name IN_LIST ATTN_ALL_BACKEND_DIRS AND NOT name IN_LIST ATTN_REGISTERED_NAMES)
    string(REPLACE ";" ", " known "${ATTN_ALL_BACKEND_DIRS};${ATTN_REGISTERED_NAMES}")
    message(FATAL_ERROR "ATTN_SKIP_BACKENDS entry '${name}' is neither a backend folder nor a backend (${known})")
  endif()
endforeach()

set(ATTN_SKIPPED_DIRS)
foreach(name IN LISTS ATTN_SKIP_BACKENDS)
  if(name IN_LIST ATTN_ALL_BACKEND_DIRS)
    list(APPEND ATTN_SKIPPED_DIRS ${name})
  endif()
endforeach()

set(ATTN_BUILT_BACKEND_DIRS)
set(ATTN_BACKEND_SOURCES ${PROJECT_SOURCE_DIR}/src/backends/registry.cpp)
set(ATTN_BACKEND_TEST_SOURCES)
set(ATTN_MODULE_DIRS)
set(ATTN_DEFINED_BACKENDS)   # names the built folders register
set(ATTN_USED_SKIPPED_DIRS)  # skipped folders a built folder uses: sources only
foreach(name IN LISTS ATTN_ALL_BACKEND_DIRS)
  if(NOT name IN_LIST ATTN_SKIPPED_DIRS)
    foreach(used IN LISTS ATTN_USES_${name})
      if(used IN_LIST ATTN_SKIPPED_DIRS)
        list(APPEND ATTN_USED_SKIPPED_DIRS ${used})
      endif()
    endforeach()
  endif()
endforeach()
list(REMOVE_DUPLICATES ATTN_USED_SKIPPED_DIRS)
foreach(name IN LISTS ATTN_USED_SKIPPED_DIRS)
  file(GLOB srcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/backends/${name}/*.cpp)
  list(APPEND ATTN_BACKEND_SOURCES ${srcs})
endforeach()
foreach(name IN LISTS ATTN_ALL_BACKEND_DIRS)
  if(name IN_LIST ATTN_SKIPPED_DIRS)
    continue()
  endif()
  set(dir ${PROJECT_SOURCE_DIR}/src/backends/${name})
  list(APPEND ATTN_BUILT_BACKEND_DIRS ${name})
  file(GLOB srcs CONFIGURE_DEPENDS ${dir}/*.cpp)
  if(EXISTS ${dir}/CMakeLists.txt)
    list(APPEND ATTN_MODULE_DIRS ${dir})   # a shared module (e.g. cuda_flash): added at the end
  else()
    list(APPEND ATTN_BACKEND_SOURCES ${srcs})
  endif()
  list(APPEND ATTN_DEFINED_BACKENDS ${ATTN_REGISTERS_${name}})
  file(GLOB tsrcs CONFIGURE_DEPENDS ${dir}/tests/*.cpp)
  list(APPEND ATTN_BACKEND_TEST_SOURCES ${tsrcs})
endforeach()

# The registration lists, minus backends not built or skipped, go to the build tree (found
# before src/ on libattn's include path).
foreach(entry IN LISTS ATTN_REGISTRATION_LISTS)
  string(REPLACE ":" ";" entry "${entry}")
  list(GET entry 0 list_file)
  list(GET entry 1 macro)
  file(STRINGS ${PROJECT_SOURCE_DIR}/src/${list_file} lines)
  set(kept "")
  foreach(line IN LISTS lines)
    if(line MATCHES "^${macro}\\(([a-z0-9_]+)\\)")
      if(CMAKE_MATCH_1 IN_LIST ATTN_SKIP_BACKENDS OR NOT CMAKE_MATCH_1 IN_LIST ATTN_DEFINED_BACKENDS)
        continue()
      endif()
    endif()
    string(APPEND kept "${line}\n")
  endforeach()
  file(CONFIGURE OUTPUT ${CMAKE_BINARY_DIR}/generated/${list_file} CONTENT "${kept}")
endforeach()
if(ATTN_SKIP_BACKENDS)
  message(STATUS "attn: backend folders built: ${ATTN_BUILT_BACKEND_DIRS}")
endif()
