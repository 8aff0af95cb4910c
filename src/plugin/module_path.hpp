#pragma once
// Where shared backend modules (lib<module>.so) are looked up, shared by the registry and
// detect_cuda: $ATTN_MODULE_PATH (':'-separated), then the directory holding libattn.
#include <string>
#include <vector>

namespace attn::detail {

/// The existing files named lib<module>.so in the module directories, in search order.
std::vector<std::string> module_candidates(const std::string& module);

}  // namespace attn::detail
