# One generated translation unit per Hopper GETT configuration: each CUTLASS instantiation takes
# about a minute to compile, so each gets its own unit (built in parallel, rebuilt alone).
#
#   gather_linear_gett_sources(<out-var> <template> <spec>...)
#
# A spec is "name dtype tile_m tile_n tile_k cluster_m cluster_n schedule [epilogue_m epilogue_n]
# [weight_rows | weight_rows_split]" (dtype: a gather_linear::DType enumerator; schedule:
# cooperative or pingpong; no epilogue fields, or 0 0: CUTLASS picks the epilogue sub-tile;
# weight_rows: the weight's rows are the GEMM's M mode; weight_rows_split: that, with the reduction
# split into parts summed afterwards). The template sees @NAME@, @DTYPE@, @TILE_M@, @TILE_N@,
# @TILE_K@, @CLUSTER_M@, @CLUSTER_N@, @SCHEDULE@, @EPILOGUE_M@, @EPILOGUE_N@, @WEIGHT_ROWS_AS_M@ and
# @SPLIT_REDUCTION@ (true or false); the units land in <current binary dir>/generated/gett_<name>.cu.
function(gather_linear_gett_sources out_var template)
  set(sources)
  foreach(spec IN LISTS ARGN)
    string(REPLACE " " ";" fields "${spec}")
    set(WEIGHT_ROWS_AS_M false)
    set(SPLIT_REDUCTION false)
    list(GET fields -1 last_field)
    if(last_field STREQUAL "weight_rows" OR last_field STREQUAL "weight_rows_split")
      set(WEIGHT_ROWS_AS_M true)
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
    set(unit "${CMAKE_CURRENT_BINARY_DIR}/generated/gett_${NAME}.cu")
    configure_file("${template}" "${unit}" @ONLY)
    list(APPEND sources "${unit}")
  endforeach()
  set(${out_var} ${sources} PARENT_SCOPE)
endfunction()
