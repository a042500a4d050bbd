// What nearly every test parses, through its own includes or the project's
// headers: precompiled once and reused by every cosched_add_test binary
// (tests/CMakeLists.txt). Only libraries from outside the project: a change
// to the project's code never rebuilds it.
#ifndef COSCHED_TESTS_TEST_PCH_H_
#define COSCHED_TESTS_TEST_PCH_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "google/protobuf/message.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

#endif  // COSCHED_TESTS_TEST_PCH_H_
