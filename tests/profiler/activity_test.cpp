// tests/profiler/activity_test.cpp: what xrun makes of CUPTI's activity
// records, without a GPU: range paths and their attribution, demangling, the
// ActivityLog's per-kernel, per-copy, per-phase and per-step figures, the
// GPU findings, the overhead figure and the traced-step plan, and (where the
// CUDA toolkit's CUPTI headers are built in) the decoding of kernel, copy
// (the struct versions of the CUPTI built against: profiler/cupti_compat.h),
// memset, API and ExternalCorrelation records built in memory.
#include "catch2_compat.h"

#include <cmath>
#include <cstring>

#include "profiler/activity.h"
#include "profiler/activity_capture.h"
#include "skip.h"
#ifdef XRUN_HAVE_CUPTI
#include "profiler/cupti_api.h"
#include "profiler/cupti_records.h"
#endif

using namespace xrun;
using namespace xrun::profiler;

namespace {

// The ranges of one training step as the trainer pushes them, with the ids
// CUPTI would have stamped on launches made inside them.
struct StepRanges {
  RangePaths paths;
  uint64_t forward_conv = 0, backward = 0, optimizer = 0;
  StepRanges() {
    paths.push("run");
    paths.push("epoch");
    paths.push("step");
    paths.push("forward");
    forward_conv = paths.push("layer1.0.conv1");
    paths.pop();
    paths.pop();
    backward = paths.push("backward");
    paths.pop();
    optimizer = paths.push("optimizer");
    paths.pop();
  }
};

const KernelRecord* find_kernel(const std::vector<KernelRecord>& ks, const std::string& name,
                                const std::string& phase) {
  for (const auto& k : ks)
    if (k.name == name && k.phase == phase) return &k;
  return nullptr;
}

}  // namespace

TEST_CASE("activity: range paths name the phase and the layer", "[profiler][activity]") {
  StepRanges r;
  CHECK(r.paths.path(r.forward_conv) == "run/epoch/step/forward/layer1.0.conv1");
  const Attribution a = attribute(r.paths.path(r.forward_conv));
  CHECK(a.phase == "forward");
  CHECK(a.layer == "layer1.0.conv1");
  CHECK(attribute(r.paths.path(r.backward)).phase == "backward");
  CHECK(attribute(r.paths.path(r.backward)).layer.empty());
  // The same path pushed again gets the same id; a popped stack is back at its parent.
  RangePaths p;
  const uint64_t a1 = p.push("step");
  const uint64_t b1 = p.push("forward");
  CHECK(p.pop() == a1);
  CHECK(p.push("forward") == b1);
  CHECK(p.pop() == a1);
  CHECK(p.pop() == 0);
  CHECK(p.pop() == 0);  // popping past the top (a range opened before capture) is harmless
  CHECK(attribute("").phase.empty());
  CHECK(attribute("run/epoch").phase.empty());
  CHECK(attribute("run/eval/conv1").phase == "eval");
  CHECK(attribute("run/eval/conv1").layer == "conv1");
}

TEST_CASE("activity: kernel names are demangled", "[profiler][activity]") {
  CHECK(demangle("_Z10add_kernelPfPKfi") == "add_kernel(float*, float const*, int)");
  CHECK(demangle("sm80_xmma_fprop_implicit_gemm") == "sm80_xmma_fprop_implicit_gemm");
  CHECK(demangle("_Znot a symbol") == "_Znot a symbol");
}

TEST_CASE("activity: busy time is the union of intervals inside the window", "[profiler][activity]") {
  CHECK(union_length({}, 0, 100) == 0);
  CHECK(union_length({{10, 20}, {15, 30}, {40, 50}}, 0, 100) == 30);
  CHECK(union_length({{10, 20}, {12, 18}}, 0, 100) == 10);  // contained
  CHECK(union_length({{0, 50}, {90, 200}}, 20, 100) == 40);  // clipped at both ends
  CHECK(union_length({{200, 300}}, 0, 100) == 0);
}

