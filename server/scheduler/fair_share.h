// FairShare: how much of the box each owner (a token's name; the unix
// socket's user is one owner) has used lately, for the dispatch order.
//
// Slurm's model: an owner's usage is the resource-seconds its tasks held (a
// CPU task one slot, a GPU task its GPUs), every second of it decaying by
// half over `half_life`, the running tasks' included as they accrue. Among
// queued tasks of the same priority, the owner with the least usage per
// unit of weight goes first; so an owner with waiting work gets a share of
// the slots and GPUs proportional to its weight, and one user's long search
// does not hold every slot while a colleague's work waits behind it. With
// one owner (or the fifo policy) the order is plain first come, first
// served. Usage lives in memory: a restart starts everyone even.
//
// Integrated exactly: between two changes of its running units R, an
// owner's usage U becomes U·d + R·(h / ln 2)·(1 − d), with d = 2^(−Δt / h).
//
// Thread-safety: not thread-safe; the Scheduler guards it with its mutex.
#ifndef TRAIND_SERVER_SCHEDULER_FAIR_SHARE_H_
#define TRAIND_SERVER_SCHEDULER_FAIR_SHARE_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace traind::server {

struct FairShareOptions {
  // false: the fifo policy (priority, then submit order, whoever submits).
  bool enabled = true;
  // Owners' weights (1 for an owner not listed); > 0.
  std::map<std::string, double> weights;
  absl::Duration half_life = absl::Hours(1);
  // What one owner's tasks may hold at once (0: no limit): running tasks,
  // and GPUs.
  int max_tasks_per_owner = 0;
  int max_gpus_per_owner = 0;
};

// Parses scheduling.weights entries ("team-a=2"): the owner and a weight > 0.
// Errors name the entry.
absl::StatusOr<std::map<std::string, double>> ParseWeights(const std::vector<std::string>& entries);

class FairShare final {
 public:
  explicit FairShare(FairShareOptions options) : options_(std::move(options)) {}

  bool enabled() const { return options_.enabled; }
  // Whether a task of `owner` that would hold `gpus` GPUs must wait for the
  // owner's limits (FairShareOptions::max_*_per_owner).
  bool AtOwnerLimit(const std::string& owner, int gpus) const;
  double Weight(const std::string& owner) const;

  // A task of `owner` started, or ended, holding `units` (slots or GPUs),
  // `gpus` of them GPUs.
  void Started(const std::string& owner, double units, absl::Time now, int gpus = 0);
  void Ended(const std::string& owner, double units, absl::Time now, int gpus = 0);

  // The owner's decayed usage at `now`, in resource-seconds.
  double Usage(const std::string& owner, absl::Time now) const;
  // Units the owner's tasks hold now; its running tasks; their GPUs.
  double Running(const std::string& owner) const;
  int Tasks(const std::string& owner) const;
  int Gpus(const std::string& owner) const;
  // Changes with every Started and Ended.
  uint64_t version() const { return version_; }
  // The dispatch key: usage per unit of weight (lower goes first).
  double Key(const std::string& owner, absl::Time now) const {
    return Usage(owner, now) / Weight(owner);
  }

 private:
  struct Account {
    double usage = 0;    // at `at`
    double running = 0;  // units held since `at`
    int tasks = 0;       // running now
    int gpus = 0;        // held now
    absl::Time at = absl::InfinitePast();
  };
  double UsageAt(const Account& a, absl::Time now) const;
  void Advance(Account& a, absl::Time now) const;

  const FairShareOptions options_;
  std::map<std::string, Account> accounts_;
  uint64_t version_ = 0;
};

}  // namespace traind::server

#endif  // TRAIND_SERVER_SCHEDULER_FAIR_SHARE_H_
