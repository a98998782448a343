# attnkit_embed_text(<out.cpp> <function> <file>): generates a translation unit
# defining `std::string_view attnkit::embedded::<function>()` returning the
# file's text, so data files (catalog, profiles) ship inside the library.
function(attnkit_embed_text out_cpp function_name input_file)
  file(READ "${input_file}" ATTNKIT_EMBED_TEXT)
  set(ATTNKIT_EMBED_FUNCTION "${function_name}")
  configure_file("${PROJECT_SOURCE_DIR}/cmake/embedded_text.cpp.in" "${out_cpp}" @ONLY)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${input_file}")
endfunction()
