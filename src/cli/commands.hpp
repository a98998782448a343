#pragma once
// Each `attnkit` subcommand lives in its own file and adds itself to the app.
// A command's callback sets the process exit code through `exit_code`.
#include <CLI/CLI.hpp>

namespace attnkit::cli {

void add_run_command(CLI::App& app, int& exit_code);       // run_command.cpp
void add_backends_command(CLI::App& app, int& exit_code);  // backends_command.cpp
void add_check_command(CLI::App& app, int& exit_code);     // check_command.cpp
void add_explain_command(CLI::App& app, int& exit_code);   // explain_command.cpp

}  // namespace attnkit::cli
