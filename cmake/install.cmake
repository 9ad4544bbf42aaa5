# Installation, the CMake package and the Debian package; included at the end of CMakeLists.txt,
# when every target exists. See docs/packaging.md.
#
#   cmake --install BUILD --prefix P   headers, libqkv.a, bin/qkv, share/qkv/{configs,grammar,scripts},
#                                      share/doc/qkv, lib/cmake/qkv (find_package(qkv) -> qkv::qkv),
#                                      lib/python3/dist-packages/qkv (the Python module: python.cmake)
#   cd BUILD && cpack -G DEB           qkv_<version>_amd64.deb (configure with
#                                      -DCMAKE_INSTALL_PREFIX=/usr -DQKV_NATIVE=OFF)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(QKV_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/qkv)

# ---- usage requirements as an installed tree sees them ----
# The build's requirements stay exactly what CMakeLists.txt says (every rewrite below is wrapped
# in BUILD_INTERFACE, so no compile line changes); only the exported copy differs.
function(qkv_build_interface_only target property)
  get_target_property(values ${target} ${property})
  if(NOT values)
    return()
  endif()
  set(wrapped "")
  foreach(v IN LISTS values)
    string(REPLACE ">" "$<ANGLE-R>" v "${v}")  # "<xtensor/xarray.hpp>" would end the expression
    list(APPEND wrapped "$<BUILD_INTERFACE:${v}>")
  endforeach()
  set_property(TARGET ${target} PROPERTY ${property} "${wrapped}")
endfunction()
# Include directories point into the source and build trees; installed, the headers (version.hpp
# included) are in <prefix>/include.
qkv_build_interface_only(qkv INTERFACE_INCLUDE_DIRECTORIES)
set_property(TARGET qkv APPEND PROPERTY INTERFACE_INCLUDE_DIRECTORIES
             "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>")
# The precompiled header is the build's compile-time device, not a usage requirement.
qkv_build_interface_only(qkv INTERFACE_PRECOMPILE_HEADERS)
# Warnings and -march=native are how qkv compiles itself; a consumer chooses its own flags (the
# sanitizer link options and QKV_SANITIZE stay: a sanitized libqkv.a needs them to link).
qkv_build_interface_only(qkv_options INTERFACE_COMPILE_OPTIONS)

