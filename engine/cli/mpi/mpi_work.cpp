#include "mpi/mpi_work.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>

#include "core/error.h"
#include "mpi/mpi_comm.h"

namespace octodiff::cli::mpi {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
void nap() { std::this_thread::sleep_for(std::chrono::milliseconds(1)); }

constexpr double kHeartbeatSeconds = 1.0;

// What rank 0 knows of every rank.
struct Peer {
  std::string host = "?";
  double load_seconds = 0;
  Clock::time_point last_heard = Clock::now();
  int unit = -1;  // the unit it runs, -1: idle
  Clock::time_point unit_start;
  double fraction = 0;  // of its unit
  int units_done = 0, items_done = 0;
  double busy_seconds = 0;
  bool stopped = false;
  std::string died;  // how its compute process died, as its MPI process said
};

std::vector<Peer> g_peers;  // rank 0's view, kept for rank_report()

std::string who(int rank) { return cat("rank ", rank, " (host ", g_peers.at(rank).host, ")"); }

// Rank 0: a worker silent past the timeout ends the job (it cannot be told to stop). A rank whose
// compute process died is not silent: its MPI process said so, and waits for "stop".
void check_silence(const Ranks& ranks) {
  for (int r = 1; r < ranks.size(); ++r)
    if (!g_peers[r].stopped && g_peers[r].died.empty() && since(g_peers[r].last_heard) > ranks.timeout_seconds)
      abort_job(cat(who(r), " sent nothing for ", ranks.timeout_seconds,
                    " s (it died, hangs or cannot be reached); the job is ended. Everything finished is on disk."));
}

void send_alive_to_workers(const Ranks& ranks, Clock::time_point* last) {
  if (since(*last) < kHeartbeatSeconds) return;
  *last = Clock::now();
  for (int r = 1; r < ranks.size(); ++r)
    if (!g_peers[r].stopped) send(r, {{"type", "alive"}});
}

// Rank 0: tells every worker to stop and waits (bounded) for each one's goodbye; results still
// in flight are received and dropped.
void stop_workers(const Ranks& ranks) {
  for (int r = 1; r < ranks.size(); ++r)
    if (!g_peers[r].stopped) send(r, {{"type", "stop"}});
  const auto t0 = Clock::now();
  auto all_stopped = [&] {
    for (int r = 1; r < ranks.size(); ++r)
      if (!g_peers[r].stopped) return false;
    return true;
  };
  while (!all_stopped()) {
    if (auto m = poll()) {
      g_peers[m->source].last_heard = Clock::now();
      const std::string type = m->body.value("type", "");
      if (type == "bye") g_peers[m->source].stopped = true;
      if (type == "result") receive_result(*m, ranks.timeout_seconds);
      continue;
    }
    if (since(t0) > ranks.timeout_seconds)
      for (int r = 1; r < ranks.size(); ++r)
        if (!g_peers[r].stopped) abort_job(cat(who(r), " did not stop within ", ranks.timeout_seconds, " s"));
    nap();
  }
}

// Rank 0 during the load: records every rank's "ready", ends the job on silence.
void await_ready(Ranks& ranks, std::future<void>& own, std::vector<json>& ready) {
  Clock::time_point last_alive = Clock::now();
  int waiting = ranks.size() - 1;
  while (waiting > 0 || own.wait_for(std::chrono::milliseconds(0)) != std::future_status::ready) {
    if (auto m = poll()) {
      Peer& p = g_peers[m->source];
      p.last_heard = Clock::now();
      p.host = m->body.value("host", p.host);
      const bool died = m->body["type"] == "died";
      if (died) p.died = m->body.value("message", "(no message)");
      if ((m->body["type"] == "ready" || died) && ready[m->source].is_null()) {
        ready[m->source] = died ? json{{"ok", false}} : m->body;
        --waiting;
      }
      continue;
    }
    check_silence(ranks);
    send_alive_to_workers(ranks, &last_alive);
    nap();
  }
}

// A worker: `fn` in a thread while heartbeats go to rank 0 and its messages are read; returns
// when fn finished or rank 0 said stop (then *stopped, and `cancel` was set).
template <typename Fn>
void run_beside_heartbeats(const Ranks& ranks, Fn&& fn, CancelToken* cancel, bool* stopped,
                           const std::function<json()>& beat) {
  auto future = std::async(std::launch::async, std::forward<Fn>(fn));
  Clock::time_point last_beat{}, last_from_0 = Clock::now();
  while (future.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready) {
    if (since(last_beat) >= kHeartbeatSeconds) {
      send(0, beat());
      last_beat = Clock::now();
    }
    while (auto m = poll(0)) {
      last_from_0 = Clock::now();
      if (m->body["type"] == "stop" && cancel) {
        cancel->cancel();
        *stopped = true;
      }
    }
    if (since(last_from_0) > ranks.timeout_seconds)
      abort_job(cat("rank ", ranks.rank(), " (host ", ranks.host(), "): rank 0 sent nothing for ",
                    ranks.timeout_seconds, " s"));
  }
  future.get();  // fn's own exceptions are caught inside it
}

// A worker: waits (bounded) for rank 0's next message other than a heartbeat.
Message next_order(const Ranks& ranks) {
  const auto t0 = Clock::now();
  for (;;) {
    if (auto m = poll(0)) {
      if (m->body["type"] != "alive") return *m;
      continue;
    }
    if (since(t0) > ranks.timeout_seconds)
      abort_job(cat("rank ", ranks.rank(), " (host ", ranks.host(), "): rank 0 sent nothing for ",
                    ranks.timeout_seconds, " s"));
    nap();
  }
}

}  // namespace

