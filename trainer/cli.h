// The zrepro subcommands (run, config) and their shared flags. Each returns the
// process exit code of the DESIGN.md contract.
#pragma once

namespace zrepro {

int run_command(int argc, char** argv);
int config_command(int argc, char** argv);

}  // namespace zrepro
