// The command table: every zrepro command once, with its usage line, what `zrepro --help`
// says of it, the function that runs it and whether it computes with BLAS. main()'s help,
// dispatch and OpenBLAS kernel choice read it, and docs/reference/cli.md is generated from
// the commands it lists (tests/trainer/app/cli_reference_process_test.cpp).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace zrepro {

struct Command {
  std::string_view name;     // "run", "bench"
  std::string_view args;     // the usage line after the name
  std::string_view summary;  // one or two lines for `zrepro --help`
  int (*main)(int argc, char** argv);  // argv[0] is the command's name
  bool uses_blas;            // trains or benchmarks: wants OpenBLAS's best kernels (ensure_blas_kernels)
  std::vector<std::string_view> subcommands;  // each with its own options (`bench comm`); empty: none
};

const std::vector<Command>& commands();
const Command* find_command(std::string_view name);  // nullptr when there is none
std::string usage_text();                            // `zrepro --help`
std::vector<std::string> command_lines();            // "run", "bench comm", ...: every page of cli.md

// `zrepro bench NAME`: the benchmark of that name.
int bench_command(int argc, char** argv);

}  // namespace zrepro