TEST_CASE("activity: one step's records become kernel, copy, phase and step figures",
          "[profiler][activity]") {
  StepRanges r;
  ActivityLog log(&r.paths);
  log.enter_range(r.forward_conv);
  log.enter_range(r.backward);  // no layer: counts nothing
  // Correlation ids 1..7; the external ids say which range launched each.
  log.add(ExternalCorrelation{1, r.forward_conv});
  log.add(ExternalCorrelation{2, r.forward_conv});
  log.add(ExternalCorrelation{3, r.backward});
  log.add(ExternalCorrelation{5, r.optimizer});
  log.add(ExternalCorrelation{6, r.optimizer});
  // Times in ns from a step window [1'000'000, 2'000'000].
  log.add(KernelActivity{"_Z4convPf", 1'100'000, 1'200'000, 7, 1});   // 0.1 ms
  log.add(KernelActivity{"_Z4convPf", 1'200'000, 1'500'000, 7, 2});   // 0.3 ms
  log.add(KernelActivity{"bn_bwd", 1'500'000, 1'600'000, 7, 3});      // 0.1 ms
  log.add(KernelActivity{"stray", 1'650'000, 1'700'000, 7, 4});       // no external id
  log.add(CopyActivity{CopyDirection::h2d, HostMemory::pinned, 4096, 1'000'000, 1'100'000, 9, 5});
  log.add(CopyActivity{CopyDirection::d2h, HostMemory::pageable, 8, 1'800'000, 1'850'000, 7, 6});
  log.add(CopyActivity{CopyDirection::memset, HostMemory::device, 64, 1'400'000, 1'450'000, 7, 7});
  log.close_step(1'000'000, 2'000'000);

  const auto kernels = log.kernels();
  REQUIRE(kernels.size() == 3);
  CHECK(kernels[0].name == "conv(float*)");  // most time first
  const KernelRecord* conv = find_kernel(kernels, "conv(float*)", "forward");
  REQUIRE(conv);
  CHECK(conv->calls == 2);
  CHECK(conv->total_ms == Approx(0.4));
  CHECK(conv->min_ms == Approx(0.1));
  CHECK(conv->max_ms == Approx(0.3));
  REQUIRE(find_kernel(kernels, "bn_bwd", "backward"));
  REQUIRE(find_kernel(kernels, "stray", "other"));
  CHECK(log.unattributed() == 2);  // the stray kernel and the memset

  const auto copies = log.copies();
  REQUIRE(copies.size() == 3);
  CHECK(copies[0].direction == "h2d");
  CHECK(copies[0].memory == "pinned");
  CHECK(copies[0].count == 1);
  CHECK(copies[0].bytes == 4096);
  CHECK(copies[0].total_ms == Approx(0.1));
  CHECK(copies[1].direction == "d2h");
  CHECK(copies[1].memory == "pageable");
  CHECK(copies[2].direction == "memset");

  const auto phase_ms = log.phase_gpu_ms();
  CHECK(phase_ms.at("forward") == Approx(0.4));
  CHECK(phase_ms.at("backward") == Approx(0.1));
  CHECK(phase_ms.at("optimizer") == Approx(0.15));  // the two copies launched there
  // The layer's range was entered once: one call of 0.4 ms.
  REQUIRE(log.layers().size() == 1);
  CHECK(log.layers()[0].name == "layer1.0.conv1");
  CHECK(log.layers()[0].phase == "forward");
  CHECK(log.layers()[0].calls == 1);
  CHECK(log.layers()[0].total_ms == Approx(0.4));

  REQUIRE(log.steps() == 1);
  const StepActivity& s = log.step_activity()[0];
  CHECK(s.d2h_copies == 1);
  CHECK(s.step_ms == Approx(1.0));
  // Busy: [1.0, 1.6] ms from the copy and kernels (memset inside), [1.65, 1.7], [1.8, 1.85].
  CHECK(s.gpu_busy_ms == Approx(0.6 + 0.05 + 0.05));

  // A second step adds to the totals; records do not leak between steps.
  log.enter_range(r.forward_conv);
  log.add(ExternalCorrelation{11, r.forward_conv});
  log.add(KernelActivity{"_Z4convPf", 3'000'000, 3'500'000, 7, 11});
  log.close_step(3'000'000, 4'000'000);
  const auto kernels2 = log.kernels();  // kept: find_kernel points into it
  const KernelRecord* conv2 = find_kernel(kernels2, "conv(float*)", "forward");
  REQUIRE(conv2);
  CHECK(conv2->calls == 3);
  CHECK(conv2->max_ms == Approx(0.5));
  CHECK(log.step_activity()[1].d2h_copies == 0);
  CHECK(log.step_activity()[1].gpu_busy_ms == Approx(0.5));
}

