// attnkit: validate deployments, explain diagnostics, list backends, and run or
// benchmark attention problems. See design.md section 5.
#include <CLI/CLI.hpp>

#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"attnkit: attention backend selection, validation and kernels"};
  app.require_subcommand(1);
  int exit_code = 0;
  attnkit::cli::add_run_command(app, exit_code);
  attnkit::cli::add_backends_command(app, exit_code);
  attnkit::cli::add_check_command(app, exit_code);
  attnkit::cli::add_explain_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);  // usage errors name the flag and exit non-zero
  }
  return exit_code;
}
