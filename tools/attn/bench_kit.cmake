# The bench kit (ceilings, pool rule, workloads) shared by `attn`, its tests and bench/: one static
# library, attn_bench_kit, compiled once in whichever directory includes this file first (its
# per-ISA files get their flags there: source properties are per directory).
file(GLOB ATTN_BENCH_KIT_SOURCES CONFIGURE_DEPENDS
  ${CMAKE_CURRENT_LIST_DIR}/bench_kit.cpp ${CMAKE_CURRENT_LIST_DIR}/bench_pool.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bench_ceilings.cpp ${CMAKE_CURRENT_LIST_DIR}/bench_cpu.cpp ${CMAKE_CURRENT_LIST_DIR}/bench_paged.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bench_simd*.cpp ${CMAKE_CURRENT_LIST_DIR}/bench_amx*.cpp)
if(NOT TARGET attn_bench_kit)
  attn_apply_isa_flags(${ATTN_BENCH_KIT_SOURCES})
  add_library(attn_bench_kit STATIC ${ATTN_BENCH_KIT_SOURCES})
  target_include_directories(attn_bench_kit PUBLIC ${CMAKE_CURRENT_LIST_DIR})
  # The run-time choice of table uses the library's CPU layer (src/cpu/isa.hpp).
  target_include_directories(attn_bench_kit PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(attn_bench_kit PUBLIC attn OpenMP::OpenMP_CXX)
endif()
