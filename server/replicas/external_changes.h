// What other csd replicas committed (the store's external observer, on its
// completion thread, in revision order with this csd's own writes) reaches
// this csd's in-memory views as its own writes do: the placement view, the
// staged rollout, the Reports it remembers and the policy engine's notes.
#ifndef COSCHED_SERVER_REPLICAS_EXTERNAL_CHANGES_H_
#define COSCHED_SERVER_REPLICAS_EXTERNAL_CHANGES_H_

#include "server/state/commit_effects.h"
#include "server/state/rollout_view.h"
#include "store/store.h"

namespace cosched::server {

// Called on the store's completion thread only.
class ExternalChanges {
 public:
  ExternalChanges(store::Store& store, const CommitEffects& effects, RolloutView& rollout)
      : store_(store), effects_(effects), rollout_(rollout) {}

  // The records are read from the store as they are now. When they cannot
  // be read (etcd away, a value that does not parse), the next change reads
  // the whole view again.
  void Apply(const store::ExternalChange& change);

 private:
  // Everything may have changed: every view is read again.
  void Reload(const store::ExternalChange& change);

  store::Store& store_;
  const CommitEffects& effects_;
  RolloutView& rollout_;
  // An external change could not be applied: the next one reloads the view.
  bool reload_owed_ = false;
};

}  // namespace cosched::server

#endif  // COSCHED_SERVER_REPLICAS_EXTERNAL_CHANGES_H_
