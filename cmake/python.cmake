# The Python module `qkv` (docs/python.md): the extension _qkv (src/python, pybind11) and the
# package around it (python/qkv/*.py), laid out as an importable package in BUILD/python/qkv.
# Included by CMakeLists.txt after the library and the application are defined.
#
#   QKV_PYTHON=ON (default)   build it when pybind11 (and the interpreter's headers) are found
#   QKV_PYTHON_EXECUTABLE     the interpreter it is built for (Debian's /usr/bin/python3)
#   QKV_PYTHON_INSTALL_DIR    where `cmake --install` puts the package, relative to the prefix
#                             (lib/python3/dist-packages: /usr/lib/python3/dist-packages/qkv in
#                             the .deb, Debian's directory for packaged modules)
set(QKV_HAVE_PYTHON OFF CACHE INTERNAL "The Python module is built (tools/check_package.sh reads it)")
set(QKV_PYTHON_EXECUTABLE /usr/bin/python3 CACHE FILEPATH "The Python interpreter the module qkv is built for")
set(QKV_PYTHON_INSTALL_DIR lib/python3/dist-packages CACHE STRING
    "Where the Python package qkv is installed, relative to CMAKE_INSTALL_PREFIX")
if(QKV_PYTHON AND QKV_SANITIZE)
  # An AddressSanitizer-instrumented extension does not load into an uninstrumented interpreter.
  message(STATUS "qkv: no Python module in a sanitizer build (QKV_SANITIZE=ON)")
elseif(QKV_PYTHON)
  # pybind11's classic mode finds the interpreter named by PYTHON_EXECUTABLE: not the first
  # python3 on PATH (a pyenv one, say), which may lack numpy or be another version.
  set(PYTHON_EXECUTABLE ${QKV_PYTHON_EXECUTABLE} CACHE FILEPATH "" FORCE)
  find_package(pybind11 2.6 CONFIG QUIET)
  if(pybind11_FOUND)
    set(QKV_HAVE_PYTHON ON CACHE INTERNAL "")
  else()
    message(STATUS "qkv: pybind11 not found: no Python module (scripts/install-deps.sh installs pybind11-dev)")
  endif()
endif()
message(STATUS "qkv: Python module=${QKV_HAVE_PYTHON}")
if(NOT QKV_HAVE_PYTHON)
  return()
endif()

# The module is a shared object that links libqkv.a (the library alone: no part of the qkv command),
# so its code must be position
# independent. -fPIC goes on every target through qkv_options (executables too), so that all of
# them keep sharing the one precompiled header (GCC refuses a PCH built with other -fpic/-fpie
# settings); -fno-semantic-interposition lets calls within the library stay direct and inline as
# under -fPIE, and the linker relaxes the rest in executables. (install.cmake keeps these flags
# out of the exported targets, as every qkv_options flag.)
target_compile_options(qkv_options INTERFACE -fPIC -fno-semantic-interposition)

file(GLOB QKV_PYTHON_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/python/*.cpp)
# NO_EXTRAS: no link-time optimisation of the bindings (minutes of linking for nothing the
# forward pass spends time in) and no stripping (cpack strips the package's copy).
pybind11_add_module(qkv_python MODULE NO_EXTRAS ${QKV_PYTHON_SOURCES})
set_target_properties(qkv_python PROPERTIES OUTPUT_NAME _qkv
                      LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/python/qkv)
target_link_libraries(qkv_python PRIVATE qkv)
target_precompile_headers(qkv_python REUSE_FROM qkv)

# The pure-Python part of the package, copied next to the extension: BUILD/python is then an
# importable tree (PYTHONPATH=BUILD/python, or QKV_BUILD_DIR for tests/python).
file(GLOB QKV_PYTHON_FILES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/python/qkv/*.py)
set(QKV_PYTHON_COPIES "")
foreach(f ${QKV_PYTHON_FILES})
  get_filename_component(name ${f} NAME)
  set(copy ${PROJECT_BINARY_DIR}/python/qkv/${name})
  add_custom_command(OUTPUT ${copy} COMMAND ${CMAKE_COMMAND} -E copy_if_different ${f} ${copy} DEPENDS ${f}
                     COMMENT "python/qkv/${name}")
  list(APPEND QKV_PYTHON_COPIES ${copy})
endforeach()
add_custom_target(qkv_python_files ALL DEPENDS ${QKV_PYTHON_COPIES})
add_dependencies(qkv_python qkv_python_files)

install(TARGETS qkv_python LIBRARY DESTINATION ${QKV_PYTHON_INSTALL_DIR}/qkv)
install(FILES ${QKV_PYTHON_FILES} DESTINATION ${QKV_PYTHON_INSTALL_DIR}/qkv)
