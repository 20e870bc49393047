// Whole-directory outputs (a Hugging Face export, a prepared data set): written into a staging
// directory private to this process beside the output, then moved into place with one
// rename, so two writers of one output never share a file and a reader finds nothing, the
// old directory or a whole new one.
//
//   staging  <out>.<tag>-<host>-<pid>, created empty; one of the same pattern left by a process
//            of this host that is gone (a killed run) is removed first. Another host's, or a
//            live process's, is left alone.
//   commit   renameat2(2): RENAME_NOREPLACE when the output must be new, so of two writers
//            the second is refused; RENAME_EXCHANGE when it may replace an earlier output, so
//            the output is whole at every instant and the last writer wins.
#pragma once
#include <string>

namespace strata {

// Creates and returns the staging directory of `out`. Throws one line naming `what` (the flag)
// for an empty path or one that cannot be created.
std::string make_staging_dir(const std::string& out, const std::string& tag, const std::string& what);

// Moves `staged` to `out` in one step; with `replace` an existing `out` is exchanged with it
// and the old one removed. Throws naming `what` and `out` when `out` appeared meanwhile and
// may not be replaced (another writer got there first), or the rename fails; `staged` is
// removed then.
void commit_staging_dir(const std::string& staged, const std::string& out, bool replace,
                        const std::string& what);

}  // namespace strata
