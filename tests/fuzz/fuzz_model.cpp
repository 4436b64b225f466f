// Fuzz target: a model file, as `--model FILE` reads it, once as our YAML
// (model.yaml) and once as a HuggingFace config.json, then the figures every
// report prints of it (parameters, layers, FLOPs).
#include <cstddef>
#include <cstdint>

#include "dtsim/models/models.hpp"
#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto& dir = dtsim::fuzz::scratch();
  for (const char* name : {"model.yaml", "config.json"}) {
    const std::string path = dir.write(name, data, size);
    dtsim::fuzz::expect_typed_errors([&] {
      const dtsim::sim::ModelPtr m = dtsim::models::load_model(path);
      const dtsim::sim::WorkloadShape shape;
      (void)m->parameters();
      (void)m->layers(shape);
      (void)m->model_flops(shape);
    });
  }
  return 0;
}
