# Selector decision latency (cached vs uncached). Included from bench/CMakeLists.txt:
#   include(${CMAKE_CURRENT_SOURCE_DIR}/selector.cmake)
find_package(benchmark REQUIRED)
add_executable(attn_selector_bench ${CMAKE_CURRENT_LIST_DIR}/selector_bench.cpp)
set_target_properties(attn_selector_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
target_link_libraries(attn_selector_bench PRIVATE attn benchmark::benchmark)
