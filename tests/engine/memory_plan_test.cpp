// tests/engine/memory_plan_test.cpp: the memory plan both backends keep
// (engine/memory_plan.h): aligned placement per region, mirrors of the
// parameter region, the plan as stored, the part that grows with the batch,
// the refusal of a plan that does not fit, and binding after allocation.
#include "catch2_compat.h"

#include "engine/memory_plan.h"

using namespace xrun;

TEST_CASE("memory plan: tensors at aligned offsets, one region per role", "[memory_plan]") {
  MemoryPlan plan(64);
  CHECK(plan.place(TensorRole::parameter, 10) == 0);
  CHECK(plan.place(TensorRole::parameter, 64) == 64);
  CHECK(plan.place(TensorRole::parameter, 1) == 128);
  CHECK(plan.place(TensorRole::activation, 100) == 0);  // regions are independent
  CHECK(plan.region_bytes(TensorRole::parameter) == 192);
  CHECK(plan.region_bytes(TensorRole::activation) == 128);
  CHECK(plan.region_bytes(TensorRole::io) == 0);
}

TEST_CASE("memory plan: the records as stored and the part that grows with the batch",
          "[memory_plan]") {
  MemoryPlan plan(256);
  plan.place(TensorRole::parameter, 1000);           // 1024
  plan.place(TensorRole::activation, 4096);          // 4096
  plan.place(TensorRole::activation_grad, 4096);     // 4096
  plan.place(TensorRole::io, 300);                   // 512
  plan.add_mirror("exp_avg");
  plan.add_mirror("exp_avg_sq");
  const auto records = plan.records({{"scratchpad", 77}});
  std::vector<std::pair<std::string, int64_t>> got;
  for (const MemoryRecord& r : records) got.emplace_back(r.region, r.bytes);
  CHECK(got == std::vector<std::pair<std::string, int64_t>>{
                   {"parameters", 1024}, {"activations", 4096}, {"activation_gradients", 4096},
                   {"input", 512}, {"optimizer.exp_avg", 1024}, {"optimizer.exp_avg_sq", 1024},
                   {"scratchpad", 77}});
  CHECK(plan.per_batch_bytes() == 4096 + 4096 + 512);
}

TEST_CASE("memory plan: a plan that does not fit names the largest batch that does",
          "[memory_plan]") {
  MemoryPlan plan(64);
  plan.place(TensorRole::parameter, 1 << 20);          // fixed: 1 MiB
  plan.place(TensorRole::activation, 64 * (1 << 20));  // 1 MiB per sample at batch 64
  CHECK_NOTHROW(plan.check_fits({}, 64, 66 << 20, "here"));
  // 33 MiB: 32 MiB for activations, so 32 samples; rounded down to a multiple of 8.
  CHECK_THROWS_WITH(plan.check_fits({}, 64, 33 << 20, "on cuda:0"),
                    Catch::Contains("batch 64 does not fit on cuda:0") &&
                        Catch::Contains("the largest batch that fits is about 32"));
  CHECK_THROWS_WITH(plan.check_fits({}, 64, 1 << 19, "in memory"), Catch::Contains("no batch fits"));
}

TEST_CASE("memory plan: bases after allocation, nothing placed after", "[memory_plan]") {
  MemoryPlan plan(64);
  plan.place(TensorRole::gradient, 8);
  plan.add_mirror("momentum_buffer");
  CHECK_THROWS_AS(plan.mirror_base("momentum_buffer"), std::logic_error);  // not allocated yet
  char grads[64], mirror[64];
  plan.set_base(TensorRole::gradient, grads);
  plan.set_mirror_base("momentum_buffer", mirror);
  plan.mark_bound();
  CHECK(plan.base(TensorRole::gradient) == grads);
  CHECK(plan.mirror_base("momentum_buffer") == mirror);
  CHECK_THROWS_AS(plan.mirror_base("exp_avg"), std::logic_error);  // never declared
  CHECK_THROWS_AS(plan.place(TensorRole::activation, 4), std::logic_error);
  CHECK_THROWS_AS(plan.add_mirror("grad_accum"), std::logic_error);
}
