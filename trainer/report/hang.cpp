// See hang.h.
#include "trainer/report/hang.h"

#include "device/base/json_optional.h"

#include <algorithm>
#include <map>
#include <sstream>

namespace zrepro {

using json = nlohmann::json;

json flight_json(const std::vector<FlightEntry>& entries) {
  json a = json::array();
  for (const auto& e : entries)
    a.push_back({{"seq", e.seq},
                 {"op", coll_op_name(e.op)},
                 {"dtype", e.dtype},
                 {"in_numel", e.in_numel},
                 {"out_numel", e.out_numel},
                 {"state", flight_state_name(e.state)},
                 {"t_scheduled", e.t_scheduled},
                 {"t_started", e.t_started},
                 {"t_completed", e.t_completed},
                 {"step", e.step},
                 {"micro_step", e.micro_step},
                 {"label", e.label}});
  return a;
}

std::vector<FlightEntry> flight_from_json(const json& j) {
  std::vector<FlightEntry> out;
  for (const auto& x : j) {
    FlightEntry e;
    e.seq = x.at("seq");
    const std::string op = x.at("op");
    for (int i = 0; i < kNumCollOps; ++i)
      if (op == coll_op_name(static_cast<CollOp>(i))) e.op = static_cast<CollOp>(i);
    e.dtype = x.at("dtype");
    e.in_numel = x.at("in_numel");
    e.out_numel = x.at("out_numel");
    const std::string st = x.at("state");
    for (auto s : {FlightEntry::scheduled, FlightEntry::started, FlightEntry::completed, FlightEntry::failed})
      if (st == flight_state_name(s)) e.state = s;
    e.t_scheduled = x.at("t_scheduled");
    e.t_started = x.at("t_started");
    e.t_completed = x.at("t_completed");
    e.step = x.at("step");
    e.micro_step = x.at("micro_step");
    e.label = x.at("label");
    out.push_back(e);
  }
  return out;
}

json FlightDump::to_json() const { return {{"rank", rank}, {"reason", reason}, {"entries", flight_json(entries)}}; }

FlightDump FlightDump::from_json(const json& j) {
  return {j.at("rank").get<int>(), j.at("reason").get<std::string>(), flight_from_json(j.at("entries"))};
}

std::string describe_flight_entry(const FlightEntry& e) {
  std::ostringstream os;
  os << coll_op_name(e.op) << "(" << e.dtype << ", in " << e.in_numel << ", out " << e.out_numel << ") ["
     << e.label << ", step " << e.step << " micro-step " << e.micro_step << ", " << flight_state_name(e.state) << "]";
  return os.str();
}

json HangDiagnosis::to_json() const {
  json s = json::array();
  for (const auto& x : suspects) s.push_back({{"rank", x.rank}, {"evidence", x.evidence}});
  json rv = json::array();
  for (const auto& v : ranks) {
    auto seq_or_null = [](int64_t q) { return q >= 0 ? json(q) : json(nullptr); };
    rv.push_back({{"rank", v.rank},
                  {"dumped", v.dumped},
                  {"last_completed_seq", seq_or_null(v.last_completed_seq)},
                  {"last_completed", v.last_completed.empty() ? json(nullptr) : json(v.last_completed)},
                  {"waiting_seq", seq_or_null(v.waiting_seq)},
                  {"waiting_in", v.waiting_in.empty() ? json(nullptr) : json(v.waiting_in)},
                  {"idle_s", v.dumped ? json(v.idle_s) : json(nullptr)}});
  }
  return {{"seq", seq}, {"culprit_ranks", culprits}, {"kind", kind}, {"text", text}, {"suspects", s}, {"ranks", rv}};
}

std::optional<HangDiagnosis> hang_in(const json& details) {
  if (!details.is_object() || !details.contains("hang") || !details["hang"].is_object()) return std::nullopt;
  return HangDiagnosis::from_json(details["hang"]);
}

HangDiagnosis HangDiagnosis::from_json(const json& j) {
  HangDiagnosis d;
  d.seq = j.at("seq").get<int64_t>();
  d.culprits = j.at("culprit_ranks").get<std::vector<int>>();
  d.kind = j.at("kind").get<std::string>();
  d.text = j.at("text").get<std::string>();
  for (const auto& x : j.at("suspects")) d.suspects.push_back({x.at("rank").get<int>(), x.at("evidence").get<std::string>()});
  for (const auto& x : j.at("ranks")) {
    RankView v;
    v.rank = x.at("rank").get<int>();
    v.dumped = x.at("dumped").get<bool>();
    v.last_completed_seq = optional_of<int64_t>(x, "last_completed_seq").value_or(-1);
    v.last_completed = optional_of<std::string>(x, "last_completed").value_or("");
    v.waiting_seq = optional_of<int64_t>(x, "waiting_seq").value_or(-1);
    v.waiting_in = optional_of<std::string>(x, "waiting_in").value_or("");
    v.idle_s = optional_of<double>(x, "idle_s").value_or(0);
    d.ranks.push_back(v);
  }
  return d;
}

json HangReport::to_json() const {
  json j{{"reason", reason}, {"timeout_s", timeout_s}, {"diagnosis", diagnosis.to_json()}};
  if (!config_mismatch.empty()) j["config_mismatch"] = config_mismatch;
  return j;
}

HangReport HangReport::from_json(const json& j) {
  HangReport r;
  r.reason = j.at("reason").get<std::string>();
  r.timeout_s = j.at("timeout_s").get<double>();
  r.diagnosis = HangDiagnosis::from_json(j.at("diagnosis"));
  if (j.contains("config_mismatch")) r.config_mismatch = j.at("config_mismatch").get<std::vector<std::string>>();
  return r;
}

namespace {


std::string signature(const FlightEntry& e) {
  return std::string(coll_op_name(e.op)) + "/" + e.dtype + "/" + std::to_string(e.in_numel) + "/" +
         std::to_string(e.out_numel);
}

std::string rank_list(const std::vector<int>& r) {
  std::string s;
  for (int x : r) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

double last_activity(const std::vector<FlightEntry>& entries) {
  double t = 0;
  for (const auto& e : entries) t = std::max({t, e.t_scheduled, e.t_started, e.t_completed});
  return t;
}

// The rank that stopped issuing collectives first, when its last activity lags the newest
// rank's by more than 1 s, and the words that say so.
std::optional<std::pair<int, std::string>> lagging_rank(const std::vector<std::vector<FlightEntry>>& per_rank) {
  int oldest = -1;
  double newest = 0, oldest_t = 0;
  for (int r = 0; r < static_cast<int>(per_rank.size()); ++r) {
    if (per_rank[r].empty()) continue;
    const double t = last_activity(per_rank[r]);
    newest = std::max(newest, t);
    if (oldest < 0 || t < oldest_t) oldest = r, oldest_t = t;
  }
  if (oldest < 0 || newest - oldest_t <= 1.0) return std::nullopt;
  return std::make_pair(oldest, "its last collective activity is " + std::to_string(newest - oldest_t).substr(0, 5) +
                                    " s older than the other ranks' (it stopped issuing collectives first)");
}

std::string culprit_evidence(const HangDiagnosis& d) {
  const std::string at = " collective #" + std::to_string(d.seq);
  if (d.kind == "missing") return "never issued" + at;
  if (d.kind == "mismatch") return "issued a different collective at" + at;
  if (d.kind == "stuck") return "waits in" + at + " (it may be the victim of a slower peer)";
  return "named by the flight dumps";
}

// Orders the suspects (see [Note: hang suspects]) and makes culprits their ranks.
void rank_suspects(HangDiagnosis& d, const std::vector<std::vector<FlightEntry>>& per_rank,
                   const std::vector<int>& no_dump) {
  auto add = [&](int r, const std::string& why) {
    for (const auto& s : d.suspects)
      if (s.rank == r) return;
    d.suspects.push_back({r, why});
  };
  for (int r : no_dump)
    add(r, "no flight dump: it never answered (frozen, killed, or blocked outside a collective)");
  const auto lag = lagging_rank(per_rank);
  if (lag && d.kind == "stuck") add(lag->first, lag->second);
  for (int r : d.culprits) add(r, culprit_evidence(d));
  if (lag) add(lag->first, lag->second);
  d.culprits.clear();
  for (const auto& s : d.suspects) d.culprits.push_back(s.rank);
  if (d.suspects.empty()) return;
  std::ostringstream os;
  os << " Suspects, most likely first:";
  for (size_t i = 0; i < d.suspects.size(); ++i)
    os << (i ? ";" : "") << " rank " << d.suspects[i].rank << " (" << d.suspects[i].evidence << ")";
  d.text += os.str() + ".";
}

// Each rank's last completed collective and the first it has not completed.
std::vector<HangDiagnosis::RankView> rank_views(const std::vector<std::vector<FlightEntry>>& per_rank) {
  double newest = 0;
  for (const auto& entries : per_rank)
    if (!entries.empty()) newest = std::max(newest, last_activity(entries));
  std::vector<HangDiagnosis::RankView> out;
  for (int r = 0; r < static_cast<int>(per_rank.size()); ++r) {
    HangDiagnosis::RankView v;
    v.rank = r;
    v.dumped = !per_rank[r].empty();
    for (const auto& e : per_rank[r]) {
      if (e.state == FlightEntry::completed && e.seq > v.last_completed_seq)
        v.last_completed_seq = e.seq, v.last_completed = describe_flight_entry(e);
      if (e.state != FlightEntry::completed && (v.waiting_seq < 0 || e.seq < v.waiting_seq))
        v.waiting_seq = e.seq, v.waiting_in = describe_flight_entry(e);
    }
    if (v.dumped) v.idle_s = newest - last_activity(per_rank[r]);
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace

namespace {

// Every rank's entries by sequence number, and what one sequence number shows across them.
struct HangScan {
  const std::vector<std::vector<FlightEntry>>& per_rank;
  int64_t gas = 1;
  std::vector<std::map<int64_t, const FlightEntry*>> by_seq;
  std::vector<int> no_dump;
  int64_t lo = 0, hi = -1;  // the sequence numbers every dump may hold

  const FlightEntry& at(int rank, int64_t k) const { return *by_seq[rank].at(k); }
};

HangScan scan_dumps(const std::vector<std::vector<FlightEntry>>& per_rank, int64_t gas) {
  HangScan h{per_rank, gas, std::vector<std::map<int64_t, const FlightEntry*>>(per_rank.size()), {}, 0, -1};
  for (int r = 0; r < static_cast<int>(per_rank.size()); ++r) {
    if (per_rank[r].empty()) {
      h.no_dump.push_back(r);
      continue;
    }
    for (const auto& e : per_rank[r]) h.by_seq[r][e.seq] = &e;
    h.lo = std::max(h.lo, per_rank[r].front().seq);
    h.hi = std::max(h.hi, per_rank[r].back().seq);
  }
  return h;
}

// Collective k: the ranks that dumped and lack it, and the others by what they issued.
struct SeqView {
  std::vector<int> missing;
  std::map<std::string, std::vector<int>> sigs;
};
SeqView view_of(const HangScan& h, int64_t k) {
  SeqView v;
  for (int r = 0; r < static_cast<int>(h.per_rank.size()); ++r) {
    if (h.per_rank[r].empty()) continue;
    const auto it = h.by_seq[r].find(k);
    if (it == h.by_seq[r].end()) v.missing.push_back(r);
    else v.sigs[signature(*it->second)].push_back(r);
  }
  return v;
}

void explain_missing(const HangScan& h, int64_t k, const SeqView& v, HangDiagnosis& d, std::ostream& os) {
  d.kind = "missing";
  d.culprits = v.missing;
  os << "not all ranks joined collective #" << k << ": missing rank(s) " << rank_list(v.missing) << ". ";
  for (auto& [sig, ranks] : v.sigs) os << "Rank(s) " << rank_list(ranks) << " issued " << describe_flight_entry(h.at(ranks[0], k)) << ". ";
}

// Culprit: a minority signature; on a tie, the rank whose collective came from a
// micro-step the configuration does not have.
void explain_mismatch(const HangScan& h, int64_t k, const SeqView& v, HangDiagnosis& d, std::ostream& os) {
  d.kind = "mismatch";
  size_t best = 0;
  for (auto& [sig, ranks] : v.sigs) best = std::max(best, ranks.size());
  size_t largest = 0;  // signatures with the most ranks
  for (auto& [sig, ranks] : v.sigs) largest += ranks.size() == best;
  for (auto& [sig, ranks] : v.sigs) {
    const bool minority = ranks.size() < best;
    const bool extra = h.at(ranks[0], k).micro_step >= h.gas;
    if (minority || (largest > 1 && extra)) d.culprits.insert(d.culprits.end(), ranks.begin(), ranks.end());
  }
  os << "ranks disagree on collective #" << k << ": ";
  for (auto& [sig, ranks] : v.sigs) os << "rank(s) " << rank_list(ranks) << " issued " << describe_flight_entry(h.at(ranks[0], k)) << "; ";
}

// False when every rank completed collective k.
bool explain_stuck(const HangScan& h, int64_t k, const SeqView& v, HangDiagnosis& d, std::ostream& os) {
  std::vector<int> stuck;
  for (auto& [sig, ranks] : v.sigs)
    for (int r : ranks)
      if (h.at(r, k).state != FlightEntry::completed) stuck.push_back(r);
  if (stuck.empty()) return false;
  d.kind = "stuck";
  d.culprits = stuck;
  os << "every rank issued collective #" << k << " " << describe_flight_entry(h.at(v.sigs.begin()->second[0], k))
     << " but rank(s) " << rank_list(stuck) << " never completed it (a peer is slow or blocked elsewhere). ";
  return true;
}

}  // namespace

HangDiagnosis diagnose_hang(const std::vector<std::vector<FlightEntry>>& per_rank, int64_t gas) {
  HangDiagnosis d;
  d.ranks = rank_views(per_rank);
  const HangScan h = scan_dumps(per_rank, gas);
  for (int64_t k = h.lo; k <= h.hi; ++k) {
    const SeqView v = view_of(h, k);
    std::ostringstream os;
    if (!v.missing.empty()) explain_missing(h, k, v, d, os);
    else if (v.sigs.size() > 1) explain_mismatch(h, k, v, d, os);
    else if (!explain_stuck(h, k, v, d, os)) continue;
    d.seq = k;
    if (!h.no_dump.empty()) os << "No flight dump from rank(s) " << rank_list(h.no_dump) << ".";
    d.text = os.str();
    rank_suspects(d, per_rank, h.no_dump);
    return d;
  }
  d.kind = "unknown";
  d.text = h.no_dump.empty() ? "every recorded collective matched and completed on all ranks"
                             : "no flight dump from rank(s) " + rank_list(h.no_dump) + "; they may be the ones stuck";
  d.culprits.clear();
  rank_suspects(d, per_rank, h.no_dump);
  return d;
}

}  // namespace zrepro
