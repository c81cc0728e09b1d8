#include <benchmark/benchmark.h>
#include <cstdlib>
#include <string>
// Fills FILL_BYTES bytes per iteration; user counters: "bytes" (a plain count) and, through
// SetItemsProcessed, "items_per_second" (a rate: one item per iteration).
static void BM_fill(benchmark::State& state) {
  const std::size_t bytes = std::strtoul(std::getenv("FILL_BYTES"), nullptr, 10);
  std::string buffer;
  for (auto _ : state) {
    buffer.assign(bytes, 'x');
    benchmark::DoNotOptimize(buffer.data());
  }
  state.counters["bytes"] = static_cast<double>(bytes);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_fill);
BENCHMARK_MAIN();
