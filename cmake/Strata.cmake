# Dependencies (Debian packages only) and the helpers every area's CMakeLists uses.
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(ICU REQUIRED COMPONENTS uc)
find_package(CLI11 REQUIRED)
find_package(GTest REQUIRED)
find_package(benchmark QUIET)
find_package(MPI COMPONENTS C)

# OpenBLAS: prefer the OpenMP build so BLAS and strata's kernels share one thread pool.
find_library(STRATA_OPENBLAS NAMES openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp
  NO_DEFAULT_PATH)
if(NOT STRATA_OPENBLAS)
  find_library(STRATA_OPENBLAS NAMES openblas REQUIRED)
endif()
find_path(STRATA_CBLAS_INCLUDE cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/aarch64-linux-gnu/openblas-openmp
        /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas)
add_library(strata_blas INTERFACE)
target_link_libraries(strata_blas INTERFACE ${STRATA_OPENBLAS})
target_include_directories(strata_blas SYSTEM INTERFACE ${STRATA_CBLAS_INCLUDE})

# strata_debian_lib(TARGET LIB HEADER PACKAGE): an interface target for a Debian library found
# by its .so and a header, or a configure error naming the package to install.
function(strata_debian_lib target lib header package)
  find_library(${target}_LIB NAMES ${lib})
  find_path(${target}_INCLUDE ${header})
  if(NOT ${target}_LIB OR NOT ${target}_INCLUDE)
    message(FATAL_ERROR "lib${lib}.so or ${header} not found: install the Debian package ${package} (make deps)")
  endif()
  add_library(${target} INTERFACE)
  target_link_libraries(${target} INTERFACE ${${target}_LIB})
  target_include_directories(${target} SYSTEM INTERFACE ${${target}_INCLUDE})
endfunction()

# oneDNN: gemm_bf16's onednn path. SentencePiece: the tokenizers of Llama 2 and TinyLlama.
strata_debian_lib(strata_dnnl dnnl oneapi/dnnl/dnnl.hpp libdnnl-dev)
strata_debian_lib(strata_sentencepiece sentencepiece sentencepiece_processor.h libsentencepiece-dev)

find_library(STRATA_XXHASH NAMES xxhash REQUIRED)

# toml++ (Debian libtomlplusplus-dev): run configs.
find_package(PkgConfig REQUIRED)
pkg_check_modules(TOMLPP REQUIRED IMPORTED_TARGET tomlplusplus)

# Build time. Code whose speed a run does not feel (tests, the command line, the planner
# and the offline diagnostics) builds at -O1 in optimised builds; the rest (core, kernels,
# comm, model, data, parallel, ckpt, train: every hot path) keeps -O3. Template-heavy code
# (JSON, CLI11, GoogleTest) compiles about twice as fast at -O1.
set(STRATA_LIGHT_OPT $<$<CONFIG:Release,RelWithDebInfo>:-O1>)

# strata_light(TARGET): TARGET builds at the light optimisation level above.
function(strata_light target)
  target_compile_options(${target} PRIVATE ${STRATA_LIGHT_OPT})
endfunction()

# strata_pch(TARGET HEADER...): precompiles HEADERs for TARGET (STRATA_PCH). Parsing
# nlohmann/json.hpp costs about 1 s of every unit that includes it, CLI11 and GoogleTest
# about as much again.
function(strata_pch target)
  if(STRATA_PCH)
    target_precompile_headers(${target} PRIVATE ${ARGN})
  endif()
endfunction()

# strata_unity(TARGET): TARGET's files compile STRATA_UNITY at a time, as one unit (CMake's
# unity build): the JSON, CLI11 and GoogleTest templates are instantiated once per unit instead
# of once per file (the test binaries' units take about half the CPU time). Two files of one
# target may then not both define a name at namespace scope, anonymous namespaces included: a
# test file whose helpers would collide has a namespace of its own. Not for the kernels
# (compiled once per instruction-set level) or data/ (file-local `fail`s of different shapes).
function(strata_unity target)
  if(STRATA_UNITY GREATER 1)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${STRATA_UNITY})
  endif()
