// Watch events as etcd sends them, for the tests of what EtcdStore makes of
// them (its watch and its cache).
#ifndef COSCHED_TESTS_STORE_WATCH_EVENTS_H_
#define COSCHED_TESTS_STORE_WATCH_EVENTS_H_

#include <cstdint>
#include <string>

#include "etcd/client.h"

namespace cosched::store {

inline mvccpb::Event PutEvent(const std::string& key, const std::string& value,
                              int64_t revision) {
  mvccpb::Event event;
  event.set_type(mvccpb::Event::PUT);
  event.mutable_kv()->set_key(key);
  event.mutable_kv()->set_value(value);
  event.mutable_kv()->set_mod_revision(revision);
  return event;
}

// A delete's kv carries the key and the deleting revision only.
inline mvccpb::Event DeleteEvent(const std::string& key, int64_t revision) {
  mvccpb::Event event;
  event.set_type(mvccpb::Event::DELETE);
  event.mutable_kv()->set_key(key);
  event.mutable_kv()->set_mod_revision(revision);
  return event;
}

}  // namespace cosched::store

#endif  // COSCHED_TESTS_STORE_WATCH_EVENTS_H_
