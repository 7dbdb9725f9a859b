// tests/store/step_writer_test.cpp: the background step writer (every row
// exactly once across batches, flush semantics, errors rethrown) and two
// processes writing one store file at the same time.
#include "catch2_compat.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include "store/store.h"
#include "store_test_util.h"

using namespace xrun;
using namespace xrun::store;
using store_test::make_run;
using store_test::sql_int;
using store_test::TempDir;

namespace {

StepRecord step_no(int64_t i) {
  StepRecord s;
  s.step = i;
  s.epoch = static_cast<int>(i / 100);
  s.kind = i < 5 ? StepKind::warmup : StepKind::measured;
  s.step_ms = 100.0 + static_cast<double>(i % 13);
  s.data_wait_ms = 0.5;
  s.loss = 2.0 / static_cast<double>(i + 1);
  s.lr = 1e-3;
  s.loss_scale = 65536.0;
  s.images = 512;
  return s;
}

}  // namespace

TEST_CASE("StepWriter writes every pushed row exactly once across batches", "[store][writer]") {
  TempDir tmp;
  const std::string path = tmp.file("w.db");
  Store store(path);
  const std::string uuid = store.begin_run(make_run());
  const std::string other = store.begin_run(make_run("fp32"));

  for (size_t batch : {size_t(5), size_t(7), size_t(64), size_t(1000)}) {
    INFO("batch size " << batch);
    const std::string run = batch == 7 ? other : uuid;
    store_test::sql_exec(path, "DELETE FROM steps");
    {
      StepWriter writer(path, run, batch);
      for (int64_t i = 0; i < 500; ++i) writer.push(step_no(i));
      writer.flush();
      CHECK(sql_int(path, "SELECT count(*) FROM steps") == 500);
      for (int64_t i = 500; i < 1234; ++i) writer.push(step_no(i));
      // The destructor flushes the rest.
    }
    CHECK(sql_int(path, "SELECT count(*) FROM steps") == 1234);
    CHECK(sql_int(path, "SELECT count(DISTINCT step) FROM steps") == 1234);
    CHECK(sql_int(path, "SELECT min(step) FROM steps") == 0);
    CHECK(sql_int(path, "SELECT max(step) FROM steps") == 1233);
    auto steps = store.get_steps(run);
    REQUIRE(steps.size() == 1234);
    for (size_t i = 0; i < steps.size(); ++i) {
      if (steps[i].step != static_cast<int64_t>(i) || steps[i].step_ms != step_no(i).step_ms ||
          steps[i].loss != step_no(i).loss) {
        FAIL("step " << i << " differs");
      }
    }
  }
}

TEST_CASE("StepWriter flush with nothing pushed returns, pushes from another thread land",
          "[store][writer]") {
  TempDir tmp;
  const std::string path = tmp.file("w.db");
  Store store(path);
  const std::string uuid = store.begin_run(make_run());
  StepWriter writer(path, uuid, 16);
  writer.flush();
  std::thread producer([&] {
    for (int64_t i = 0; i < 300; ++i) writer.push(step_no(i));
  });
  producer.join();
  writer.flush();
  CHECK(store.get_steps(uuid).size() == 300);
  // A partial batch is written even without a flush (after the writer's
  // half-second wait).
  writer.push(step_no(300));
  for (int i = 0; i < 50 && store.get_steps(uuid).size() < 301; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(store.get_steps(uuid).size() == 301);
}

TEST_CASE("StepWriter rethrows a write error from flush and keeps going", "[store][writer]") {
  TempDir tmp;
  const std::string path = tmp.file("w.db");
  Store store(path);
  const std::string uuid = store.begin_run(make_run());
  REQUIRE_THROWS_WITH(StepWriter(path, "not-a-run"), Catch::Contains("no run with UUID"));

  StepWriter writer(path, uuid, 4);
  for (int64_t i = 0; i < 4; ++i) writer.push(step_no(i));
  writer.flush();
  writer.push(step_no(2));  // step 2 again: the batch fails
  REQUIRE_THROWS_WITH(writer.flush(), Catch::Contains(path) && Catch::Contains("UNIQUE"));
  writer.flush();  // the error was reported once
  for (int64_t i = 4; i < 10; ++i) writer.push(step_no(i));
  writer.flush();
  CHECK(store.get_steps(uuid).size() == 10);
}

TEST_CASE("two processes write one store file at once without losing a row",
          "[store][writer][processes]") {
  TempDir tmp;
  const std::string path = tmp.file("shared.db");
  { Store create(path); }  // no connection open across fork()
  constexpr int kSteps = 2000;
  constexpr int kProcs = 2;
  std::vector<pid_t> kids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int rc = 0;
      try {
        Store store(path);
        const std::string uuid = store.begin_run(make_run(p == 0 ? "fp16" : "fp32"));
        {
          StepWriter writer(path, uuid, 32);
          for (int64_t i = 0; i < kSteps; ++i) {
            writer.push(step_no(i));
            if (i % 250 == 0) {  // other writes interleaved with the steps
              store.write_epoch(uuid, {static_cast<int>(i / 250), 1.0, 1.0, 0.5, 1.0, 0.1, 1});
            }
          }
          writer.flush();
        }
        store.finish_run(uuid, RunStatus::complete, RunSummary{});
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", p, e.what());
        rc = 1;
      }
      _exit(rc);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  Store store(path);
  auto runs = store.list_runs();
  REQUIRE(runs.size() == kProcs);
  for (const RunInfo& r : runs) {
    INFO("run " << r.uuid);
    CHECK(r.status == "complete");
    CHECK(store.get_run(r.uuid)->step_count == kSteps);
    CHECK(store.get_run(r.uuid)->epochs.size() == kSteps / 250);
  }
  CHECK(sql_int(path, "SELECT count(*) FROM steps") == kProcs * kSteps);
  CHECK(sql_int(path, "SELECT count(DISTINCT run || '/' || step) FROM steps") == kProcs * kSteps);
}
