// docs/reference/cli.md is the binary's own help: `zrepro --help` and `--help` of every
// command in the command table (trainer/app/commands.h), so a new flag, a new command or a
// changed default cannot leave the page behind. ZREPRO_WRITE_CLI_DOC=1 rewrites the page.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tests/support/process.h"

namespace {

std::string page() {
  std::ostringstream md;
  md << "# zrepro command line\n\n"
        "Generated from the binary's own help (`zrepro --help`, `zrepro <command> --help`) by\n"
        "tests/trainer/app/cli_reference_process_test.cpp, which fails when this page and the help differ;\n"
        "`ZREPRO_WRITE_CLI_DOC=1 build/zrepro_process_tests --gtest_filter=CliReference.*` rewrites it.\n"
        "How to use each command: docs/guide/; exit codes: docs/reference/exit-codes.md.\n\n";
  const auto top = zrepro_test::zrepro_cmd("--help", 60, false);
  EXPECT_EQ(top.code, 0) << top.output;
  md << "## zrepro\n\n```text\n" << top.output << "```\n";
  const auto list = zrepro_test::zrepro_cmd("--list-commands", 60, false);
  EXPECT_EQ(list.code, 0) << list.output;
  std::istringstream lines(list.output);
  for (std::string line; std::getline(lines, line);) {
    const auto help = zrepro_test::zrepro_cmd(line + " --help", 60, false);
    EXPECT_EQ(help.code, 0) << line << ": " << help.output;
    EXPECT_NE(help.output.find("zrepro " + line), std::string::npos) << line << " --help does not name itself";
    md << "\n## zrepro " << line << "\n\n```text\n" << help.output << "```\n";
  }
  return md.str();
}

}  // namespace

TEST(CliReference, ThePageIsTheBinarysOwnHelp) {
  const std::string path = std::string(ZREPRO_SOURCE_DIR).append("/docs/reference/cli.md");
  const std::string want = page();
  if (const char* w = std::getenv("ZREPRO_WRITE_CLI_DOC"); w && std::string(w) == "1") {
    std::ofstream(path) << want;
    GTEST_SKIP() << "wrote " << path;
  }
  const std::string have = zrepro_test::read_text(path);
  EXPECT_EQ(have, want) << "docs/reference/cli.md differs from the help: rewrite it with ZREPRO_WRITE_CLI_DOC=1 "
                           "build/zrepro_process_tests --gtest_filter=CliReference.*";
}

TEST(CliReference, EveryCommandIsListedAndAnUnknownOneIsRefused) {
  const auto top = zrepro_test::zrepro_cmd("--help", 60, false);
  for (const char* c : {"run", "plan", "config", "ab", "scenario", "diagnose", "check", "verify", "doctor", "env",
                        "bench"})
    EXPECT_NE(top.output.find(std::string("\n  ") + c + " "), std::string::npos) << c << " missing from --help";
  const auto bad = zrepro_test::zrepro_cmd("frobnicate", 60);
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.output.find("unknown command \"frobnicate\""), std::string::npos) << bad.output;
  const auto bench = zrepro_test::zrepro_cmd("bench nope", 60);
  EXPECT_EQ(bench.code, 2);
  EXPECT_NE(bench.output.find("comm, adam, copy"), std::string::npos) << bench.output;
}
