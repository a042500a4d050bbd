// A scenario from YAML for the policy tests: a parse error fails the test
// and gives an empty scenario.
#ifndef COSCHED_TESTS_TESTING_PARSE_SCENARIO_H_
#define COSCHED_TESTS_TESTING_PARSE_SCENARIO_H_

#include <string>

#include "policy/scenario.h"
#include "tests/testing/status_matchers.h"

namespace cosched::testing {

inline policy::Scenario ParseScenario(const std::string& yaml) {
  auto s = policy::ParseScenarioYaml(yaml);
  EXPECT_OK(s);
  return s.ok() ? *s : policy::Scenario();
}

}  // namespace cosched::testing

#endif  // COSCHED_TESTS_TESTING_PARSE_SCENARIO_H_
