#include "core/wait_policy.h"

#include <unistd.h>

#include <cstring>

#include "core/env.h"

namespace strata {

// The names as constants: reexec_with_wait_policy runs before static constructors, when the
// EnvVar objects below (there for `strata --help-env`; libgomp is their reader) are not built.
static constexpr const char* kWaitPolicyName = "OMP_WAIT_POLICY";
static constexpr const char* kSpinCountName = "GOMP_SPINCOUNT";

static const EnvVar kWaitPolicy(kWaitPolicyName, "",
                                "OpenMP wait policy, ACTIVE or PASSIVE; when set (or "
                                "GOMP_SPINCOUNT is), strata leaves libgomp's spinning as chosen");
static const EnvVar kSpinCount(kSpinCountName, kDefaultSpinCount,
                               "libgomp: iterations a waiting OpenMP thread spins before it "
                               "sleeps; strata sets it unless it or OMP_WAIT_POLICY is set "
                               "(libgomp's own default is 300000; OMP_WAIT_POLICY=ACTIVE spins "
                               "for minutes)");

static bool names(const char* entry, const char* name) {
  const size_t n = std::strlen(name);
  return std::strncmp(entry, name, n) == 0 && entry[n] == '=';
}

std::vector<std::string> env_with_wait_policy(char* const* envp) {
  std::vector<std::string> env;
  for (char* const* e = envp; e && *e; ++e) {
    if (names(*e, kWaitPolicyName) || names(*e, kSpinCountName)) return {};
    env.emplace_back(*e);
  }
  env.push_back(std::string(kSpinCountName) + "=" + kDefaultSpinCount);
  return env;
}

void reexec_with_wait_policy(char** argv, char** envp) {
  std::vector<std::string> env = env_with_wait_policy(envp);
  if (env.empty()) return;
  std::vector<char*> ptrs;
  for (std::string& s : env) ptrs.push_back(s.data());
  ptrs.push_back(nullptr);
  execve("/proc/self/exe", argv, ptrs.data());
  // No /proc, or the binary is gone: run on with libgomp's defaults rather than not at all.
}

}  // namespace strata
