# Real 2-rank MPI jobs (mpirun --oversubscribe -np 2 on loopback), driven by tests/dist/mpi_test.sh
# on the built qkv. Skipped (exit 77) when mpirun or h5diff is absent. Included from
# tests/CMakeLists.txt.
set(QKV_MPI_TEST_SCRIPT ${CMAKE_CURRENT_SOURCE_DIR}/dist/mpi_test.sh)
if(QKV_HAVE_MPI)
  set(QKV_MPI_TESTS equivalence masked resume checksum kill sweep)
else()
  set(QKV_MPI_TESTS nompi)  # the build without MPI refuses to run as one of several processes
endif()
foreach(t ${QKV_MPI_TESTS})
  add_test(NAME mpi.${t}
           COMMAND bash ${QKV_MPI_TEST_SCRIPT} ${t} $<TARGET_FILE:qkv_cli> ${CMAKE_CURRENT_BINARY_DIR}/tmp/mpi_${t})
  set_tests_properties(mpi.${t} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300 PROCESSORS 2 LABELS mpi
                       ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")  # OpenMPI plugins leak at exit
endforeach()
