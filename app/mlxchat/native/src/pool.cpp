#include "pool.h"

#include <sched.h>

#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace mlxchat {
namespace {

int detect_threads() {
  if (const char* env = std::getenv("MLXCHAT_KERNEL_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
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
    for (int i = 1; i < threads_; ++i) workers_.emplace_back([this, i] { loop(i); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int threads() const { return threads_; }

  void run(int parts, const std::function<void(int, int)>& job) {
    std::lock_guard<std::mutex> serial(run_mu_);  // one job at a time
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &job;
      parts_ = parts;
      pending_ = parts - 1;
      ++generation_;
    }
    wake_.notify_all();
    job(0, parts);
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return pending_ == 0; });
    job_ = nullptr;
  }

 private:
  void loop(int index) {
    unsigned long seen = 0;
    for (;;) {
      const std::function<void(int, int)>* job;
      int parts;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
        parts = parts_;
      }
      if (index < parts) {
        (*job)(index, parts);
        std::lock_guard<std::mutex> lock(mu_);
        if (--pending_ == 0) done_.notify_one();
      }
    }
  }

  int threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_, run_mu_;
  std::condition_variable wake_, done_;
  const std::function<void(int, int)>* job_ = nullptr;
  int parts_ = 0, pending_ = 0;
  unsigned long generation_ = 0;
  bool stop_ = false;
};

Pool& pool() {
  // Never destroyed: joining at exit could race the interpreter's teardown.
  static Pool* p = new Pool(detect_threads());
  return *p;
}

}  // namespace

int pool_threads() { return pool().threads(); }

void parallel_for(int parts, const std::function<void(int, int)>& job) {
  if (parts > pool_threads()) parts = pool_threads();
  if (parts <= 1) {
    job(0, 1);
    return;
  }
  pool().run(parts, job);
}

}  // namespace mlxchat
