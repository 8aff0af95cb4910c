# The bench kit (ceilings, pool rule, workloads) shared by `attn` and bench/: one list, and the
# per-ISA files get their flags in whichever directory compiles them (source properties are
# per directory).
file(GLOB ATTN_BENCH_KIT_SOURCES CONFIGURE_DEPENDS
  ${CMAKE_CURRENT_LIST_DIR}/bench_kit.cpp ${CMAKE_CURRENT_LIST_DIR}/bench_pool.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bench_ceilings.cpp ${CMAKE_CURRENT_LIST_DIR}/bench_paged.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bench_simd*.cpp ${CMAKE_CURRENT_LIST_DIR}/bench_amx*.cpp)
attn_apply_isa_flags(${ATTN_BENCH_KIT_SOURCES})
# The run-time choice of table uses the library's CPU layer (src/cpu/isa.hpp).
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/bench_simd.cpp PROPERTIES INCLUDE_DIRECTORIES ${PROJECT_SOURCE_DIR}/src)
