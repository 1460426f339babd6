# The Hopper GETT configurations, compiled as a few generated translation units.
#
#   gather_linear_gett_sources(<out-var> <unit-template> <definition-template>
#                              [UNIT_PER_CONFIGURATION] <spec>...)
#
# A spec is "name dtype tile_m tile_n tile_k cluster_m cluster_n schedule [epilogue_m epilogue_n]
# [weight_rows | weight_rows_split]" (dtype: a gather_linear::DType enumerator; schedule:
# cooperative or pingpong; no epilogue fields, or 0 0: CUTLASS picks the epilogue sub-tile;
# weight_rows: the weight's rows are the GEMM's M mode; weight_rows_split: that, with the reduction
# split into parts summed afterwards). The definition template sees @NAME@, @DTYPE@, @TILE_M@,
# @TILE_N@, @TILE_K@, @CLUSTER_M@, @CLUSTER_N@, @SCHEDULE@, @EPILOGUE_M@, @EPILOGUE_N@,
# @WEIGHT_ROWS_AS_M@ and @SPLIT_REDUCTION@ (true or false); the unit template sees @DEFINITIONS@.
#
# One unit per dtype and M mode (x's rows, or the weight's rows), in
# <current binary dir>/generated/gett_<dtype>[_weight_rows].cu. The configurations of one unit
# share most of CUTLASS's instantiations, which then compile once. On a 2-core build machine one
# configuration alone took 114 s to compile, six bfloat16 ones together 264 s, at a peak of 7.3 GB
# (gather_linear_gett_job_pool bounds how many such units compile at once). UNIT_PER_CONFIGURATION
# gives each configuration its own unit, gett_<name>.cu, for builds with cores to spare.
function(gather_linear_gett_sources out_var unit_template definition_template)
  cmake_parse_arguments(PARSE_ARGV 3 arg "UNIT_PER_CONFIGURATION" "" "")
  file(READ "${definition_template}" definition_text)
  set(units)
  foreach(spec IN LISTS arg_UNPARSED_ARGUMENTS)
    string(REPLACE " " ";" fields "${spec}")
    set(WEIGHT_ROWS_AS_M false)
    set(SPLIT_REDUCTION false)
    set(unit_suffix "")
    list(GET fields -1 last_field)
    if(last_field STREQUAL "weight_rows" OR last_field STREQUAL "weight_rows_split")
      set(WEIGHT_ROWS_AS_M true)
      set(unit_suffix "_weight_rows")
      if(last_field STREQUAL "weight_rows_split")
        set(SPLIT_REDUCTION true)
      endif()
      list(REMOVE_AT fields -1)
    endif()
    list(LENGTH fields field_count)
    if(NOT (field_count EQUAL 8 OR field_count EQUAL 10))
      message(FATAL_ERROR "GETT configuration \"${spec}\": expected 8 or 10 fields, got ${field_count}")
    endif()
    list(GET fields 0 NAME)
    list(GET fields 1 DTYPE)
    list(GET fields 2 TILE_M)
    list(GET fields 3 TILE_N)
    list(GET fields 4 TILE_K)
    list(GET fields 5 CLUSTER_M)
    list(GET fields 6 CLUSTER_N)
    list(GET fields 7 SCHEDULE)
    set(EPILOGUE_M 0)
    set(EPILOGUE_N 0)
    if(field_count EQUAL 10)
      list(GET fields 8 EPILOGUE_M)
      list(GET fields 9 EPILOGUE_N)
    endif()
    string(CONFIGURE "${definition_text}" definition @ONLY)
    set(unit "${DTYPE}${unit_suffix}")
    if(arg_UNIT_PER_CONFIGURATION)
      set(unit "${NAME}")
    endif()
    if(NOT unit IN_LIST units)
      list(APPEND units "${unit}")
      set(definitions_${unit} "")
    endif()
    string(APPEND definitions_${unit} "${definition}")
  endforeach()

  set(sources)
  foreach(unit IN LISTS units)
    set(DEFINITIONS "${definitions_${unit}}")
    # configure_file leaves an unchanged unit untouched, so reconfiguring rebuilds nothing.
    set(source "${CMAKE_CURRENT_BINARY_DIR}/generated/gett_${unit}.cu")
    configure_file("${unit_template}" "${source}" @ONLY)
    list(APPEND sources "${source}")
  endforeach()
  set(${out_var} ${sources} PARENT_SCOPE)
endfunction()

# A Ninja job pool for the GETT units, one slot per 8 GiB of the build machine's memory (at least
# one): Ninja's default of cores + 2 jobs would run four of them at once on 2 cores, 29 GB.
function(gather_linear_gett_job_pool pool_name)
  cmake_host_system_information(RESULT memory_mib QUERY TOTAL_PHYSICAL_MEMORY)
  math(EXPR slots "${memory_mib} / 8192")
  if(slots LESS 1)
    set(slots 1)
  endif()
  set_property(GLOBAL APPEND PROPERTY JOB_POOLS "${pool_name}=${slots}")
endfunction()
