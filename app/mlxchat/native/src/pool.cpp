#include "pool.h"

#include <sched.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace mlxchat {
namespace {

constexpr int MAX_THREADS = 256;

int detect_threads() {
  if (const char* env = std::getenv("MLXCHAT_KERNEL_THREADS")) {
    int n = std::atoi(env);  // garbage reads 0: the default below
    if (n > 0) return n < MAX_THREADS ? n : MAX_THREADS;  // a huge one would spawn them all
  }
#ifdef __linux__
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
#endif
  unsigned n = std::thread::hardware_concurrency();
  return n ? static_cast<int>(n) : 1;
}

class Pool {
 public:
  explicit Pool(int threads) : threads_(threads) {
    for (int i = 1; i < threads_; ++i) workers_.emplace_back([this] { loop(); });
  }
  int threads() const { return threads_; }

  void run(int blocks, int helpers, const std::function<void(int)>& job) {
    std::lock_guard<std::mutex> serial(run_mu_);  // one job at a time
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &job;
      blocks_ = blocks;
      seats_ = helpers;
      next_.store(0);
      done_.store(0);
      open_ = true;
      ++generation_;
    }
    if (helpers == 1) wake_.notify_one(); else wake_.notify_all();
    work(job, blocks);
    std::unique_lock<std::mutex> lock(mu_);
    finished_.wait(lock, [&] { return done_.load() == blocks && active_ == 0; });
    open_ = false;  // a worker waking from now on finds nothing to join
    job_ = nullptr;
  }

 private:
  void work(const std::function<void(int)>& job, int blocks) {
    for (int b; (b = next_.fetch_add(1)) < blocks;) {
      job(b);
      if (done_.fetch_add(1) + 1 == blocks) {
        std::lock_guard<std::mutex> lock(mu_);
        finished_.notify_all();
      }
    }
  }

  void loop() {
    unsigned long seen = 0;
    for (;;) {
      const std::function<void(int)>* job;
      int blocks;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (!open_ || seats_ == 0) continue;
        --seats_;
        ++active_;
        job = job_;
        blocks = blocks_;
      }
      work(*job, blocks);
      std::lock_guard<std::mutex> lock(mu_);
      --active_;
      finished_.notify_all();
    }
  }

  int threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_, run_mu_;
  std::condition_variable wake_, finished_;
  const std::function<void(int)>* job_ = nullptr;
  int blocks_ = 0, seats_ = 0, active_ = 0;
  std::atomic<int> next_{0}, done_{0};
  unsigned long generation_ = 0;
  bool open_ = false;
};

Pool& pool() {
  // Never destroyed (its threads sleep until the process ends): joining at
  // exit could race the interpreter's teardown.
  static Pool* p = new Pool(detect_threads());
  return *p;
}

}  // namespace

int pool_threads() { return pool().threads(); }

void parallel_blocks(int blocks, int threads, const std::function<void(int)>& job) {
  if (threads > pool_threads()) threads = pool_threads();
  if (threads > blocks) threads = blocks;
  if (threads <= 1) {
    for (int b = 0; b < blocks; ++b) job(b);
    return;
  }
  pool().run(blocks, threads - 1, job);
}

void parallel_for(int parts, const std::function<void(int, int)>& job) {
  const int n = parts < pool_threads() ? parts : pool_threads();
  parallel_blocks(n, n, [&](int i) { job(i, n); });
}

}  // namespace mlxchat
