// --ranks against the machine's cores ([Note: oversubscribed ranks]).
#include <gtest/gtest.h>

#include <cstdlib>

#include "device/base/errors.h"
#include "trainer/runtime/launch.h"

using namespace zrepro;

TEST(Launch, MoreRanksThanCoresAreRefusedUnlessAskedFor) {
  const char* saved = std::getenv("OMPI_MCA_rmaps_base_oversubscribe");
  const std::string keep = saved ? saved : "";
  ::unsetenv("OMPI_MCA_rmaps_base_oversubscribe");
  EXPECT_NO_THROW(check_ranks_fit_slots(2, false, 2));
  try {
    check_ranks_fit_slots(8, false, 2);
    ADD_FAILURE() << "8 ranks on 2 cores were accepted";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    for (const char* named : {"--ranks 8", "2 core(s)", "--oversubscribe", "--world-size 8"})
      EXPECT_NE(m.find(named), std::string::npos) << named << " not in: " << m;
  }
  EXPECT_NO_THROW(check_ranks_fit_slots(8, true, 2));  // --oversubscribe
  ::setenv("OMPI_MCA_rmaps_base_oversubscribe", "true", 1);  // Open MPI's own way to ask
  EXPECT_NO_THROW(check_ranks_fit_slots(8, false, 2));
  ::setenv("OMPI_MCA_rmaps_base_oversubscribe", "0", 1);
  EXPECT_THROW(check_ranks_fit_slots(8, false, 2), ConfigError);
  if (saved) ::setenv("OMPI_MCA_rmaps_base_oversubscribe", keep.c_str(), 1);
  else ::unsetenv("OMPI_MCA_rmaps_base_oversubscribe");
}
