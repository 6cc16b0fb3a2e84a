// The decision: from a log's evidence (evidence.h) to a Diagnosis, in the diagnosis order
// ([Note: diagnosis order], decide.cpp): a table of rules, each a name, the evidence it
// needs and what it decides, walked in order until one decides. A new cause is a row of
// that table (and its decide function), not a branch in the walk.
#pragma once
#include "trainer/diagnose/diagnose.h"
#include "trainer/diagnose/evidence.h"

namespace zrepro::diagnosis {

// The first rule of the table that decides, or "no known fingerprint".
void decide(const Scan& s, Diagnosis& d);
// A hang's kind from what each rank waited in (also for Flight Recorder dumps).
void decide_hang(const Scan& s, Diagnosis& d);

}  // namespace zrepro::diagnosis