void test_signal_if_asked(int rank, int unit) {
  const char* v = std::getenv("OCTODIFF_TEST_RANK_SIGNAL");
  if (!v) return;
  int r = -1, sig = 0, nth = 1;
  if (std::sscanf(v, "%d:%d:%d", &r, &sig, &nth) < 2) fail("OCTODIFF_TEST_RANK_SIGNAL must be RANK:SIGNAL[:UNIT], got '", v, "'");
  if (r != rank || nth != unit) return;
  prctl(PR_SET_DUMPABLE, 0);  // no core file
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

bool load_everywhere(Ranks& ranks, const std::function<void()>& load, double* seconds) {
  std::string error;
  auto timed_load = [&] {
    const auto t0 = Clock::now();
    try {
      load();
    } catch (const std::exception& e) {
      error = e.what();
    }
    *seconds = since(t0);
  };
  if (!ranks.leader()) {
    bool stopped = false;
    run_beside_heartbeats(ranks, timed_load, nullptr, &stopped,
                          [&] { return json{{"type", "alive"}, {"host", ranks.host()}}; });
    send(0, {{"type", "ready"}, {"host", ranks.host()}, {"ok", error.empty()}, {"error", error},
             {"load_seconds", *seconds}});
    const Message verdict = next_order(ranks);
    if (verdict.body["type"] == "go") return true;
    send(0, {{"type", "bye"}});
    return false;
  }
  g_peers.assign(ranks.size(), Peer{});
  g_peers[0].host = ranks.host();
  std::future<void> own = std::async(std::launch::async, timed_load);
  std::vector<json> ready(ranks.size());
  await_ready(ranks, own, ready);
  ready[0] = {{"ok", error.empty()}, {"error", error}, {"load_seconds", *seconds}};
  std::string failures;
  for (int r = 0; r < ranks.size(); ++r) {
    g_peers[r].load_seconds = ready[r].value("load_seconds", 0.0);
    if (!g_peers[r].died.empty())
      failures += cat(failures.empty() ? "" : "; ", who(r), " died", ready[r].value("ok", false) ? "" : " while loading the model",
                      ": ", g_peers[r].died);
    else if (!ready[r].value("ok", false))
      failures += cat(failures.empty() ? "" : "; ", who(r), " could not load the model: ", ready[r].value("error", ""));
  }
  if (failures.empty()) {
    for (int r = 1; r < ranks.size(); ++r) send(r, {{"type", "go"}});
    return true;
  }
  stop_workers(ranks);
  fail(failures);
}

void serve(Ranks& ranks, const Compute& compute) {
  for (int units = 0;;) {
    const Message order = next_order(ranks);
    const std::string type = order.body["type"];
    if (type == "stop") break;
    if (type != "work") continue;
    test_signal_if_asked(ranks.rank(), ++units);
    const int unit = order.body.at("unit");
    const json& spec = order.body.at("spec");
    const int devices = spec.value("devices", 1);
    std::atomic<int> steps_done{0}, steps_per_device{0};
    ProgressCallback progress = [&](const ProgressEvent& e) {
      if (e.phase != Phase::Denoise) return;
      steps_per_device = e.total_steps;
      ++steps_done;
    };
    CancelToken cancel;
    bool stopped = false;
    std::optional<GenerationResult> result;
    std::string error;
    const auto t0 = Clock::now();
    auto work = [&] {
      try {
        result = compute(spec, progress, &cancel);
      } catch (const Cancelled&) {
      } catch (const std::exception& e) {
        error = e.what();
      }
    };
    auto beat = [&] {
      const int total = steps_per_device * devices;
      return json{{"type", "progress"}, {"unit", unit}, {"fraction", total ? double(steps_done) / total : 0.0}};
    };
    run_beside_heartbeats(ranks, work, &cancel, &stopped, beat);
    if (stopped) break;
    if (result)
      send_result(0, *result, {{"unit", unit}, {"seconds", since(t0)}});
    else
      send(0, {{"type", "error"}, {"unit", unit}, {"message", error.empty() ? "cancelled" : error}});
  }
  send(0, {{"type", "bye"}});
}

}  // namespace octodiff::cli::mpi

