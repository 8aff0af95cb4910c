# Shared backend modules (libattn_cuda.so, ...) are defined after the install rules are read:
# once the top directory is done, install whichever exist into `destination`, next to libattn,
# where the registry's dlopen looks for them.
function(attn_install_modules destination)
  foreach(module attn_cuda)
    if(TARGET ${module})
      set_target_properties(${module} PROPERTIES INSTALL_RPATH "$ORIGIN")
      install(TARGETS ${module} LIBRARY DESTINATION ${destination})
    endif()
  endforeach()
endfunction()
macro(attn_defer_install_modules destination)
  cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL attn_install_modules ${destination})
endmacro()
