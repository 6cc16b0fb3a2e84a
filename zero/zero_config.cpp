// See zero_config.h.
#include "zero/zero_config.h"

namespace zrepro {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::fp16: return "fp16";
    case Precision::bf16: return "bf16";
  }
  return "?";
}

}  // namespace zrepro
