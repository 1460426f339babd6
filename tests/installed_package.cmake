# CTest's `installed_package`: installs the build into a fresh prefix inside the build tree, then
# configures, builds and runs examples/cpp_consumer against it, as a project of its own would
# (find_package(gather_linear CONFIG)).
#   cmake -DBUILD_DIR=<build> -DSOURCE_DIR=<repository> -DWORK_DIR=<scratch> -DGENERATOR=<generator>
#         -DCXX_COMPILER=<compiler> -P tests/installed_package.cmake
file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
set(consumer "${WORK_DIR}/consumer")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}" COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${SOURCE_DIR}/examples/cpp_consumer" -B "${consumer}" -G "${GENERATOR}"
                        "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" "-DCMAKE_PREFIX_PATH=${prefix}" COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${consumer}" COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND "${consumer}/attention_output_projection" COMMAND_ERROR_IS_FATAL ANY)
