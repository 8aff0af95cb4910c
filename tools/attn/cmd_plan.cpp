// `attn plan`: the backend chosen for every layer group and why every other candidate was not.
#include <iostream>

#include "commands.hpp"
#include "plan.hpp"

namespace attn_cli {

int cmd_plan(const PlanOptions& options) {
  const attn::ModelSpec model = load_model(options.model);
  const Plan plan =
      build_plan(model, select_options(options.model), parallelism(options.model.tensor_parallel, options.pipeline_parallel, model));
  if (options.json) std::cout << plan_json(plan).dump(2) << "\n";
  else std::cout << plan_text(plan);
  if (!plan.all_served()) {
    for (const auto& g : plan.groups) {
      if (!g.error.empty()) std::cerr << "error: " << g.error << " (see the candidates' reasons above)\n";
    }
    return 1;
  }
  return 0;
}

}  // namespace attn_cli
