// attnkit: validate deployments, explain diagnostics, list backends, and run or
// benchmark attention problems. See design.md section 5.
#include <CLI/CLI.hpp>

#include <iostream>
#include <new>

#include "attnkit/core/host_memory.hpp"
#include "cli_support.hpp"
#include "commands.hpp"

namespace {

// The subcommand whose flags failed to parse ("" before any was recognised).
std::string failed_command(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands()) return sub->get_name();
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"attnkit: attention backend selection, validation and kernels"};
  app.require_subcommand(1);
  int exit_code = 0;
  attnkit::cli::add_run_command(app, exit_code);
  attnkit::cli::add_backends_command(app, exit_code);
  attnkit::cli::add_check_command(app, exit_code);
  attnkit::cli::add_explain_command(app, exit_code);
  const std::string format = attnkit::cli::requested_format(argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    // A usage error is a catalogued diagnostic too; `check` reports its engine
    // flags with the code attnkit.check() gives for the same flags.
    const std::string command = failed_command(app);
    const attnkit::Diagnostic d =
        command == "check" ? attnkit::diagnose("AK3107", {{"detail", e.what()}})
                           : attnkit::diagnose("AK0002", {{"command", command.empty() ? "attnkit" : "attnkit " + command},
                                                          {"detail", e.what()}});
    attnkit::cli::print_diagnostics(d, format);
    return attnkit::cli::kUsageExit;
  } catch (const std::bad_alloc&) {
    return attnkit::cli::print_diagnostics(attnkit::host_allocation_failed("this command", -1), format);
  } catch (const std::exception& e) {
    return attnkit::cli::print_diagnostics(attnkit::diagnose("AK0003", {{"detail", e.what()}}), format);
  }
  return exit_code;
}
