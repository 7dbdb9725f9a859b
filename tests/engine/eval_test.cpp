// tests/engine/eval_test.cpp: the end-of-epoch evaluation against a direct
// computation. The test split (20 images) is no multiple of the batch (8):
// its last batch holds 4 images and 4 rows of zero padding, which must count
// for nothing. The direct computation loads the run's final checkpoint (saved
// right after the last evaluation) into a model of the same batch, feeds the
// test images in order, and takes the loss and top-1 hits of the valid rows
// from the logits here, in double. Inference-mode rows are independent of
// one another, so each valid row's logits are the evaluation's own.
#include "catch2_compat.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/data/dataset.h"
#include "engine/model/resnet.h"
#include "engine/trainer.h"
#include "test_util.h"
#include "train_test_util.h"

using namespace xrun;

TEST_CASE("trainer: evaluation over a partial last batch counts only its real rows",
          "[trainer][eval]") {
  xrun_test::ScratchDir dir;
  RunConfig c = xrun_test::tiny_run(dir.file("eval.safetensors"), 0, 8, 32);
  c.train.steps = 0;
  c.train.epochs = 1;  // 4 steps, then the evaluation
  c.train.eval = true;
  c.data.test_samples = 20;  // batches of 8, 8 and 4
  c.train.optimizer.lr = 0.005;
  xrun_test::RunWatch watch;
  const TrainResult r = train(c, watch);
  REQUIRE(watch.steps.size() == 4);
  REQUIRE(std::isfinite(r.summary.test_loss));

  auto test_set = data::open_dataset(c.data, data::Split::test, c.train.seed);
  REQUIRE(test_set->size() == 20);
  cpu::CpuBackend be(c.train.threads);
  ModelSpec spec;
  spec.arch = c.model.arch;
  spec.num_classes = c.model.num_classes;
  spec.batch = c.train.batch_size;
  spec.image_size = c.data.image_size;
  ResNet model(be, spec);
  auto loss = be.softmax_cross_entropy(model.logits(), model.dlogits());
  be.allocate();
  load_weights(c.train.checkpoint, model, be);

  const int batch = c.train.batch_size;
  const size_t sample = static_cast<size_t>(test_set->channels()) * test_set->height() *
                        test_set->width();
  double loss_sum = 0;
  int64_t correct = 0, rows = 0;
  std::vector<float> logits(static_cast<size_t>(batch * c.model.num_classes));
  for (int64_t first = 0; first < test_set->size(); first += batch) {
    const int count = static_cast<int>(std::min<int64_t>(batch, test_set->size() - first));
    std::vector<uint8_t> images(sample * batch, 0);
    std::vector<int32_t> labels(batch, 0);
    for (int i = 0; i < count; ++i) test_set->get(first + i, &images[sample * i], &labels[i]);
    be.load_batch(images.data(), labels.data(), count, c.data.mean, c.data.std, nullptr);
    model.forward(false);
    be.read(model.logits(), logits);
    for (int i = 0; i < count; ++i) {
      const float* row = &logits[static_cast<size_t>(i * c.model.num_classes)];
      const float* top = std::max_element(row, row + c.model.num_classes);
      double mx = *top, s = 0;
      for (int j = 0; j < c.model.num_classes; ++j) s += std::exp(row[j] - mx);
      loss_sum += mx + std::log(s) - row[labels[i]];
      correct += (top - row) == labels[i];
      ++rows;
    }
  }
  REQUIRE(rows == 20);
  const double want_loss = loss_sum / 20.0, want_accuracy = static_cast<double>(correct) / 20.0;
  INFO("evaluation: loss " << r.summary.test_loss << ", accuracy " << r.summary.test_accuracy
                           << "; direct: loss " << want_loss << ", accuracy " << want_accuracy);
  // Both sum the same float logits in double, in a different order.
  CHECK(r.summary.test_loss == Approx(want_loss).epsilon(1e-9));
  CHECK(r.summary.test_accuracy == want_accuracy);
}