namespace octodiff::cli::mpi {
namespace {

// Rank 0's state while it hands out units.
struct Coordination {
  Coordination(Ranks& r, const Compute& l, std::vector<WorkUnit> u, bool q, const std::function<void(UnitDone&)>& d)
      : ranks(r), local(l), units(std::move(u)), quiet(q), on_done(d) {}
  Ranks& ranks;
  const Compute& local;
  std::vector<WorkUnit> units;
  bool quiet = false;
  const std::function<void(UnitDone&)>& on_done;
  std::vector<bool> handed_out;
  int done = 0, total_items = 0;
  Clock::time_point start = Clock::now(), last_status = Clock::now(), last_alive = Clock::now();
  // Rank 0's own unit, computed in a thread.
  std::future<void> local_future;
  std::optional<GenerationResult> local_result;
  std::string local_error;
  std::atomic<int> local_steps{0}, local_steps_per_device{0};
  CancelToken local_cancel;
  int local_units = 0;  // rank 0's own units so far
};

void status_line(Coordination& c, bool force) {
  if (c.quiet || (!force && since(c.last_status) < 5.0)) return;
  c.last_status = Clock::now();
  double done_items = 0;
  std::string per_rank;
  for (int r = 0; r < c.ranks.size(); ++r) {
    const Peer& p = g_peers[r];
    const double running = p.unit >= 0 ? p.fraction * c.units[p.unit].items : 0.0;
    done_items += p.items_done + running;
    per_rank += cat(" | r", r, ": ", p.items_done, " done", p.unit >= 0 ? cat(", ", int(p.fraction * 100), "% of ", c.units[p.unit].label) : "");
  }
  const double elapsed = since(c.start);
  std::string eta = "?";
  if (done_items > 0) {
    const int s = static_cast<int>(elapsed * (c.total_items - done_items) / done_items + 0.5);
    eta = s >= 60 ? cat(s / 60, "m", s % 60, "s") : cat(s, "s");
  }
  std::fprintf(stderr, "  progress %d/%d%s | ETA %s\n", static_cast<int>(done_items), c.total_items, per_rank.c_str(),
               eta.c_str());
}

void hand_out(Coordination& c, int rank, int u) {
  c.handed_out[u] = true;
  Peer& p = g_peers[rank];
  p.unit = u;
  p.unit_start = Clock::now();
  p.fraction = 0;
  if (rank > 0) {
    send(rank, {{"type", "work"}, {"unit", u}, {"spec", c.units[u].spec}});
    return;
  }
  c.local_result.reset();
  c.local_error.clear();
  c.local_steps = 0;
  c.local_future = std::async(std::launch::async, [&c, u, nth = ++c.local_units] {
    test_signal_if_asked(0, nth);
    ProgressCallback progress = [&c](const ProgressEvent& e) {
      if (e.phase != Phase::Denoise) return;
      c.local_steps_per_device = e.total_steps;
      ++c.local_steps;
    };
    try {
      c.local_result = c.local(c.units[u].spec, progress, &c.local_cancel);
    } catch (const std::exception& e) {
      c.local_error = e.what();
    }
  });
}

void hand_out_to_idle(Coordination& c) {
  for (int r = 0; r < c.ranks.size(); ++r) {
    if (g_peers[r].unit >= 0 || g_peers[r].stopped) continue;
    for (size_t u = 0; u < c.units.size(); ++u)
      if (!c.handed_out[u] && (c.units[u].only_rank < 0 || c.units[u].only_rank == r)) {
        hand_out(c, r, static_cast<int>(u));
        break;
      }
  }
}

void finish_unit(Coordination& c, int rank, GenerationResult result) {
  Peer& p = g_peers[rank];
  const WorkUnit& unit = c.units.at(p.unit);
  UnitDone done{rank, &unit, std::move(result), since(p.unit_start)};
  p.busy_seconds += done.seconds;
  p.units_done += 1;
  p.items_done += unit.items;
  p.unit = -1;
  p.fraction = 0;
  ++c.done;
  c.on_done(done);
  status_line(c, true);
}

// One message from a worker.
void handle(Coordination& c, const Message& m) {
  Peer& p = g_peers[m.source];
  p.last_heard = Clock::now();
  const std::string type = m.body.value("type", "");
  if (type == "progress" && p.unit >= 0 && m.body.value("unit", -1) == p.unit) {
    p.fraction = m.body.value("fraction", 0.0);
  } else if (type == "result") {
    GenerationResult result = receive_result(m, c.ranks.timeout_seconds);
    if (m.body.value("unit", -1) != p.unit) fail(who(m.source), " sent the result of a unit it was not given");
    finish_unit(c, m.source, std::move(result));
  } else if (type == "error") {
    fail(who(m.source), " failed: ", m.body.value("message", "(no message)"));
  } else if (type == "died") {
    fail(who(m.source), " died: ", m.body.value("message", "(no message)"),
         ". The run is ended; a sweep's finished items are on disk (rerun the same command to resume it).");
  } else if (type == "bye") {
    p.stopped = true;
    fail(who(m.source), " stopped before the work was done");
  }
}

// Rank 0's own unit: progress, and its result once ready.
void check_local(Coordination& c) {
  Peer& p = g_peers[0];
  if (p.unit < 0) return;
  const int total = c.local_steps_per_device * c.units[p.unit].spec.value("devices", 1);
  p.fraction = total ? double(c.local_steps) / total : 0.0;
  if (c.local_future.wait_for(std::chrono::milliseconds(0)) != std::future_status::ready) return;
  c.local_future.get();
  if (!c.local_result) fail(who(0), " failed: ", c.local_error);
  finish_unit(c, 0, std::move(*c.local_result));
}

void coordinate_loop(Coordination& c) {
  while (c.done < static_cast<int>(c.units.size())) {
    hand_out_to_idle(c);
    bool someone_busy = false;
    for (const Peer& p : g_peers) someone_busy = someone_busy || p.unit >= 0;
    if (!someone_busy) fail("no rank may run the remaining units");  // only_rank names a rank that does not exist
    bool any = false;
    while (auto m = poll()) {
      handle(c, *m);
      any = true;
    }
    check_local(c);
    check_silence(c.ranks);
    send_alive_to_workers(c.ranks, &c.last_alive);
    status_line(c, false);
    if (!any) nap();
  }
}

}  // namespace

void coordinate(Ranks& ranks, const Compute& local, std::vector<WorkUnit> units, bool quiet,
                const std::function<void(UnitDone&)>& on_done) {
  if (g_peers.size() != static_cast<size_t>(ranks.size())) fail("coordinate() before load_everywhere()");
  for (Peer& p : g_peers) p.unit = -1, p.units_done = 0, p.items_done = 0, p.busy_seconds = 0, p.fraction = 0;
  Coordination c(ranks, local, std::move(units), quiet, on_done);
  c.handed_out.assign(c.units.size(), false);
  for (const WorkUnit& u : c.units) c.total_items += u.items;
  try {
    coordinate_loop(c);
  } catch (...) {
    c.local_cancel.cancel();
    if (c.local_future.valid()) c.local_future.wait();  // cancelled within one UNet call
    stop_workers(ranks);
    throw;
  }
  stop_workers(ranks);
}

json rank_report() {
  json ranks = json::array();
  for (size_t r = 0; r < g_peers.size(); ++r) {
    const Peer& p = g_peers[r];
    ranks.push_back({{"rank", r}, {"host", p.host}, {"load_seconds", p.load_seconds}, {"units", p.units_done},
                     {"items", p.items_done}, {"busy_seconds", p.busy_seconds},
                     {"seconds_per_item", p.items_done ? p.busy_seconds / p.items_done : 0.0}});
  }
  return ranks;
}

}  // namespace octodiff::cli::mpi