# ---- what is installed ----
install(TARGETS qkv qkv_options EXPORT qkvTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
# qkv_app (the command's pieces) is not installed: it is the application, not the library.
install(TARGETS qkv_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/qkv DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp")
install(FILES ${PROJECT_BINARY_DIR}/generated/qkv/version.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/qkv)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/configs/ DESTINATION ${CMAKE_INSTALL_DATADIR}/qkv/configs)
# The grammar files (compiled into qkv; installed for a learner to copy and extend: docs/tasks.md).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/share/grammar/ DESTINATION ${CMAKE_INSTALL_DATADIR}/qkv/grammar)
# The scripts qkv runs (QKV_SCRIPT_DIRS ends in ${CMAKE_INSTALL_FULL_DATADIR}/qkv/scripts) and
# the Python tools next to them (checkpoint conversion, the PyTorch mirror).
file(GLOB QKV_INSTALL_SCRIPTS ${PROJECT_SOURCE_DIR}/scripts/*.py)
install(FILES ${QKV_INSTALL_SCRIPTS} DESTINATION ${CMAKE_INSTALL_DATADIR}/qkv/scripts)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})

# ---- the CMake package ----
install(EXPORT qkvTargets NAMESPACE qkv:: DESTINATION ${QKV_INSTALL_CMAKEDIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/qkvConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/generated/qkvConfig.cmake
                              INSTALL_DESTINATION ${QKV_INSTALL_CMAKEDIR})
# 0.x: a minor version may break the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/generated/qkvConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/generated/qkvConfig.cmake
              ${PROJECT_BINARY_DIR}/generated/qkvConfigVersion.cmake
        DESTINATION ${QKV_INSTALL_CMAKEDIR})

# ---- the Debian package (cpack -G DEB) ----
# Depends: the shared libraries bin/qkv needs (readelf NEEDED, mapped with dpkg -S on Debian 12;
# versions as dpkg-shlibdeps computes them) plus OpenBLAS, which qkv opens with dlopen (no
# NEEDED entry: see src/kernels/blas.cpp; libopenblas.so.0 comes from any of Debian's variants,
# the pthread one first as on the build machine).
# The package also holds the headers, libqkv.a and the CMake package; building against them needs
# the -dev packages, which are Suggests, not Depends: running qkv does not need ~300 MB of headers
# and static libraries, and find_package(qkv) names the one that is missing.
set(QKV_DEB_DEPENDS "libc6 (>= 2.34)" "libgcc-s1 (>= 3.0)" "libstdc++6 (>= 11)")
if(QKV_OPENMP)
  list(APPEND QKV_DEB_DEPENDS "libgomp1 (>= 6)")
endif()
list(APPEND QKV_DEB_DEPENDS "libhdf5-103-1" "libyaml-cpp0.7 (>= 0.7.0)" "libopenblas0-pthread | libopenblas0")
set(QKV_DEB_SUGGESTS "libxtensor-dev (>= 0.24), xtl-dev, libhdf5-dev, libyaml-cpp-dev, g++, cmake")
if(QKV_HAVE_MPI)
  list(APPEND QKV_DEB_DEPENDS "libopenmpi3 (>= 4.1.4)")
  string(APPEND QKV_DEB_SUGGESTS ", libopenmpi-dev, openmpi-bin")
endif()
# The Python module (docs/python.md) is built for one interpreter version (its ABI) and imports numpy.
if(QKV_HAVE_PYTHON)
  math(EXPR qkv_python_next "${PYTHON_VERSION_MINOR} + 1")
  list(APPEND QKV_DEB_DEPENDS "python3 (>= ${PYTHON_VERSION_MAJOR}.${PYTHON_VERSION_MINOR}~)"
       "python3 (<< ${PYTHON_VERSION_MAJOR}.${qkv_python_next})" "python3-numpy")
  # As dh_python3 does for Debian's Python packages: byte-compile the module when installed, and
  # remove the __pycache__ directories an import wrote before the package is removed (dpkg does
  # not own them, and would leave /usr/lib/python3/dist-packages/qkv behind).
  file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/generated/deb/postinst CONTENT [[#!/bin/sh
set -e
if [ "$1" = configure ] && command -v py3compile >/dev/null 2>&1; then
  py3compile -p qkv
fi
]])
  file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/generated/deb/prerm CONTENT [[#!/bin/sh
set -e
if command -v py3clean >/dev/null 2>&1; then
  py3clean -p qkv
fi
]])
  set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA "${PROJECT_BINARY_DIR}/generated/deb/postinst;${PROJECT_BINARY_DIR}/generated/deb/prerm")
  set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)
endif()
list(JOIN QKV_DEB_DEPENDS ", " QKV_DEB_DEPENDS)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME qkv)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "qkv")
set(CPACK_PACKAGE_CONTACT "qkv maintainers <qkv@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "tape-based autodiff and attention training on the CPU")
set(CPACK_PACKAGE_DESCRIPTION "A small tape-based automatic-differentiation framework in C++17 with
attention layers, optimizers, a YAML-driven trainer for toy sequence tasks and HDF5 checkpoints.
Contains the qkv command, its configs and plotting scripts, the documentation, the C++
library (headers, static libqkv.a, CMake package: find_package(qkv) -> qkv::qkv) and, when built,
the Python module (import qkv, for /usr/bin/python3).")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # qkv_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "${QKV_DEB_DEPENDS}")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3-matplotlib")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "${QKV_DEB_SUGGESTS}")
set(CPACK_STRIP_FILES ON)

# Checked when cpack runs, not at configure time (a development build may have any prefix): the
# package's qkv looks for its scripts in ${CMAKE_INSTALL_FULL_DATADIR}/qkv/scripts, so the build
# must have been configured for /usr; -march=native or sanitizers make a package for this
# machine only.
set(CPACK_PROJECT_CONFIG_FILE ${PROJECT_BINARY_DIR}/generated/CPackProjectConfig.cmake)
file(CONFIGURE OUTPUT ${CPACK_PROJECT_CONFIG_FILE} @ONLY CONTENT [[
if(CPACK_GENERATOR STREQUAL "DEB")
  if(NOT "@CMAKE_INSTALL_PREFIX@" STREQUAL "/usr")
    message(FATAL_ERROR "qkv: this build was configured with CMAKE_INSTALL_PREFIX=@CMAKE_INSTALL_PREFIX@, "
            "so its qkv looks for its scripts in @CMAKE_INSTALL_FULL_DATADIR@/qkv/scripts, not in the package's "
            "/usr/share/qkv/scripts. Reconfigure with -DCMAKE_INSTALL_PREFIX=/usr (and -DQKV_NATIVE=OFF), rebuild, rerun cpack.")
  endif()
  if(@QKV_NATIVE@)
    message(WARNING "qkv: built with QKV_NATIVE=ON (-march=native): the package runs only on CPUs with this "
            "machine's instruction set. Use -DQKV_NATIVE=OFF for a package to share.")
  endif()
  if(@QKV_SANITIZE@)
    message(WARNING "qkv: packaging a sanitizer build (QKV_SANITIZE=ON).")
  endif()
endif()
]])
include(CPack)
