# Warning and sanitizer flags of the project's own C and C++ sources, as INTERFACE targets:
#   attn_warnings   -Wall -Wextra (and -Werror with ATTN_WERROR=ON)
#   attn_sanitizers ATTN_SANITIZE's / ATTN_FUZZ's instrumentation, compile and link
# libattn links both PUBLIC inside the build tree only ($<BUILD_INTERFACE:>), so every test,
# tool, bench, module and the Python extension built here gets them, and installed consumers
# do not. The flags are g++/clang flags: COMPILE_LANGUAGE keeps them away from nvcc.
set(ATTN_HOST_LANGUAGES "$<COMPILE_LANGUAGE:C,CXX>")

add_library(attn_warnings INTERFACE)
target_compile_options(attn_warnings INTERFACE
  "$<${ATTN_HOST_LANGUAGES}:-Wall;-Wextra;-Wno-unused-parameter>"
  "$<$<AND:${ATTN_HOST_LANGUAGES},$<BOOL:${ATTN_WERROR}>>:-Werror>")

add_library(attn_sanitizers INTERFACE)
if(ATTN_FUZZ)
  # Coverage instrumentation for libFuzzer, on top of the sanitizers (ASan + UBSan unless
  # ATTN_SANITIZE names others); only the harness executables link libFuzzer's main
  # (tests/fuzz/CMakeLists.txt), so a tree can build the GoogleTest suite beside them.
  if(NOT ATTN_SANITIZE)
    set(ATTN_SANITIZE address,undefined)
  endif()
  target_compile_options(attn_sanitizers INTERFACE "$<${ATTN_HOST_LANGUAGES}:-fsanitize=fuzzer-no-link>")
endif()
if(ATTN_SANITIZE)
  target_compile_options(attn_sanitizers INTERFACE
    "$<${ATTN_HOST_LANGUAGES}:-fsanitize=${ATTN_SANITIZE};-fno-omit-frame-pointer;-fno-sanitize-recover=undefined>"
    # At the sanitizer trees' -O1 clang reports every `omp simd` loop it leaves scalar (they
    # vectorize in Release); that is not a defect of the source, so -Werror must not stop on it.
    "$<$<AND:${ATTN_HOST_LANGUAGES},$<CXX_COMPILER_ID:Clang>>:-Wno-pass-failed>")
  target_link_options(attn_sanitizers INTERFACE -fsanitize=${ATTN_SANITIZE})
endif()
