// Renders a Decision as text (its JSON is in json.cpp); the same object feeds errors, the CLI,
// logs and Python.
#include "attn/selector.hpp"

namespace attn {

std::string Decision::to_text() const {
  std::string s = backend.empty() ? "no valid backend" : "backend: " + backend;
  if (!variant.empty()) s += " [" + variant + "]";
  if (!forced_by.empty()) s += " (forced by " + forced_by + ")";
  if (!slow_path.empty()) s += "\nslow reference path: " + slow_path;
  s += "\nplatform: " + platform;
  if (config) {  // a mixer's decision has no attention config and no block size (its notes name the type)
    s += "\nlayer: " + config->to_string();
    s += "\nblock_size: " + std::to_string(block_size) +
         (block_size_from_user ? " (user)" : tuned ? " (measured fastest)" : " (backend's preferred)");
  }
  s += "\ncandidates:";
  for (auto& c : candidates) {
    s += "\n  " + std::string(c.backend == backend ? "* " : "  ") + c.backend + " (priority " + std::to_string(c.priority) +
         "): " + (c.valid ? "valid" : "invalid");
    for (auto& r : c.reasons) s += "\n      - " + r.to_string();
  }
  for (auto& n : notes) s += "\nnote: " + n;
  return s;
}

}  // namespace attn