TEST_CASE("activity: a layer's GPU time per call counts the times its range was entered",
          "[profiler][activity]") {
  // train.accumulate = 2: the layer's range is entered twice in a step, and
  // both micro-batches' kernels carry the same range path.
  StepRanges r;
  ActivityLog log(&r.paths);
  log.enter_range(r.forward_conv);
  log.enter_range(r.forward_conv);
  log.add(ExternalCorrelation{1, r.forward_conv});
  log.add(ExternalCorrelation{2, r.forward_conv});
  log.add(KernelActivity{"conv", 1'000'000, 1'150'000, 7, 1});  // 0.15 ms
  log.add(KernelActivity{"conv", 1'200'000, 1'450'000, 7, 2});  // 0.25 ms
  log.close_step(1'000'000, 2'000'000);
  std::vector<KernelRecord> layers = log.layers();
  REQUIRE(layers.size() == 1);
  CHECK(layers[0].calls == 2);
  CHECK(layers[0].total_ms == Approx(0.4));
  CHECK(layers[0].min_ms == Approx(0.2));  // the step's time per call
  CHECK(layers[0].max_ms == Approx(0.2));

  // The next step enters it once, at 0.5 ms; entries do not carry over.
  log.enter_range(r.forward_conv);
  log.add(ExternalCorrelation{3, r.forward_conv});
  log.add(KernelActivity{"conv", 3'000'000, 3'500'000, 7, 3});
  log.close_step(3'000'000, 4'000'000);
  layers = log.layers();
  REQUIRE(layers.size() == 1);
  CHECK(layers[0].calls == 3);
  CHECK(layers[0].total_ms == Approx(0.9));
  CHECK(layers[0].min_ms == Approx(0.2));
  CHECK(layers[0].max_ms == Approx(0.5));

  // Kernels of a layer whose entry was not seen add time, not calls.
  log.add(ExternalCorrelation{4, r.forward_conv});
  log.add(KernelActivity{"conv", 5'000'000, 5'100'000, 7, 4});
  log.close_step(5'000'000, 6'000'000);
  CHECK(log.layers()[0].calls == 3);
  CHECK(log.layers()[0].total_ms == Approx(1.0));
  CHECK(log.layers()[0].max_ms == Approx(0.5));
}

