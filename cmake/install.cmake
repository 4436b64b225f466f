# cmake --install (included last by the top-level CMakeLists.txt, so every
# target exists): the programs, the shipped configs, the core's headers and
# static libraries with the CMake package dtsim, and the Python package.
#
#   <prefix>/bin/dtsim, dtsim-gui            the programs (where built)
#   <prefix>/libexec/dtsim/                  the validation worker and calibration probes (where built)
#   <prefix>/share/dtsim/configs/            clusters, plans, models, profiles; found by the
#                                            programs relative to themselves (Note [Finding the configs])
#   <prefix>/include/dtsim/{sim,models}/     the core's public headers
#   <prefix>/lib/libdtsim_{sim,models}.a     the core
#   <prefix>/lib/cmake/dtsim/                find_package(dtsim): dtsim::sim, dtsim::models
#   <prefix>/<DTSIM_PYTHON_INSTALL_DIR>/dtsim   the Python package (python/)
include(CMakePackageConfigHelpers)

set(DTSIM_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/dtsim" CACHE STRING "Where the CMake package dtsim goes, relative to the prefix")
set(DTSIM_INSTALL_CONFIGDIR "${CMAKE_INSTALL_DATADIR}/dtsim/configs")

# ---- programs ----------------------------------------------------------------
install(TARGETS dtsim RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT core)
if(TARGET dtsim-gui)
  install(TARGETS dtsim-gui RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT gui)
endif()
# bash completion, where bash-completion looks for it.
install(FILES ${PROJECT_SOURCE_DIR}/cli/dtsim.bash-completion DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
        RENAME dtsim COMPONENT core)
# Helpers dtsim starts, not run by hand: `dtsim validate` and `dtsim
# calibrate` look for them in <prefix>/libexec/dtsim beside their own bin/
# ($DTSIM_WORKER and $DTSIM_CALIB_BIN_DIR override).
foreach(program dtsim_worker dtsim_torch_bench dtsim_gloo_bench dtsim_c10d_bench dtsim_nccl_bench)
  if(TARGET ${program})
    install(TARGETS ${program} RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/dtsim COMPONENT runtime)
  endif()
endforeach()
if(TARGET dtsim_torch_bench)  # its Python side (Note [Python host probe])
  install(PROGRAMS ${PROJECT_SOURCE_DIR}/calibrate/src/python_host_probe.py DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/dtsim
          RENAME dtsim_python_probe.py COMPONENT runtime)
endif()

# ---- configs -----------------------------------------------------------------
install(DIRECTORY ${PROJECT_SOURCE_DIR}/configs/ DESTINATION ${DTSIM_INSTALL_CONFIGDIR} COMPONENT core
        PATTERN "*.log" EXCLUDE)

# ---- the core as a CMake package ---------------------------------------------
install(DIRECTORY ${PROJECT_SOURCE_DIR}/sim/include/ ${PROJECT_SOURCE_DIR}/models/include/
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT core)
# Exported as dtsim::sim and dtsim::models, the names they have in this
# tree; dtsim_warnings only because the static libraries name it (link-only,
# its flags never reach a consumer).
set_target_properties(dtsim_sim PROPERTIES EXPORT_NAME sim)
set_target_properties(dtsim_models PROPERTIES EXPORT_NAME models)
set_target_properties(dtsim_warnings PROPERTIES EXPORT_NAME warnings)
install(TARGETS dtsim_sim dtsim_models dtsim_warnings EXPORT dtsimTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT core
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT dtsimTargets NAMESPACE dtsim:: DESTINATION ${DTSIM_INSTALL_CMAKEDIR} COMPONENT core)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/dtsimConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/dtsimConfig.cmake
  INSTALL_DESTINATION ${DTSIM_INSTALL_CMAKEDIR}
  PATH_VARS DTSIM_INSTALL_CONFIGDIR)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/dtsimConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/dtsimConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/dtsimConfigVersion.cmake
        DESTINATION ${DTSIM_INSTALL_CMAKEDIR} COMPONENT core)

# ---- the Python package ------------------------------------------------------
if(TARGET dtsim_python)
  set(_dtsim_pkg "${DTSIM_PYTHON_INSTALL_DIR}/dtsim")
  install(TARGETS dtsim_python LIBRARY DESTINATION ${_dtsim_pkg} COMPONENT python)
  install(FILES ${PROJECT_SOURCE_DIR}/python/dtsim/__init__.py DESTINATION ${_dtsim_pkg} COMPONENT python)
  # dtsim/configs -> the prefix's share/dtsim/configs, relative, so the
  # module finds them beside itself wherever the prefix is moved.
  file(RELATIVE_PATH _dtsim_rel "/prefix/${_dtsim_pkg}" "/prefix/${DTSIM_INSTALL_CONFIGDIR}")
  install(CODE "file(CREATE_LINK \"${_dtsim_rel}\" \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${_dtsim_pkg}/configs\" SYMBOLIC)
message(STATUS \"Installing: \$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${_dtsim_pkg}/configs -> ${_dtsim_rel}\")"
          COMPONENT python)
endif()
