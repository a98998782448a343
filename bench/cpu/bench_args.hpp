#pragma once
// The command line both CPU benchmarks share (CLI11): the dtype as attnkit
// names it, the attention shape, the threads (0: every core) and the repeats.
// A benchmark derives its Args from ShapeArgs (setting its own defaults),
// adds its own options to the app, then calls parse_shape_args.
#include <omp.h>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "attnkit/core/dtype.hpp"

namespace attnkit::bench {

struct ShapeArgs {
  DType dtype = DType::f32;
  int seqlen = 1024, heads = 16, head_dim = 128, threads = 0, reps = 5;
};

// --dtype (its text in `dtype_text`), --seqlen, --heads, --head-dim, --threads
// and --reps, the current values of `a` shown as defaults.
inline void add_shape_options(CLI::App& app, ShapeArgs& a, std::string& dtype_text) {
  dtype_text = dtype_name(a.dtype);
  app.add_option("--dtype", dtype_text, "fp32 | fp16 | bf16")->capture_default_str();
  app.add_option("--seqlen", a.seqlen)->capture_default_str();
  app.add_option("--heads", a.heads)->capture_default_str();
  app.add_option("--head-dim", a.head_dim)->capture_default_str();
  app.add_option("--threads", a.threads, "0: every core")->capture_default_str();
  app.add_option("--reps", a.reps)->capture_default_str();
}

// Parses the command line (CLI11's exit on --help or a bad option), then the
// dtype (exit 2 naming `program` when attnkit does not know it) and threads 0
// as every core.
inline void parse_shape_args(CLI::App& app, int argc, char** argv, const char* program, ShapeArgs& a,
                             const std::string& dtype_text) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e));
  }
  const auto t = parse_dtype(dtype_text);
  if (!t) {
    std::fprintf(stderr, "%s: bad --dtype\n", program);
    std::exit(2);
  }
  a.dtype = *t;
  if (a.threads <= 0) a.threads = omp_get_max_threads();
}

}  // namespace attnkit::bench