TEST_CASE("activity: a traced step becomes stream tracks, API calls and flow ids",
          "[profiler][activity][trace]") {
  StepRanges r;
  ActivityLog log(&r.paths);
  const uint32_t main_thread = 4242;
  log.add(ExternalCorrelation{1, r.forward_conv});
  log.add(ApiActivity{"cudaLaunchKernel", 1'050'000, 1'060'000, main_thread, 1});
  log.add(KernelActivity{"_Z4convPf", 1'100'000, 1'200'000, 7, 1});
  log.add(ApiActivity{"cudaStreamSynchronize", 1'300'000, 1'900'000, main_thread, 2});
  log.add(ApiActivity{"cudaMemcpyAsync", 1'310'000, 1'320'000, 99, 3});
  log.add(CopyActivity{CopyDirection::h2d, HostMemory::pinned, 4096, 1'400'000, 1'500'000, 9, 3});
  log.close_step(1'000'000, 2'000'000, /*keep_trace=*/true, /*origin=*/1'000'000, main_thread);
  std::vector<TraceEvent> events = log.take_trace();
  REQUIRE(events.size() == 5);
  int flows_host = 0, flows_gpu = 0;
  for (const TraceEvent& e : events) {
    if (e.name == "conv(float*)") {
      CHECK(e.track == "GPU stream 7");
      CHECK(e.start_ns == 100'000);
      CHECK(e.dur_ns == 100'000);
      CHECK(e.flow == 1);
    }
    if (e.name == "memcpy h2d (pinned)") CHECK(e.track == "GPU stream 9");
    if (e.name == "cudaLaunchKernel") CHECK(e.track == "host");
    if (e.name == "cudaMemcpyAsync") CHECK(e.track == "host thread 99");
    if (e.name == "cudaStreamSynchronize") CHECK(e.flow == 0);  // no device work of its own
    if (e.flow != 0) ++(e.track.rfind("GPU", 0) == 0 ? flows_gpu : flows_host);
  }
  CHECK(flows_host == 2);
  CHECK(flows_gpu == 2);
  CHECK(log.take_trace().empty());  // taken once
}

TEST_CASE("activity: depths nest ranges per track", "[profiler][activity][trace]") {
  std::vector<TraceEvent> events = {
      {"host", "step", 0, 1000, 3, 0, 0},
      {"host", "cudaLaunchKernel", 120, 10, -1, 0, 5},
      {"host", "forward", 100, 400, -1, 0, 0},
      {"GPU stream 7", "conv", 150, 100, -1, 0, 5},
      {"host", "backward", 500, 400, -1, 0, 0},
  };
  assign_depths(events);
  std::map<std::string, int> depth;
  for (const auto& e : events) depth[e.name] = e.depth;
  CHECK(depth["step"] == 0);
  CHECK(depth["forward"] == 1);
  CHECK(depth["cudaLaunchKernel"] == 2);
  CHECK(depth["backward"] == 1);
  CHECK(depth["conv"] == 0);  // its own track
  for (size_t i = 1; i < events.size(); ++i) CHECK(events[i - 1].start_ns <= events[i].start_ns);
}

TEST_CASE("activity: traced steps interleave with untraced ones, overhead from medians",
          "[profiler][activity]") {
  std::vector<int64_t> traced;
  for (int64_t i = 0; i < 9; ++i)
    if (step_is_traced(i, 3)) traced.push_back(i);
  CHECK(traced == std::vector<int64_t>{0, 1, 2, 3, 5, 7});
  CHECK(step_is_traced(0, 0));
  CHECK_FALSE(step_is_traced(1, 0));

  CHECK(tracing_overhead({11, 11, 12, 40}, {10, 10, 10}) == Approx(0.15));
  CHECK(std::isnan(tracing_overhead({11, 12}, {10, 10, 10})));  // too few to say
  CHECK(std::isnan(tracing_overhead({11, 12, 13}, {})));
}

TEST_CASE("activity: GPU findings for read-backs and idle time", "[profiler][activity][findings]") {
  RangePaths paths;
  auto step = [&](ActivityLog& log, int d2h, uint64_t busy_ns) {
    for (int i = 0; i < d2h; ++i)
      log.add(CopyActivity{CopyDirection::d2h, HostMemory::pageable, 4, 0, 1, 7, 0});
    log.add(KernelActivity{"k", 0, busy_ns, 7, 0});
    log.close_step(0, 1'000'000);
  };
  auto has = [](const std::vector<FindingRecord>& f, const std::string& check) {
    for (const auto& x : f)
      if (x.check == check) return true;
    return false;
  };
  ActivityLog healthy(&paths);
  for (int i = 0; i < 10; ++i) step(healthy, i == 9 ? 1 : 0, 950'000);
  CHECK(activity_findings(healthy, 10).empty());

  ActivityLog chatty(&paths);
  for (int i = 0; i < 10; ++i) step(chatty, 3, 950'000);
  const auto f1 = activity_findings(chatty, 10);
  CHECK(has(f1, "d2h_copies"));
  CHECK_FALSE(has(f1, "gpu_idle"));

  ActivityLog starved(&paths);
  for (int i = 0; i < 10; ++i) step(starved, 0, 500'000);
  const auto f2 = activity_findings(starved, 10);
  REQUIRE(has(f2, "gpu_idle"));
  for (const auto& f : f2)
    if (f.check == "gpu_idle") CHECK(f.value == Approx(0.5));
}

#ifdef XRUN_HAVE_CUPTI
TEST_CASE("CUPTI records built in memory decode into the log", "[profiler][activity][cupti]") {
  StepRanges r;
  ActivityLog log(&r.paths);
  auto namer = [](bool runtime, uint32_t cbid) {
    return std::string(runtime ? "rt" : "drv") + std::to_string(cbid);
  };

  CUpti_ActivityExternalCorrelation ext{};
  ext.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
  ext.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
  ext.externalId = r.forward_conv;
  ext.correlationId = 21;
  CHECK(decode_activity(reinterpret_cast<CUpti_Activity*>(&ext), log, namer));
  CUpti_ActivityExternalCorrelation other = ext;
  other.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_OPENACC;  // not ours
  CHECK_FALSE(decode_activity(reinterpret_cast<CUpti_Activity*>(&other), log, namer));

  std::string name = "_Z4convPf";
  CuptiKernelRecord k{};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.start = 1'100'000;
  k.end = 1'300'000;
  k.streamId = 13;
  k.correlationId = 21;
  k.name = name.c_str();
  CHECK(decode_activity(reinterpret_cast<CUpti_Activity*>(&k), log, namer));
  name = "overwritten";  // CUPTI's buffer is reused: the log kept its own copy

  CuptiMemcpyRecord m{};
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  m.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
  m.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  m.bytes = 1 << 20;
  m.start = 1'000'000;
  m.end = 1'100'000;
  m.streamId = 14;
  m.correlationId = 22;
  CHECK(decode_activity(reinterpret_cast<CUpti_Activity*>(&m), log, namer));

  CuptiMemsetRecord ms{};
  ms.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  ms.bytes = 256;
  ms.start = 1'300'000;
  ms.end = 1'310'000;
  ms.streamId = 13;
  ms.correlationId = 23;
  CHECK(decode_activity(reinterpret_cast<CUpti_Activity*>(&ms), log, namer));

  CUpti_ActivityAPI api{};
  api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  api.cbid = 211;
  api.start = 1'050'000;
  api.end = 1'060'000;
  api.threadId = 77;
  api.correlationId = 21;
  CHECK(decode_activity(reinterpret_cast<CUpti_Activity*>(&api), log, namer));
  api.kind = CUPTI_ACTIVITY_KIND_DRIVER;
  api.correlationId = 24;
  CHECK(decode_activity(reinterpret_cast<CUpti_Activity*>(&api), log, namer));

  CUpti_ActivityAPI marker{};
  marker.kind = CUPTI_ACTIVITY_KIND_MARKER;  // a kind the log does not use
  CHECK_FALSE(decode_activity(reinterpret_cast<CUpti_Activity*>(&marker), log, namer));

  log.close_step(1'000'000, 2'000'000, true, 1'000'000, 77);
  const auto kernels = log.kernels();
  REQUIRE(kernels.size() == 1);
  CHECK(kernels[0].name == "conv(float*)");
  CHECK(kernels[0].phase == "forward");
  CHECK(kernels[0].total_ms == Approx(0.2));
  const auto copies = log.copies();
  REQUIRE(copies.size() == 2);
  CHECK(copies[0].direction == "h2d");
  CHECK(copies[0].memory == "pageable");
  CHECK(copies[0].bytes == (1 << 20));
  CHECK(copies[1].direction == "memset");
  const auto trace = log.take_trace();
  std::map<std::string, std::string> track_of;
  for (const auto& e : trace) track_of[e.name] = e.track;
  CHECK(track_of.at("conv(float*)") == "GPU stream 13");
  CHECK(track_of.at("rt211") == "host");
  CHECK(track_of.at("drv211") == "host");
}

TEST_CASE("CUPTI is loaded at run time, every function found", "[profiler][activity][cupti]") {
  // The binaries do not link libcupti (a machine without it still runs xrun);
  // here the toolkit's is installed, so loading it must work, and no device
  // is needed to ask its version.
  std::string why;
  const CuptiApi* api = cupti_api(&why);
  INFO(why);
  REQUIRE(api != nullptr);
  CHECK(api->library.find("libcupti") != std::string::npos);
  uint32_t version = 0;
  REQUIRE(api->get_version(&version) == CUPTI_SUCCESS);
  CHECK(version >= CUPTI_API_VERSION);
  CHECK(cupti_api() == api);  // loaded once
}

// Stand-ins for CUPTI's functions: what the collector asks of CUPTI, seen
// without a device.
namespace fake_cupti {
std::vector<std::string> calls;
CUpti_ActivityThreadIdType thread_id_type = CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT;
CUptiResult set_thread_id_type(CUpti_ActivityThreadIdType t) {
  calls.push_back("set_thread_id_type");
  thread_id_type = t;
  return CUPTI_SUCCESS;
}
CUptiResult register_callbacks(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc) {
  calls.push_back("register_callbacks");
  return CUPTI_SUCCESS;
}
CUptiResult enable(CUpti_ActivityKind) { return CUPTI_SUCCESS; }
CUptiResult flush_all(uint32_t) { return CUPTI_SUCCESS; }
}  // namespace fake_cupti

TEST_CASE("CUPTI capture asks for system thread ids before anything else",
          "[profiler][activity][cupti]") {
  // API records must carry gettid() (the host trace's thread ids, so they
  // land on the host track), not CUPTI's default pthread_self().
  CuptiApi api{};
  api.set_thread_id_type = fake_cupti::set_thread_id_type;
  api.activity_register_callbacks = fake_cupti::register_callbacks;
  api.activity_enable = fake_cupti::enable;
  api.activity_disable = fake_cupti::enable;
  api.activity_flush_all = fake_cupti::flush_all;
  std::string why;
  {
    auto capture = start_cupti_capture(api, why);
    INFO(why);
    REQUIRE(capture != nullptr);
  }
  CHECK(fake_cupti::thread_id_type == CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
  REQUIRE(fake_cupti::calls.size() >= 2);
  CHECK(fake_cupti::calls[0] == "set_thread_id_type");
  CHECK(fake_cupti::calls[1] == "register_callbacks");
}

TEST_CASE("CUPTI copy kinds map to directions and host memory", "[profiler][activity][cupti]") {
  CHECK(copy_direction(CUPTI_ACTIVITY_MEMCPY_KIND_HTOD) == CopyDirection::h2d);
  CHECK(copy_direction(CUPTI_ACTIVITY_MEMCPY_KIND_DTOH) == CopyDirection::d2h);
  CHECK(copy_direction(CUPTI_ACTIVITY_MEMCPY_KIND_DTOD) == CopyDirection::d2d);
  CHECK(copy_direction(CUPTI_ACTIVITY_MEMCPY_KIND_HTOH) == CopyDirection::h2h);
  CHECK(copy_direction(CUPTI_ACTIVITY_MEMCPY_KIND_PTOP) == CopyDirection::peer);
  CHECK(copy_direction(CUPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN) == CopyDirection::other);
  CHECK(host_memory(CopyDirection::h2d, CUPTI_ACTIVITY_MEMORY_KIND_PINNED,
                    CUPTI_ACTIVITY_MEMORY_KIND_DEVICE) == HostMemory::pinned);
  CHECK(host_memory(CopyDirection::d2h, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE,
                    CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE) == HostMemory::pageable);
  CHECK(host_memory(CopyDirection::d2d, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE,
                    CUPTI_ACTIVITY_MEMORY_KIND_DEVICE) == HostMemory::device);
}
#endif

TEST_CASE("CUPTI without a GPU: capture does not start and says why", "[profiler][activity][cupti]") {
  // No device here (or a build without CUPTI): start must refuse cleanly
  // with a reason, which the trainer prints before going on with NVTX.
  std::string why;
  auto gpu = GpuActivity::start(0, why);
  if (gpu) {
    XRUN_SKIP("CUPTI started, so this machine has a GPU");
  }
  CHECK_FALSE(why.empty());
  INFO(why);
  CHECK((why.find("CUPTI") != std::string::npos));
}

#ifdef XRUN_HAVE_CUPTI
// A fuller stand-in: CUPTI's buffer protocol. A default flush (flag 0)
// returns no buffer that holds an incomplete record (as CUPTI documents);
// a forced flush returns it, with the in-flight record's timestamps still 0.
namespace fake_cupti_buffers {
CUpti_BuffersCallbackRequestFunc request = nullptr;
CUpti_BuffersCallbackCompleteFunc complete = nullptr;
std::vector<uint32_t> flush_flags;
std::string kernel_name = "_Z6kernelv";
CUptiResult register_callbacks(CUpti_BuffersCallbackRequestFunc r,
                               CUpti_BuffersCallbackCompleteFunc c) {
  request = r;
  complete = c;
  return CUPTI_SUCCESS;
}
CUptiResult set_thread_id_type(CUpti_ActivityThreadIdType) { return CUPTI_SUCCESS; }
CUptiResult enable(CUpti_ActivityKind) { return CUPTI_SUCCESS; }
CUptiResult dropped(CUcontext, uint32_t, size_t* n) {
  *n = 0;
  return CUPTI_SUCCESS;
}
// The buffer holds a finished kernel and a copy still in flight.
CUptiResult flush_all(uint32_t flag) {
  flush_flags.push_back(flag);
  if (!(flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED)) return CUPTI_SUCCESS;
  uint8_t* buffer = nullptr;
  size_t size = 0, max_records = 0;
  request(&buffer, &size, &max_records);
  REQUIRE(size >= sizeof(CuptiKernelRecord) + sizeof(CuptiMemcpyRecord));
  CuptiKernelRecord k{};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.start = 2'000'000;
  k.end = 2'500'000;
  k.correlationId = 7;
  k.name = kernel_name.c_str();
  CuptiMemcpyRecord m{};
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  m.bytes = 1 << 20;
  m.correlationId = 8;  // start and end still 0: in flight
  std::memcpy(buffer, &k, sizeof k);
  std::memcpy(buffer + sizeof k, &m, sizeof m);
  complete(nullptr, 0, buffer, size, sizeof k + sizeof m);
  return CUPTI_SUCCESS;
}
// Records laid end to end: the kernel, then the copy.
CUptiResult next_record(uint8_t* buffer, size_t valid, CUpti_Activity** record) {
  uint8_t* at = *record == nullptr ? buffer
                                   : reinterpret_cast<uint8_t*>(*record) +
                                         ((*record)->kind == CUPTI_ACTIVITY_KIND_MEMCPY
                                              ? sizeof(CuptiMemcpyRecord)
                                              : sizeof(CuptiKernelRecord));
  if (at >= buffer + valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = reinterpret_cast<CUpti_Activity*>(at);
  return CUPTI_SUCCESS;
}
}  // namespace fake_cupti_buffers

TEST_CASE("CUPTI capture: a step's flush is forced and decodes only complete records",
          "[profiler][activity][cupti]") {
  // What it guards: with a default flush, a buffer that also holds a record
  // still in flight (the next batch's copy on the copy stream) never came
  // back, so the traced step showed no kernel at all.
  namespace f = fake_cupti_buffers;
  CuptiApi api{};
  api.set_thread_id_type = f::set_thread_id_type;
  api.activity_register_callbacks = f::register_callbacks;
  api.activity_enable = f::enable;
  api.activity_disable = f::enable;
  api.activity_flush_all = f::flush_all;
  api.activity_get_next_record = f::next_record;
  api.activity_get_num_dropped_records = f::dropped;
  std::string why;
  auto capture = start_cupti_capture(api, why);
  INFO(why);
  REQUIRE(capture != nullptr);
  RangePaths paths;
  ActivityLog log(&paths);
  capture->flush(log);
  REQUIRE_FALSE(f::flush_flags.empty());
  CHECK((f::flush_flags.back() & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) != 0);
  log.close_step(1'000'000, 3'000'000, false, 0, 0);
  REQUIRE(log.step_activity().size() == 1);
  const StepActivity& step = log.step_activity()[0];
  CHECK(step.gpu_busy_ms == Approx(0.5));  // the kernel
  REQUIRE(log.kernels().size() == 1);
  CHECK(log.kernels()[0].calls == 1);
  CHECK(log.copies().empty());  // the in-flight copy is not counted
}
#endif
