// Which build of cosched this is: its version (scripts/version.sh, or the
// package's own) and the commit it was built from ("unknown" when neither
// says). `--version` of every program, the cosched_build_info metric and
// the agent's Register print them.
#ifndef COSCHED_COMMON_VERSION_H_
#define COSCHED_COMMON_VERSION_H_

namespace cosched {

const char* CoschedVersion();
const char* CoschedCommit();

}  // namespace cosched

#endif  // COSCHED_COMMON_VERSION_H_