endfunction()

# strata_library(AREA [DEPS...]): one static library per folder of src/, from every .cc in it.
function(strata_library area)
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  add_library(strata_${area} STATIC ${srcs})
  target_include_directories(strata_${area} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(strata_${area} PUBLIC ${ARGN})
  set_property(GLOBAL APPEND PROPERTY STRATA_LIBS strata_${area})
endfunction()

# strata_isa_levels(AREA SOURCES src... DEPS dep...): SOURCES of strata_AREA compiled twice
# more on x86-64, for x86-64-v3 and x86-64-v4, each copy in its own namespace (STRATA_ISA:
# isa_v3, isa_v4; kernels/isa_target.h, included last by each such unit, sets the level),
# beside the library's own copy for the build's baseline (isa_baseline). DEPS give the copies
# their include paths. The callers dispatch on the level chosen once per process (kernels/isa.h).
function(strata_isa_levels area)
  cmake_parse_arguments(arg "" "" "SOURCES;DEPS" ${ARGN})
  target_compile_definitions(strata_${area} PRIVATE STRATA_ISA=isa_baseline)
  if(NOT CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
    return()
  endif()
  get_target_property(options strata_${area} COMPILE_OPTIONS)
  foreach(level v3 v4)
    add_library(strata_${area}_${level} OBJECT ${arg_SOURCES})
    string(TOUPPER ${level} LEVEL)
    # The level comes from kernels/isa_target.h's pragma, not -march (why: that header).
    target_compile_definitions(strata_${area}_${level} PRIVATE STRATA_ISA=isa_${level} STRATA_ISA_${LEVEL})
    if(options)
      target_compile_options(strata_${area}_${level} PRIVATE ${options})
    endif()
    target_link_libraries(strata_${area}_${level} PRIVATE ${arg_DEPS})
    target_sources(strata_${area} PRIVATE $<TARGET_OBJECTS:strata_${area}_${level}>)
  endforeach()
endfunction()

# strata_test(AREA [DEPS...]): tests/AREA/*.cc into one GoogleTest binary, each test its own ctest.
function(strata_test area)
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  add_executable(test_${area} ${srcs})
  target_link_libraries(test_${area} PRIVATE ${ARGN} strata_test_support GTest::gtest GTest::gtest_main)
  target_compile_definitions(test_${area} PRIVATE
    STRATA_SOURCE_DIR="${PROJECT_SOURCE_DIR}" STRATA_BINARY="$<TARGET_FILE:strata>")
  strata_light(test_${area})
  strata_unity(test_${area})
  if(STRATA_UNITY GREATER 1)
    # A parameterised fixture over a file's own (anonymous-namespace) case type is fine in a
    # unity unit: the type never leaves it. GCC 12 misreads some std::string concatenations it
    # inlines across a larger unit as out-of-bounds copies (GCC bugs 105651, 105329).
    target_compile_options(test_${area} PRIVATE -Wno-subobject-linkage -Wno-array-bounds
                           -Wno-stringop-overflow)
  endif()
  # Every test binary reuses the support library's precompiled GoogleTest + JSON.
  if(STRATA_PCH)
    target_precompile_headers(test_${area} REUSE_FROM strata_test_support)
  endif()
  add_dependencies(test_${area} strata)
  # GOMP_SPINCOUNT: the spin the strata binary otherwise re-executes itself to set
  # (core/wait_policy.h's kDefaultSpinCount; WaitPolicy.TheTestsEnvironmentHoldsTheDefaultSpin
  # checks the two agree), so each of the tests' thousands of strata runs loads its libraries
  # once instead of twice (10 ms of a 25 ms run). One property per variable: a list would be
  # split by the discovery.
  gtest_discover_tests(test_${area} DISCOVERY_TIMEOUT 60
    PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=1" ENVIRONMENT_MODIFICATION "GOMP_SPINCOUNT=set:1000")
  # After the discovered tests (the order of TEST_INCLUDE_FILES): the slowest ones' COST.
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${PROJECT_SOURCE_DIR}/tests/costs.cmake)
endfunction()
