# Install rules of the C++ package, included by the top CMakeLists.txt outside wheel builds.
include(CMakePackageConfigHelpers)
include(${CMAKE_CURRENT_LIST_DIR}/install_modules.cmake)

set(ATTN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/attn)
# libattn finds its shared modules (libattn_cuda.so) next to itself and the model configs at
# <prefix>/share/attn/models (src/models/builtin_models.cpp), so the installed tree is relocatable.
set_target_properties(attn PROPERTIES EXPORT_NAME attn INSTALL_RPATH "$ORIGIN")
install(TARGETS attn EXPORT attnTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/attn DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/models/ DESTINATION ${CMAKE_INSTALL_DATADIR}/attn/models
        FILES_MATCHING PATTERN "*.json")
if(TARGET attn_cli)
  set_target_properties(attn_cli PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
  install(TARGETS attn_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(EXPORT attnTargets NAMESPACE attn:: DESTINATION ${ATTN_INSTALL_CMAKEDIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/attnConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/attnConfig.cmake INSTALL_DESTINATION ${ATTN_INSTALL_CMAKEDIR}
                              PATH_VARS CMAKE_INSTALL_DATADIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/attnConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/attnConfig.cmake ${CMAKE_BINARY_DIR}/attnConfigVersion.cmake
        DESTINATION ${ATTN_INSTALL_CMAKEDIR})

attn_defer_install_modules(${CMAKE_INSTALL_LIBDIR})
