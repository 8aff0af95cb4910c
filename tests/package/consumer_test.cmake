# ctest Package.FindPackage: installs this build tree into a scratch prefix, then configures,
# builds and runs examples/cpp (find_package(attn) + attn::attn) against the installed tree only.
#   cmake -DBUILD_DIR=<build> -DSOURCE_DIR=<source> -P consumer_test.cmake
set(work ${BUILD_DIR}/package-test)
file(REMOVE_RECURSE ${work})
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${ARGV}\nfailed (${rc}):\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${work}/prefix)
foreach(f include/attn/attn.hpp bin/attn share/attn/models/llama-3.1-8b.json)
  if(NOT EXISTS ${work}/prefix/${f})
    message(FATAL_ERROR "installed tree lacks ${f}")
  endif()
endforeach()
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/cpp -B ${work}/consumer -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_PREFIX_PATH=${work}/prefix)
run(${CMAKE_COMMAND} --build ${work}/consumer)
# The installed library, not the build tree's: the build tree's copy is out of reach.
run(${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ${work}/consumer/decode_step)
message("${last_output}")
if(NOT last_output MATCHES "^backend [a-z_]+ \\[[a-z0-9_]*\\], block_size [0-9]+, out")
  message(FATAL_ERROR "decode_step printed: ${last_output}")
endif()
# The installed CLI runs (its RPATH finds the installed libattn).
run(${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ${work}/prefix/bin/attn plan --model llama-3.1-8b)
