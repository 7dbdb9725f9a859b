// engine/distributed/allreduce_probe.cpp: see allreduce_probe.h.
#include "engine/distributed/allreduce_probe.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <thread>

#include "engine/distributed/communicator.h"
#include "engine/distributed/rank_stats.h"

namespace xrun::dist {

std::vector<size_t> allreduce_sizes(size_t max_bytes) {
  std::vector<size_t> out;
  for (size_t b = size_t{1} << 20; b <= std::max(max_bytes, size_t{1} << 20); b *= 4)
    out.push_back(b);
  return out;
}

std::vector<AllreduceSample> measure_allreduce(int ranks, const std::vector<size_t>& sizes,
                                               int iterations, const std::string& rendezvous) {
  std::vector<AllreduceSample> out;
  std::vector<std::exception_ptr> failed(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        RankInfo info;
        info.rank = r;
        info.size = ranks;
        info.rendezvous = rendezvous;
        info.timeout = std::chrono::seconds(60);
        const std::unique_ptr<Communicator> comm = connect_gloo(info);
        for (const size_t bytes : sizes) {
          std::vector<float> data(bytes / sizeof(float), 1.0f);
          comm->all_reduce_sum(data.data(), data.size());  // untimed: connections warm
          comm->barrier();
          const auto t0 = std::chrono::steady_clock::now();
          for (int i = 0; i < iterations; ++i) comm->all_reduce_sum(data.data(), data.size());
          const double s =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
              iterations;
          if (r == 0) {
            const double algbw = static_cast<double>(bytes) / s;
            out.push_back({bytes, s, algbw, allreduce_bus_bandwidth(static_cast<double>(bytes), s, ranks)});
          }
        }
      } catch (...) {
        failed[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& f : failed)
    if (f) std::rethrow_exception(f);
  return out;
}

}  // namespace xrun::dist
