# hearth_layer(NAME DIR DEPS...): one static library per src/ folder. Its include root is src/,
# so code includes "base/status.h", "formats/gguf.h" ... and only what DEPS grants can link.
function(hearth_layer name)
  cmake_parse_arguments(L "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  if(NOT L_SOURCES)
    # The layer's sources are globbed; pick up every .cpp in the folder (recursing for kernels'
    # arch/ subfolders is the layer's own choice, listed explicitly there).
    file(GLOB L_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  endif()
  add_library(${name} STATIC ${L_SOURCES} ${PROJECT_SOURCE_DIR}/cmake/empty.cpp)
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC ${L_DEPS} PRIVATE ${L_PRIVATE_DEPS})
  set_target_properties(${name} PROPERTIES CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
endfunction()

# hearth_test(NAME SOURCES... LIBS ...): a GoogleTest executable registered with CTest.
function(hearth_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main hearth_test_support)
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  # A list value inside PROPERTIES would be split into separate arguments: escape its ';'.
  string(REPLACE ";" "\\;" labels "${T_LABELS}")
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
    PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${labels}"
    ENVIRONMENT "HEARTH_SHARED_DEFAULT=${HEARTH_SHARED_RESOLVED};HEARTH_BIN_DIR=${PROJECT_BINARY_DIR}/apps/cli")
endfunction()
