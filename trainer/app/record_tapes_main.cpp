// zrepro_record_tapes FILE: records the planner's activation tapes from the LibTorch
// this build links, on this CPU, into FILE (a build step: [Note: tapes of this LibTorch]
// in tape_recorder.h). Warns about what it could not turn into symbols; the tapes test
// fails on those.
#include <cstdio>
#include <exception>
#include <iostream>

#include "trainer/planner/tape_recorder.h"
#include "trainer/report/report.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: zrepro_record_tapes FILE (the planner's activation tapes of this LibTorch, as JSON)\n";
    return 2;
  }
  try {
    const zrepro::TapeTable t = zrepro::record_gpt_tapes();
    zrepro::write_file_atomic(argv[1], zrepro::tapes_to_json(t).dump(1) + "\n");
    for (const auto& p : t.problems) std::cerr << "[zrepro_record_tapes] warning: " << p << "\n";
    std::cerr << "[zrepro_record_tapes] " << t.tapes.size() << " tapes of LibTorch " << t.libtorch
              << " (recorded with oneDNN off; its bf16 GEMM scratch on this CPU: " << t.bf16_gemm_scratch_bytes << " bytes) -> " << argv[1] << "\n";
  } catch (const std::exception& e) {
    std::cerr << "[zrepro_record_tapes] error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
